"""The one signature every scaling policy has, and the registry configs refer to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from autoscaling.bounds import PoolBounds
from autoscaling.decision import ScalingDecision
from autoscaling.signals import PoolSignals
from autoscaling.state import AutoscalerState
from serve_app.config import AutoscalingConfig


@dataclass(frozen=True)
class Fleet:
    """Everything a policy may look at in one period."""

    signals: dict[str, PoolSignals]
    bounds: dict[str, PoolBounds]
    config: AutoscalingConfig
    shrink_order: list[str]
    now: float


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
