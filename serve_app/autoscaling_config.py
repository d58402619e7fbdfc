"""The autoscaler's config: replica bounds per pool, thresholds, budget, hysteresis."""

from __future__ import annotations

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

from serve_app.config_base import StrictModel


class PoolScalingConfig(StrictModel):
    min_replicas: int = Field(1, ge=0, description="Fewest replicas; 0 lets an idle pool scale to zero.")
    max_replicas: PositiveInt = Field(1, description="Most replicas.")
    idle_to_zero_after_s: PositiveFloat | None = Field(
        None, description="With min_replicas 0: seconds without a request before the last replica goes.",
    )

    @model_validator(mode="after")
    def _bounds_in_order(self) -> PoolScalingConfig:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas ({self.min_replicas}) is above max_replicas ({self.max_replicas})")
        return self


class AutoscalingConfig(StrictModel):
    enabled: bool = Field(False, description="Scale pools with Trilemma's policy instead of fixed replicas.")
    period_s: PositiveFloat = Field(5.0, description="Seconds between two decisions.")
    latency_headroom: float = Field(
        0.8, gt=0, le=1, description="Scale up when a p99 passes this fraction of its SLO.",
    )
    utilization_floor: float = Field(
        0.2, ge=0, lt=1, description="Scale down when engines are busier than this for less of the time.",
    )
    budget_usd_per_hour: NonNegativeFloat | None = Field(
        None, description="Most the pools' replicas may cost per hour together; null: no budget.",
    )
    shrink_order: list[str] = Field(
        default_factory=list,
        description="Pools in the order they give up replicas when over budget; unlisted pools "
        "follow, long pools before short ones.",
    )
    up_after_periods: PositiveInt = Field(1, description="Periods in a row a scale-up must be asked for.")
    down_after_periods: PositiveInt = Field(6, description="Periods in a row a scale-down must be asked for.")
    up_cooldown_s: NonNegativeFloat = Field(15.0, description="Seconds after any change before scaling up.")
    down_cooldown_s: NonNegativeFloat = Field(60.0, description="Seconds after any change before scaling down.")
    pools: dict[str, PoolScalingConfig] = Field(
        default_factory=dict, description="Replica bounds by pool; an unlisted pool keeps its `replicas`.",
    )
