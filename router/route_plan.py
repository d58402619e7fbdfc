"""A request's route and completion budget, planned on its prompt's size in tokens.

The router plans once on the prompt's estimated size, so that the request leaves while its
tokens are still being counted, and again on the exact count before the first token reaches
the client: the same plan lets the request go on; another withdraws it and sends it where the
exact count says (`Replanned`). Every refusal is made on the exact count.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from core.errors import ApiError
from router.routing import RouteDecision
from router.token_counter import PromptSize

# Plans a route for a prompt of so many tokens (`exact`: on the count, not the estimate), or
# raises the request's refusal.
PlanFor = Callable[..., "RoutePlan"]


@dataclasses.dataclass(frozen=True)
class RoutePlan:
    decision: RouteDecision
    prompt_tokens: int
    max_tokens: int
    exact: bool  # planned on the exact count, not on the estimate

    def same_route(self, other: RoutePlan) -> bool:
        """What the engine gets is the same: the pool, and the budget the request asks of it."""
        return self.decision.pool == other.decision.pool and self.max_tokens == other.max_tokens


class Replanned(Exception):
    """The exact count moved a request that was planned on its estimate (`was`) to `plan`."""

    def __init__(self, plan: RoutePlan, was: RoutePlan) -> None:
        super().__init__(plan, was)
        self.plan, self.was = plan, was

    def __str__(self) -> str:
        return (f"moved from pool {self.was.decision.pool!r} (max_tokens {self.was.max_tokens}), where an "
                f"estimate of {self.was.prompt_tokens} prompt tokens had sent it, by the exact count")


def fit_default_budget(prompt_tokens: int, max_tokens: int, *, defaulted: bool, largest: int) -> int:
    """A budget the client never asked for shrinks to fit the largest pool of the request's
    model (`largest`); an explicit one is honoured or refused."""
    if defaulted and prompt_tokens < largest < prompt_tokens + max_tokens:
        return largest - prompt_tokens
    return max_tokens


async def first_plan(size: PromptSize, plan_for: PlanFor) -> RoutePlan:
    """On the estimate while the count runs; on the count when it is already done, or when the
    estimate is refused: a refusal is only ever made on the exact count."""
    if not size.exact.done():
        try:
            return plan_for(size.estimate, exact=False)
        except ApiError:
            pass
    return plan_for(await size.exact, exact=True)


async def confirmed_plan(
    plan: RoutePlan, size: PromptSize, plan_for: PlanFor, name_route: Callable[[RoutePlan], None],
) -> RoutePlan:
    """The plan on the exact count, handed to `name_route` (the answer's headers) once it
    confirms `plan` (made on the estimate); raises Replanned when it differs, and the request's
    refusal when the count brings one."""
    exact = plan_for(await size.exact, exact=True)
    if not exact.same_route(plan):
        raise Replanned(exact, was=plan)
    name_route(exact)
    return exact
