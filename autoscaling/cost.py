"""Keep the pools' hourly cost within the budget, taking replicas from the first pools in
the shrink order; over budget, the cost profile is put in force."""

from __future__ import annotations

from autoscaling.decision import ScalingDecision
from autoscaling.policy import Fleet, ScalingPolicy
from autoscaling.state import AutoscalerState


class CostPolicy(ScalingPolicy, name="cost"):
    def decide(self, fleet: Fleet, plan: dict[str, int], state: AutoscalerState) -> list[ScalingDecision]:
        budget = fleet.config.budget_usd_per_hour
        prices = {pool: signals.usd_per_hour for pool, signals in fleet.signals.items()}
        if budget is None or any(price is None for price in prices.values()):
            state.cost_profile = False
            return []

        def cost(targets: dict[str, int]) -> float:
            return sum(targets[pool] * prices[pool] for pool in targets)

        planned = dict(plan)
        over = cost(planned) > budget
        state.cost_profile = over
        decisions = []
        for pool in fleet.shrink_order:
            floor = fleet.bounds[pool].min_replicas
            start = planned[pool]
            while cost(planned) > budget and planned[pool] > floor:
                planned[pool] -= 1
            if planned[pool] != start:
                decisions.append(ScalingDecision(
                    pool, start, planned[pool], self.name,
                    f"the plan cost ${cost(plan):.2f}/h, over the ${budget:.2f}/h budget; "
                    f"{pool} gives up {start - planned[pool]} replica(s) first (shrink order)",
                ))
        if over and cost(planned) > budget:
            decisions.append(ScalingDecision(
                fleet.shrink_order[0], planned[fleet.shrink_order[0]], planned[fleet.shrink_order[0]], self.name,
                f"every pool is at min_replicas and the pools still cost ${cost(planned):.2f}/h, "
                f"over the ${budget:.2f}/h budget",
            ))
        return decisions
