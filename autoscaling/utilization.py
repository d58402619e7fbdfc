"""Scale down pools whose engines sit mostly idle; an idle pool allowed zero replicas goes,
unless its engines sleep when idle: then it stays, asleep."""

from __future__ import annotations

from autoscaling.policy import Fleet, ScalingDecision, ScalingPolicy
from autoscaling.state import AutoscalerState

# Latency this far under the scale-up line is safe to give a replica away.
SAFE_FRACTION_OF_HEADROOM = 0.5


class UtilizationPolicy(ScalingPolicy, name="utilization"):
    """What the engines do, not request counts: a replica busy 10% of the time is paid for in
    full. By default the floor applies to batch occupancy (the share of batch slots in use
    over the period), since a batching engine serving one request at a time is busy all the
    time yet mostly idle; `utilization_measure: busy_fraction` applies it to busy time.
    Never shrinks a pool another policy just grew, nor one whose latency is not comfortably
    inside its SLO."""

    def decide(self, fleet: Fleet, plan: dict[str, int], state: AutoscalerState) -> list[ScalingDecision]:
        decisions = []
        for pool, signals in fleet.signals.items():
            bounds, current = fleet.bounds[pool], plan[pool]
            pool_state = state.pool(pool)
            idle = signals.requests_per_s == 0 and not signals.waiting and not signals.utilization
            if idle:
                pool_state.idle_since = pool_state.idle_since if pool_state.idle_since is not None else fleet.now
            elif signals.requests_per_s is not None:
                pool_state.idle_since = None
            if current != signals.replicas:  # an earlier policy changed this pool this period
                continue
            if (current == 1 and bounds.min_replicas == 0 and bounds.idle_to_zero_after_s is not None
                    and pool_state.idle_since is not None
                    and fleet.now - pool_state.idle_since >= bounds.idle_to_zero_after_s):
                idle_for = f"no request for {fleet.now - pool_state.idle_since:.0f} s"
                if bounds.sleeps_when_idle:
                    # Asleep, its GPU memory is free already, and the next request waits for a
                    # wake of seconds; gone, it would wait for a cold start of minutes.
                    decisions.append(ScalingDecision(
                        pool, current, current, self.name,
                        f"{idle_for}: its engine sleeps instead of going (sleep_when_idle): holding",
                    ))
                    continue
                decisions.append(ScalingDecision(
                    pool, current, 0, self.name,
                    f"{idle_for} (idle_to_zero_after_s {bounds.idle_to_zero_after_s:.0f})",
                ))
                continue
            floor = max(bounds.min_replicas, 1)
            measured = self._measure(fleet, signals)
            if measured is None or current <= floor or measured[0] >= fleet.config.utilization_floor:
                continue
            under = f"{measured[1]}, under the {fleet.config.utilization_floor:.0%} floor"
            unsafe = self._unsafe_latency(fleet, pool)
            if unsafe:
                decisions.append(ScalingDecision(pool, current, current, self.name, f"{under}, but {unsafe}: holding"))
                continue
            quiet_below = bounds.scale_down_below_requests_per_s
            if quiet_below is not None and (signals.requests_per_s is None or signals.requests_per_s >= quiet_below):
                continue
            decisions.append(ScalingDecision(
                pool, current, current - 1, self.name,
                under + ("" if quiet_below is None else f", at {signals.requests_per_s:.2f} req/s (under {quiet_below:g})"),
            ))
        return decisions

    @staticmethod
    def _measure(fleet: Fleet, signals) -> tuple[float, str] | None:
        """The figure the floor applies to, and how to say it; None when not reported."""
        busy = signals.utilization
        occupancy = signals.batch_occupancy if fleet.config.utilization_measure == "batch_occupancy" else None
        if occupancy is not None:
            said = f"engines' batch slots {occupancy:.0%} in use"
            return occupancy, said + ("" if busy is None else f" (busy {busy:.0%} of the time)")
        return (busy, f"engines busy {busy:.0%} of the time") if busy is not None else None

    @staticmethod
    def _unsafe_latency(fleet: Fleet, pool: str) -> str | None:
        """Why the pool's latency is not yet far enough inside its SLO to give a replica away."""
        signals, bounds = fleet.signals[pool], fleet.bounds[pool]
        line = fleet.config.latency_headroom * SAFE_FRACTION_OF_HEADROOM
        for metric, value, slo in (("TTFT", signals.ttft_p99_s, bounds.slo_ttft_s),
                                   ("TPOT", signals.tpot_p99_s, bounds.slo_tpot_s)):
            if value is not None and slo and value / slo > line:
                return f"{metric} p99 {value * 1000:.0f} ms is {value / slo:.0%} of its SLO (over {line:.0%})"
        return None
