"""The autoscaler's memory between periods, as plain data so that it survives a restart."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class PoolState:
    streak: str = "hold"  # the direction asked for in the last periods
    streak_periods: int = 0
    last_change_at: float | None = None
    idle_since: float | None = None  # when the pool last saw no request
    max_in_engine: int | None = None  # the engine concurrency set at run time; None: the config's
    calm_periods: int = 0  # periods in a row without the concurrency rule's pressure


@dataclass
class AutoscalerState:
    pools: dict[str, PoolState] = field(default_factory=dict)
    cost_profile: bool = False  # whether the cost profile is in force
    cost_profile_reason: str = ""

    def pool(self, name: str) -> PoolState:
        return self.pools.setdefault(name, PoolState())

    def to_dict(self) -> dict[str, Any]:
        return {"pools": {name: asdict(state) for name, state in self.pools.items()},
                "cost_profile": self.cost_profile, "cost_profile_reason": self.cost_profile_reason}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> AutoscalerState:
        data = data or {}
        return cls(pools={name: PoolState(**state) for name, state in data.get("pools", {}).items()},
                   cost_profile=bool(data.get("cost_profile", False)),
                   cost_profile_reason=str(data.get("cost_profile_reason", "")))
