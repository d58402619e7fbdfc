"""The seed's concurrency rule: under latency pressure at a high request rate, let each
replica hand its engine more requests at once; give them back once calm."""

from __future__ import annotations

from dataclasses import dataclass

from autoscaling.bounds import PoolBounds
from autoscaling.signals import PoolSignals
from autoscaling.state import PoolState


@dataclass(frozen=True)
class ConcurrencyDecision:
    pool: str
    current: int
    target: int
    reason: str


class ConcurrencyRulePolicy:
    """Within [the configured max_in_engine, the rule's ceiling]: one step up each period the
    rule's condition holds (p99 TTFT above X and requests/s above Y), one step down after
    `calm_after_periods` periods in a row without it. A pool without a TTFT figure holds."""

    name = "concurrency"

    def __init__(self, calm_after_periods: int) -> None:
        self.calm_after_periods = calm_after_periods

    def decide(self, signals: PoolSignals, bounds: PoolBounds, state: PoolState) -> ConcurrencyDecision | None:
        rule = bounds.raise_concurrency
        if rule is None:
            return None
        base = bounds.max_in_engine
        current = max(base, min(rule.max_in_engine, state.max_in_engine or base))
        if signals.ttft_p99_s is None or signals.requests_per_s is None:
            return ConcurrencyDecision(signals.pool, current, current, "no TTFT or request rate reported: holding")
        ttft_ms, rate = signals.ttft_p99_s * 1000, signals.requests_per_s
        if ttft_ms > rule.ttft_p99_ms_above and rate > rule.requests_per_s_above:
            state.calm_periods = 0
            target = min(rule.max_in_engine, current + rule.step)
            pressure = (f"TTFT p99 {ttft_ms:.0f} ms above {rule.ttft_p99_ms_above:.0f} ms "
                        f"at {rate:.2f} req/s (above {rule.requests_per_s_above:g})")
            return self._set(state, signals.pool, current, target,
                             pressure + ("" if target > current else f"; at the ceiling of {rule.max_in_engine}"))
        state.calm_periods = state.calm_periods + 1 if current > base else 0
        if current > base and state.calm_periods >= self.calm_after_periods:
            state.calm_periods = 0
            return self._set(state, signals.pool, current, max(base, current - rule.step),
                             f"calm for {self.calm_after_periods} periods (TTFT p99 {ttft_ms:.0f} ms, "
                             f"{rate:.2f} req/s): giving engine slots back")
        return ConcurrencyDecision(signals.pool, current, current, "rule's condition not met")

    @staticmethod
    def _set(state: PoolState, pool: str, current: int, target: int, reason: str) -> ConcurrencyDecision:
        state.max_in_engine = target
        return ConcurrencyDecision(pool, current, target, reason)
