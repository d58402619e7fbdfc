"""The one signature every scaling policy has, the decision it returns, and the registry configs refer to."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from autoscaling.bounds import PoolBounds
from autoscaling.signals import PoolSignals
from autoscaling.state import AutoscalerState
from core.config import AutoscalingConfig

if TYPE_CHECKING:
    from autoscaling.traffic_split import SplitDecision


@dataclass(frozen=True)
class ScalingDecision:
    """The replicas a pool should have, which policy asked, and why."""

    pool: str
    current: int
    target: int
    policy: str
    reason: str

    @property
    def direction(self) -> str:
        return "up" if self.target > self.current else "down" if self.target < self.current else "hold"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "direction": self.direction}


@dataclass(frozen=True)
class Fleet:
    """Everything a policy may look at in one period."""

    signals: dict[str, PoolSignals]
    bounds: dict[str, PoolBounds]
    config: AutoscalingConfig
    shrink_order: list[str]
    now: float
    split: SplitDecision | None = None  # this period's traffic split, where one runs


class ScalingPolicy:
    """Proposes targets for some pools given the plan so far (the targets of the policies
    before it); returns a decision, with its reason, for each pool it would change."""

    registry: ClassVar[dict[str, type[ScalingPolicy]]] = {}
    name: ClassVar[str]

    def __init_subclass__(cls, *, name: str, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        cls.name = name
        ScalingPolicy.registry[name] = cls

    def decide(self, fleet: Fleet, plan: dict[str, int], state: AutoscalerState) -> list[ScalingDecision]:
        raise NotImplementedError
