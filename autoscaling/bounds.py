"""What each pool is held to: its replica bounds, its SLOs and its price, from the config."""

from __future__ import annotations

from dataclasses import dataclass

from core.autoscaling_config import ConcurrencyRule
from core.config import TrilemmaConfig


@dataclass(frozen=True)
class PoolBounds:
    min_replicas: int
    max_replicas: int
    # The tightest SLO among the scenarios that may use the pool; None: not judged.
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None
    idle_to_zero_after_s: float | None = None
    # Its idle engines sleep (pools.<name>.sleep_when_idle): an idle pool sleeps instead of going.
    sleeps_when_idle: bool = False
    # Scale down for low utilization only under this request rate; None: utilization decides.
    scale_down_below_requests_per_s: float | None = None
    max_in_engine: int = 1  # a replica's engine concurrency as configured
    raise_concurrency: ConcurrencyRule | None = None


def pool_bounds(config: TrilemmaConfig) -> dict[str, PoolBounds]:
    bounds = {}
    for name, pool in config.pools.items():
        scaling = config.autoscaling.pools.get(name)
        scenarios = [s for s in config.scenarios.values() if s.admits(name, pool)]
        ttft = [s.slo_ttft_ms for s in scenarios if s.slo_ttft_ms]
        tpot = [s.slo_tpot_ms for s in scenarios if s.slo_tpot_ms]
        bounds[name] = PoolBounds(
            min_replicas=scaling.min_replicas if scaling else pool.replicas,
            max_replicas=scaling.max_replicas if scaling else pool.replicas,
            slo_ttft_s=min(ttft) / 1000 if ttft else None,
            slo_tpot_s=min(tpot) / 1000 if tpot else None,
            idle_to_zero_after_s=scaling.idle_to_zero_after_s if scaling else None,
            sleeps_when_idle=pool.sleep_when_idle.after_s is not None,
            scale_down_below_requests_per_s=scaling.scale_down_below_requests_per_s if scaling else None,
            max_in_engine=pool.max_in_engine,
            raise_concurrency=scaling.raise_concurrency if scaling else None,
        )
    return bounds


def shrink_order(config: TrilemmaConfig) -> list[str]:
    """Who gives up replicas first when the plan is over budget."""
    listed = list(config.autoscaling.shrink_order)
    rest = sorted((n for n in config.pools if n not in listed), key=lambda n: config.pools[n].role != "long")
    return listed + rest
