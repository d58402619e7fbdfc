"""Ray Serve's autoscaling config of a pool deployment, pointing at Trilemma's policy."""

from __future__ import annotations

from typing import Any

from core.config import TrilemmaConfig

POLICY_PATH = "autoscaling.serve_policy:PoolScalingPolicy"


def serve_autoscaling_config(
    config: TrilemmaConfig, pool: str, usd_per_hour: dict[str, float]
) -> dict[str, Any] | None:
    """None when the pool keeps a fixed replica count (autoscaling off, or the pool not listed)."""
    bounds = config.autoscaling.pools.get(pool)
    if not config.autoscaling.enabled or bounds is None:
        return None
    return {
        "min_replicas": bounds.min_replicas,
        "max_replicas": bounds.max_replicas,
        "initial_replicas": max(bounds.min_replicas, min(bounds.max_replicas, config.pools[pool].replicas)),
        # Our policy keeps its own streaks and cooldowns; Ray's delays would add to them.
        "upscale_delay_s": 0,
        "downscale_delay_s": 0,
        # Replicas push their stats every metrics_interval_s (10 s by default, which would make
        # every decision that stale); the controller reads the points of the look-back window.
        "metrics_interval_s": config.autoscaling.period_s,
        "look_back_period_s": 2 * config.autoscaling.period_s,
        "policy": {
            "policy_function": POLICY_PATH,
            "policy_kwargs": {"config": config.model_dump(mode="json"), "pool": pool, "usd_per_hour": usd_per_hour},
        },
    }
