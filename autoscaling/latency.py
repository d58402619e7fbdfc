"""Scale up a pool whose p99 TTFT or TPOT nears its SLO."""

from __future__ import annotations

import math

from autoscaling.policy import Fleet, ScalingDecision, ScalingPolicy
from autoscaling.state import AutoscalerState


class LatencyPolicy(ScalingPolicy, name="latency"):
    """When the worse of p99/SLO for TTFT and TPOT passes the headroom, the pool grows in
    proportion, at least by one replica: load spreads over replicas, so latency over its
    budget by a factor needs about that factor more of them."""

    def decide(self, fleet: Fleet, plan: dict[str, int], state: AutoscalerState) -> list[ScalingDecision]:
        decisions = []
        headroom = fleet.config.latency_headroom
        for pool, signals in fleet.signals.items():
            bounds = fleet.bounds[pool]
            if plan[pool] == 0 and (signals.waiting or signals.requests_per_s):
                decisions.append(ScalingDecision(
                    pool, 0, max(1, bounds.min_replicas), self.name, "requests wait for a pool with no replica",
                ))
                continue
            pressure = [(signals.ttft_p99_s / bounds.slo_ttft_s, "TTFT", signals.ttft_p99_s, bounds.slo_ttft_s)
                        for _ in [0] if signals.ttft_p99_s is not None and bounds.slo_ttft_s]
            pressure += [(signals.tpot_p99_s / bounds.slo_tpot_s, "TPOT", signals.tpot_p99_s, bounds.slo_tpot_s)
                         for _ in [0] if signals.tpot_p99_s is not None and bounds.slo_tpot_s]
            if not pressure:
                continue
            ratio, metric, value, slo = max(pressure)
            current = plan[pool]
            if ratio <= headroom or current >= bounds.max_replicas:
                continue
            pressed = (f"{metric} p99 {value * 1000:.0f} ms is {ratio:.0%} of its {slo * 1000:.0f} ms SLO "
                       f"(scale up past {headroom:.0%})")
            # The latency is that of the replicas serving; those still starting will take their
            # share of the load, so they count toward what it takes.
            serving = current if signals.serving is None else min(signals.serving, current)
            wanted = max(serving + 1, math.ceil(max(serving, 1) * ratio / headroom))
            if wanted <= current:
                decisions.append(ScalingDecision(
                    pool, current, current, self.name,
                    f"{pressed}; {current - serving} replica(s) still starting cover it: holding"))
                continue
            target = min(bounds.max_replicas, wanted)
            decisions.append(ScalingDecision(
                pool, current, target, self.name,
                pressed + ("" if target == wanted else f"; capped at max_replicas {target}"),
            ))
        return decisions
