"""One measured load point: the run itself, the pools' busy clocks around it, the summary.

Shared by `bench run`, `bench sweep` and the other commands, so that every figure in
`bench/results/` is computed the same way.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any

import httpx

from bench.arrivals import LoadShape
from bench.datasets import Prompt, load_dataset
from bench.load_generator import run_load
from bench.metrics import Slo, summarize
from bench.pool_activity import capacity_cost, read_pool_activity, utilization


class EndpointError(RuntimeError):
    """The endpoint under test cannot be used (unreachable, or lists no model)."""


@dataclass(frozen=True)
class Workload:
    """What every load point sends: warm-up prompts, then one prompt list per round."""

    warmup: list[Prompt]
    rounds: list[list[Prompt]]
    slos: dict[str, Slo]
    seed: int = 0

    @classmethod
    def build(
        cls, dataset: str, *, num_prompts: int, rounds: int, warmup: int, slos: dict[str, Slo],
        seed: int = 0, path=None, scenario: str | None = None, ignore_eos: bool = False,
    ) -> Workload:
        prompts = load_dataset(dataset, num_prompts * rounds + warmup, path=path, seed=seed)
        extra = {"ignore_eos": True} if ignore_eos else {}
        prompts = [replace(p, scenario=scenario or p.scenario, extra={**p.extra, **extra}) for p in prompts]
        measured = prompts[warmup:]
        return cls(
            warmup=prompts[:warmup],
            rounds=[measured[i * num_prompts:(i + 1) * num_prompts] for i in range(rounds)],
            slos=slos,
            seed=seed,
        )


def resolve_model(url: str) -> str:
    """The first model the endpoint lists."""
    try:
        return httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]["id"]
    except (httpx.HTTPError, ValueError, KeyError, IndexError) as error:
        raise EndpointError(f"cannot list models at {url}/v1/models: {error!r}") from None


def warm_up(url: str, workload: Workload, model: str, api_key: str | None = None) -> None:
    if workload.warmup:
        asyncio.run(run_load(url, workload.warmup, LoadShape(concurrency=len(workload.warmup)),
                             model=model, progress=False, api_key=api_key))


def run_point(
    url: str, workload: Workload, shape: LoadShape, *, model: str, progress: bool = True,
    api_key: str | None = None,
) -> list[dict[str, Any]]:
    """Every round of the workload at one load shape; one result point per round."""
    points = []
    for index, batch in enumerate(workload.rounds):
        before = read_pool_activity(url)
        records, duration = asyncio.run(run_load(
            url, batch, shape, model=model, seed=workload.seed + index,
            progress=progress, label=f"{shape.describe()} round {index + 1}", api_key=api_key,
        ))
        pools = utilization(before, read_pool_activity(url))
        summary = summarize(records, duration, workload.slos)
        points.append({
            "load": shape.describe(), "round": index + 1,
            "summary": {**summary, "pools": pools, **capacity_cost(summary, pools)},
            "records": [r.to_dict() for r in records],
        })
    return points
