"""Keep the pools' hourly cost within the budget, taking replicas from the first pools in
the shrink order; over budget, the cost profile is put in force."""

from __future__ import annotations

from autoscaling.policy import Fleet, ScalingDecision, ScalingPolicy
from autoscaling.state import AutoscalerState


class CostPolicy(ScalingPolicy, name="cost"):
    def decide(self, fleet: Fleet, plan: dict[str, int], state: AutoscalerState) -> list[ScalingDecision]:
        prices = {pool: signals.usd_per_hour for pool, signals in fleet.signals.items()}
        if any(price is None for price in prices.values()):
            state.cost_profile, state.cost_profile_reason = False, "a pool reports no price"
            return []

        def cost(targets: dict[str, int]) -> float:
            return sum(targets[pool] * prices[pool] for pool in targets)

        expensive = self._expensive_requests(fleet, cost({pool: s.replicas for pool, s in fleet.signals.items()}))
        budget = fleet.config.budget_usd_per_hour
        if budget is None:
            state.cost_profile, state.cost_profile_reason = expensive is not None, expensive or ""
            return []
        planned = dict(plan)
        over = cost(planned) > budget
        state.cost_profile = over or expensive is not None
        state.cost_profile_reason = "; ".join(
            ([f"the plan costs ${cost(plan):.2f}/h, over the ${budget:.2f}/h budget"] if over else [])
            + ([expensive] if expensive else []))
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

    @staticmethod
    def _expensive_requests(fleet: Fleet, usd_per_hour: float) -> str | None:
        """Why requests cost more than the configured limit each, or None: the pools' cost
        spread over the requests they serve (an idle fleet has no cost per request)."""
        limit = fleet.config.cost_profile.usd_per_request_above
        rate = sum(signals.requests_per_s or 0.0 for signals in fleet.signals.values())
        if limit is None or rate <= 0:
            return None
        per_request = usd_per_hour / 3600 / rate
        if per_request <= limit:
            return None
        return f"${per_request:.6f} per request at {rate:.2f} req/s, above the ${limit:g} limit"
