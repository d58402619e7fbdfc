"""A scaling decision: the replicas a pool should have, which policy asked, and why."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class ScalingDecision:
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
