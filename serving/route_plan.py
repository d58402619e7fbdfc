"""A request's route and completion budget, planned on its prompt's size in tokens.

The router plans once on the prompt's estimated size, so that the request leaves while its
tokens are still being counted, and again on the exact count before the first token reaches
the client: the same plan lets the request go on; another withdraws it and sends it where the
exact count says (`Replanned`). Every refusal is made on the exact count.
"""

from __future__ import annotations

import dataclasses

from serving.routing import RouteDecision


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
