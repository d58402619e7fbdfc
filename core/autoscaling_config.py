"""The autoscaler's config: replica bounds per pool, thresholds, budget, hysteresis."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

from core.config_base import StrictModel


class ConcurrencyRule(StrictModel):
    """The seed's rule: when p99 TTFT is above X while the pool serves more than Y requests/s,
    let each replica take more requests into its engine (a bigger batch drains a queue that
    waits for slots), step by step up to a ceiling; back down once calm again."""

    ttft_p99_ms_above: PositiveFloat = Field(description="X: the p99 TTFT, in ms, that calls for more.")
    requests_per_s_above: NonNegativeFloat = Field(0.0, description="Y: only while the pool serves more than this.")
    step: PositiveInt = Field(2, description="Requests added (or taken back) per decision.")
    max_in_engine: PositiveInt = Field(
        description="Ceiling of a replica's engine concurrency (its admission.max_in_engine at run time).",
    )


class PoolScalingConfig(StrictModel):
    min_replicas: int = Field(1, ge=0, description="Fewest replicas; 0 lets an idle pool scale to zero.")
    max_replicas: PositiveInt = Field(1, description="Most replicas.")
    idle_to_zero_after_s: PositiveFloat | None = Field(
        None, description="With min_replicas 0: seconds without a request before the last replica goes.",
    )
    scale_down_below_requests_per_s: NonNegativeFloat | None = Field(
        None, description="V: scale down for low utilization only while the pool serves fewer requests/s "
        "than this; null: utilization alone decides.",
    )
    raise_concurrency: ConcurrencyRule | None = Field(
        None, description="Raise the replicas' engine concurrency under latency pressure; null: fixed.",
    )

    @model_validator(mode="after")
    def _bounds_in_order(self) -> PoolScalingConfig:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas ({self.min_replicas}) is above max_replicas ({self.max_replicas})")
        return self


class CostProfileConfig(StrictModel):
    """What the router does while the pools cost too much: over the budget, or (when set)
    above a cost per request. Real-time classes keep their own profile."""

    usd_per_request_above: PositiveFloat | None = Field(
        None, description="C: put the profile in force when the pools' $/hour over their requests/s "
        "costs more than this per request; null: only the budget does.",
    )
    max_tokens_cap: PositiveInt = Field(256, description="Tighter max_tokens cap for the classes it applies to.")
    cheapest_pool: bool = Field(True, description="Send those classes to the cheapest pool that fits.")
    from_priority: int = Field(1, description="The profile applies to scenarios of this priority and below "
                               "(a higher number); 0 (real-time) is exempt by default.")


class TrafficSplitConfig(StrictModel):
    """The split between a short and a long pool, fitted to the traffic: the routing threshold
    moves (and, where it cannot move further, a replica) towards the pool with room, from the
    sizes of the requests the pools served and how loaded each pool is."""

    enabled: bool = Field(False, description="Tune the routing threshold (and replicas) at run time.")
    short_pool: str | None = Field(None, description="The pool below the threshold; null: the first pool of role short.")
    long_pool: str | None = Field(None, description="The pool above it; null: the first pool of role long.")
    min_threshold_tokens: PositiveInt = Field(
        256, description="Lowest threshold the tuner may set (prompt + max_tokens).",
    )
    max_threshold_tokens: PositiveInt | None = Field(
        None, description="Highest threshold it may set; null: the short pool's max_model_len.",
    )
    balance_band: float = Field(
        0.2, gt=0, lt=1, description="Move only while the pools' loads (0 idle, 1 full, above 1 queued) "
        "differ by more than this.",
    )
    min_load: float = Field(
        0.3, ge=0, le=1, description="Move only while the busier pool's load is at least this: two "
        "lightly loaded pools serve every request at once wherever it goes.",
    )
    after_periods: PositiveInt = Field(3, description="Periods in a row a move must be asked for.")
    cooldown_s: NonNegativeFloat = Field(30.0, description="Seconds after a move before the next; the "
                                         "pools' figures must first show its effect.")
    max_step: float = Field(2.0, gt=1, description="Largest factor one move changes the threshold by.")
    move_replicas: bool = Field(
        True, description="With the threshold at its bound, move a replica from the idler pool to the "
        "busier one (within their min/max replicas).",
    )
    replica_move_above: float = Field(
        0.8, gt=0, description="... only while the busier pool's load is at least this (a pressed pool).",
    )

    @model_validator(mode="after")
    def _bounds_in_order(self) -> TrafficSplitConfig:
        if self.max_threshold_tokens is not None and self.max_threshold_tokens < self.min_threshold_tokens:
            raise ValueError(f"max_threshold_tokens ({self.max_threshold_tokens}) is below min_threshold_tokens "
                             f"({self.min_threshold_tokens})")
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
    utilization_measure: Literal["batch_occupancy", "busy_fraction"] = Field(
        "batch_occupancy", description="What the floor applies to: the share of the engines' batch slots in use "
        "(a batching engine busy with one request is mostly idle), or the share of time they had any request.",
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
    cost_profile: CostProfileConfig = Field(
        default_factory=CostProfileConfig, description="When and how requests are made cheaper.",
    )
    pools: dict[str, PoolScalingConfig] = Field(
        default_factory=dict, description="Replica bounds and rules by pool; an unlisted pool keeps its `replicas`.",
    )
    split: TrafficSplitConfig = Field(
        default_factory=TrafficSplitConfig, description="The short/long split fitted to the traffic at run time.",
    )
