"""One control loop over every pool: the policies propose, hysteresis and clamps decide.

Each period the policies run in order on a shared plan (latency may grow a pool,
utilization may shrink one nobody grew, cost trims the plan to the budget). A change is made
only once it has been asked for enough periods in a row and the pool's cooldown has passed,
except a cut to meet the budget, which is made at once. Pools without metrics hold.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autoscaling.bounds import PoolBounds
from autoscaling.concurrency import ConcurrencyDecision, ConcurrencyRulePolicy
from autoscaling.cost import CostPolicy
from autoscaling.latency import LatencyPolicy
from autoscaling.policy import Fleet, ScalingDecision, ScalingPolicy
from autoscaling.signals import PoolSignals
from autoscaling.state import AutoscalerState
from autoscaling.traffic_split import SplitDecision, SplitReplicaPolicy, TrafficSplit
from autoscaling.utilization import UtilizationPolicy
from core.config import AutoscalingConfig

DEFAULT_POLICIES = (LatencyPolicy, UtilizationPolicy, SplitReplicaPolicy, CostPolicy)


@dataclass(frozen=True)
class Step:
    """One period's outcome: the decision for every pool (hold included), the engine
    concurrency of the pools with a concurrency rule, whether the cost profile is in force, and
    the traffic split's decision where one runs."""

    decisions: dict[str, ScalingDecision]
    cost_profile: bool
    cost_profile_reason: str = ""
    concurrency: dict[str, ConcurrencyDecision] = field(default_factory=dict)
    split: SplitDecision | None = None

    def targets(self) -> dict[str, int]:
        return {pool: decision.target for pool, decision in self.decisions.items()}


class Autoscaler:
    def __init__(self, config: AutoscalingConfig, bounds: dict[str, PoolBounds], shrink_order: list[str],
                 state: AutoscalerState | None = None,
                 policies: tuple[type[ScalingPolicy], ...] = DEFAULT_POLICIES) -> None:
        self.config = config
        self.bounds = bounds
        self.shrink_order = shrink_order
        self.state = state or AutoscalerState()
        self.policies = [policy() for policy in policies]
        self.concurrency_rule = ConcurrencyRulePolicy(calm_after_periods=config.down_after_periods)

    def step(self, signals: dict[str, PoolSignals], now: float, split: TrafficSplit | None = None) -> Step:
        """One period over every pool; `split`, the fleet's traffic split (shared by every pool's
        policy), decides first: its threshold moves before replicas do."""
        current = {pool: s.replicas for pool, s in signals.items()}
        plan = {pool: self._clamp(pool, n) for pool, n in current.items()}
        split_decision = split.decide(signals, self.bounds, plan, now) if split is not None else None
        fleet = Fleet(signals=signals, bounds=self.bounds, config=self.config,
                      shrink_order=[p for p in self.shrink_order if p in signals], now=now, split=split_decision)
        why: dict[str, ScalingDecision] = {}
        for policy in self.policies:
            for decision in policy.decide(fleet, plan, self.state):
                plan[decision.pool] = decision.target
                why[decision.pool] = decision
        decisions = {pool: self._settle(pool, current[pool], plan[pool], why.get(pool), signals[pool], now)
                     for pool in signals}
        concurrency = {pool: self.concurrency_rule.decide(s, self.bounds[pool], self.state.pool(pool))
                       for pool, s in signals.items()}
        return Step(decisions, self.state.cost_profile, self.state.cost_profile_reason,
                    {pool: decision for pool, decision in concurrency.items() if decision is not None},
                    split_decision)

    def _clamp(self, pool: str, replicas: int) -> int:
        bounds = self.bounds[pool]
        return max(bounds.min_replicas, min(bounds.max_replicas, replicas))

    def _settle(self, pool: str, current: int, proposed: int, why: ScalingDecision | None,
                signals: PoolSignals, now: float) -> ScalingDecision:
        state = self.state.pool(pool)
        proposed = self._clamp(pool, proposed)
        if proposed == current:
            state.streak, state.streak_periods = "hold", 0
            reason = why.reason if why else self._steady_reason(signals)
            return ScalingDecision(pool, current, current, why.policy if why else "hold", reason)
        direction = "up" if proposed > current else "down"
        state.streak_periods = state.streak_periods + 1 if state.streak == direction else 1
        state.streak = direction
        policy, reason = (why.policy, why.reason) if why else ("bounds", "outside min/max replicas")
        # The budget and the bounds do not wait; the split waited its own streak and cooldown.
        if policy in (CostPolicy.name, SplitReplicaPolicy.name) or why is None:
            return self._apply(pool, current, proposed, policy, reason, now)
        needed = self.config.up_after_periods if direction == "up" else self.config.down_after_periods
        if state.streak_periods < needed:
            return ScalingDecision(pool, current, current, policy,
                                   f"{reason}; waiting: asked {state.streak_periods} of {needed} periods")
        cooldown = self.config.up_cooldown_s if direction == "up" else self.config.down_cooldown_s
        if state.last_change_at is not None and now - state.last_change_at < cooldown:
            return ScalingDecision(pool, current, current, policy,
                                   f"{reason}; cooling down: {now - state.last_change_at:.0f} of {cooldown:.0f} s "
                                   "since the last change")
        return self._apply(pool, current, proposed, policy, reason, now)

    def _apply(self, pool: str, current: int, target: int, policy: str, reason: str, now: float) -> ScalingDecision:
        state = self.state.pool(pool)
        state.last_change_at, state.streak, state.streak_periods = now, "hold", 0
        return ScalingDecision(pool, current, target, policy, reason)

    @staticmethod
    def _steady_reason(signals: PoolSignals) -> str:
        if signals.ttft_p99_s is None and signals.tpot_p99_s is None and signals.utilization is None:
            return f"no metrics from pool {signals.pool}: holding {signals.replicas} replica(s)"
        return "within SLOs and above the utilization floor"
