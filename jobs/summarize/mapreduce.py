"""Map-reduce summarization of one document: its chunks summarized at once, then the partial
summaries combined, in rounds, until one is left.

The model is behind one async function (`Complete`), so the same logic runs against the app,
and tests run it against a stand-in.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from jobs.summarize.chunking import combine_groups
from jobs.summarize.prompts import Messages, Prompts


@dataclass(frozen=True)
class Completion:
    """One answer and what it cost, as the server reported it."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None = None
    pool: str | None = None


Complete = Callable[[Messages], Awaitable[Completion]]


@dataclass
class Outcome:
    """A document's summary and the sum over every request it took."""

    summary: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    pools: set[str] = field(default_factory=set)
    requests: int = 0

    def add(self, completion: Completion) -> None:
        self.input_tokens += completion.prompt_tokens
        self.output_tokens += completion.completion_tokens
        if completion.cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + completion.cost_usd
        if completion.pool:
            self.pools.add(completion.pool)
        self.requests += 1


@dataclass(frozen=True)
class Partial:
    text: str
    tokens: int


async def summarize_document(
    chunks: list[str], complete: Complete, prompts: Prompts, combine_budget_tokens: int,
    outcome: Outcome | None = None,
) -> Outcome:
    """One request per chunk (concurrently), then rounds of combining. A summary left alone in
    its group passes to the next round as it is: re-summarizing it would only lose detail.
    Spending accrues in `outcome` as requests finish, so a document that fails halfway still
    reports what it cost."""
    outcome = outcome if outcome is not None else Outcome()

    async def ask(messages: Messages) -> Partial:
        completion = await complete(messages)
        outcome.add(completion)
        return Partial(completion.text, completion.completion_tokens)

    async def combined(group: list[int], partials: list[Partial]) -> Partial:
        if len(group) == 1:
            return partials[group[0]]
        return await ask(prompts.combine([partials[index].text for index in group]))

    partials = await _all([ask(prompts.summarize(chunk)) for chunk in chunks])
    while len(partials) > 1:
        groups = combine_groups([partial.tokens for partial in partials], combine_budget_tokens)
        if len(groups) == len(partials):
            raise ValueError(f"no two partial summaries fit a combine prompt of {combine_budget_tokens} tokens")
        partials = await _all([combined(group, partials) for group in groups])
    outcome.summary = partials[0].text.strip() if partials else ""
    return outcome


async def _all(coroutines: list[Awaitable[Partial]]) -> list[Partial]:
    """Every result, in order; on the first failure the document's other requests are
    cancelled (they would be wasted) and that failure is raised as it is."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(coroutine) for coroutine in coroutines]
    except BaseExceptionGroup as failures:
        raise failures.exceptions[0] from None
    return [task.result() for task in tasks]
