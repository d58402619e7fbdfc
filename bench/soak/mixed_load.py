"""The soak's load: chat questions, long documents, batch requests and clients that leave
mid-stream, each a Poisson stream of its own rate, for the whole run."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import Counter

import aiohttp
from pydantic import Field, PositiveFloat, model_validator

from bench.arrivals import poisson_arrival_times
from bench.datasets import Prompt, docs_dataset
from core import wire
from core.config_base import StrictModel


class SoakPlan(StrictModel):
    minutes: PositiveFloat = Field(30.0, description="How long the load runs, in minutes.")
    # A soak is a load the app sustains; overloads are `bench isolation`'s and `bench chaos`'s.
    # The rates fit the default app on 2 AVX2 cores, the slowest machine it is run on: there the
    # short pool's one core makes about 33 tokens/s at a batch of 8, and chat at 0.3 req/s with
    # batch at 0.1 asked for more (its admission queue shed 14 of 180 batch requests). The long
    # pool answers a document in about 40 s, so 0.03 req/s kept it at capacity.
    chat_rps: float = Field(0.15, ge=0, description="Chat questions about one paragraph (scenario chat).")
    long_rps: float = Field(0.015, ge=0, description="Documents of ~1,200 words to summarize (the long pool).")
    batch_rps: float = Field(0.05, ge=0, description="Questions in the batch scenario.")
    leave_rps: float = Field(0.1, ge=0, description="Streams whose client leaves after the first chunk.")
    sample_s: PositiveFloat = Field(30.0, description="How often every serving process's memory is read.")
    window_min: PositiveFloat = Field(20.0, description="The last minutes of the run, over which memory growth is measured.")
    growth_limit: PositiveFloat = Field(0.05, description="Largest RSS growth of a process over the window.")

    @model_validator(mode="after")
    def _window_inside_the_run(self) -> SoakPlan:
        if self.window_min > self.minutes:
            raise ValueError(f"window_min {self.window_min} is longer than the run ({self.minutes} minutes)")
        return self


def schedule(plan: SoakPlan, seed: int = 0) -> tuple[list[Prompt], list[float]]:
    """Every request of the run (but the leaving clients) and its send time, in time order."""
    duration_s = plan.minutes * 60
    kinds = [
        (plan.chat_rps, docs_dataset, {"long_fraction": 0.0}, "chat"),
        (plan.long_rps, docs_dataset, {"long_fraction": 1.0}, "chat"),
        (plan.batch_rps, docs_dataset, {"long_fraction": 0.0}, "batch"),
    ]
    timed: list[tuple[float, Prompt]] = []
    for offset, (rate, dataset, options, scenario) in enumerate(kinds):
        count = int(rate * duration_s)
        if count == 0:
            continue
        prompts = dataset(count, seed=seed + offset, **options)
        times = poisson_arrival_times(rate, count, seed + offset)
        timed += [(t, dataclasses.replace(p, scenario=scenario)) for t, p in zip(times, prompts)]
    timed.sort(key=lambda pair: pair[0])
    return [p for _, p in timed], [t for t, _ in timed]


async def clients_that_leave(url: str, model: str, rate_rps: float, duration_s: float, seed: int = 0) -> Counter[str]:
    """Streams opened at `rate_rps` whose clients leave after the first event; what each got."""
    if rate_rps <= 0:
        return Counter()
    body = {"model": model, "messages": [{"role": "user", "content": "Tell me a long story."}],
            "max_tokens": 64, "stream": True}
    outcomes: Counter[str] = Counter()

    async def leave(session: aiohttp.ClientSession) -> None:
        try:
            async with session.post("v1/chat/completions", json=body,
                                    headers={wire.SCENARIO_HEADER: "chat"}) as response:
                if response.status == 200:
                    await response.content.readline()  # the first event, then the connection closes
                outcomes[str(response.status)] += 1
        except (aiohttp.ClientError, asyncio.TimeoutError) as error:
            outcomes[type(error).__name__] += 1

    started = time.perf_counter()
    async with aiohttp.ClientSession(url.rstrip("/") + "/", connector=aiohttp.TCPConnector(limit=0),
                                     timeout=aiohttp.ClientTimeout(total=120)) as session:
        tasks = []
        for at in poisson_arrival_times(rate_rps, int(rate_rps * duration_s), seed):
            await asyncio.sleep(max(0.0, at - (time.perf_counter() - started)))
            tasks.append(asyncio.create_task(leave(session)))
        await asyncio.gather(*tasks)
    return outcomes
