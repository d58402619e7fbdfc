"""Planning a route on a prompt's estimated size, confirmed or moved by its exact count."""

from __future__ import annotations

import asyncio

import pytest

from core.errors import ApiError
from router.route_plan import Replanned, RoutePlan, confirmed_plan, first_plan, fit_default_budget
from router.routing import RouteDecision
from router.token_counter import PromptSize

THRESHOLD, LARGEST = 1024, 8192


def plan_for(prompt_tokens: int, *, exact: bool) -> RoutePlan:
    """Short pool up to the threshold, long pool up to the largest, refused beyond (5 tokens out)."""
    if prompt_tokens + 5 > LARGEST:
        raise ApiError(400, f"prompt {prompt_tokens} over {LARGEST}", code="context_length_exceeded")
    pool = "short" if prompt_tokens + 5 <= THRESHOLD else "long"
    return RoutePlan(RouteDecision(pool, f"prompt {prompt_tokens}"), prompt_tokens, 5, exact)


async def counted(tokens: int, estimate: int) -> tuple[PromptSize, asyncio.Event]:
    """A size whose count finishes when the returned event is set."""
    release = asyncio.Event()

    async def count() -> int:
        await release.wait()
        return tokens

    return PromptSize(estimate=estimate, exact=asyncio.ensure_future(count())), release


async def test_the_first_plan_is_the_estimates_while_the_count_runs():
    size, release = await counted(tokens=300, estimate=250)
    plan = await first_plan(size, plan_for)
    assert (plan.decision.pool, plan.prompt_tokens, plan.exact) == ("short", 250, False)
    release.set()
    named: list[RoutePlan] = []
    confirmed = await confirmed_plan(plan, size, plan_for, named.append)
    assert named == [confirmed] and (confirmed.prompt_tokens, confirmed.exact) == (300, True)


async def test_an_estimate_that_would_be_refused_waits_for_the_count():
    size, release = await counted(tokens=1800, estimate=9000)
    planning = asyncio.ensure_future(first_plan(size, plan_for))
    await asyncio.sleep(0)
    assert not planning.done()
    release.set()
    plan = await planning
    assert (plan.decision.pool, plan.exact) == ("long", True)


async def test_a_count_that_changes_the_pool_moves_the_request_and_names_nothing():
    size, release = await counted(tokens=1530, estimate=330)
    plan = await first_plan(size, plan_for)
    release.set()
    named: list[RoutePlan] = []
    with pytest.raises(Replanned) as moved:
        await confirmed_plan(plan, size, plan_for, named.append)
    assert (moved.value.was.decision.pool, moved.value.plan.decision.pool) == ("short", "long")
    assert "moved from pool 'short'" in str(moved.value) and named == []


async def test_a_count_that_refuses_raises_the_refusal():
    size, release = await counted(tokens=9030, estimate=1800)
    plan = await first_plan(size, plan_for)
    release.set()
    with pytest.raises(ApiError, match="prompt 9030"):
        await confirmed_plan(plan, size, plan_for, lambda plan: None)


def test_only_a_defaulted_budget_shrinks_to_the_largest_pool():
    assert fit_default_budget(8000, 512, defaulted=True, largest=8192) == 192
    assert fit_default_budget(8000, 512, defaulted=False, largest=8192) == 512
    assert fit_default_budget(100, 512, defaulted=True, largest=8192) == 512
