"""Runs the soak on a running app: the mixed load, memory samples throughout, and a verdict
per target (no error the load did not ask for, RSS flat over the last stretch, no engine
orphaned, nothing held once the load is over)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.arrivals import LoadShape
from bench.load_generator import run_load
from bench.metrics import RequestRecord, percentile
from bench.pool_activity import held_once_released
from bench.result_files import fmt
from bench.soak.mixed_load import SoakPlan, clients_that_leave, schedule
from bench.soak.process_memory import Growth, Sample, growth_over, take_sample

HANG_S = 300.0


@dataclass
class SoakResult:
    plan: dict[str, Any]
    duration_s: float
    by_kind: dict[str, dict[str, Any]]
    errors: dict[str, int]
    leaving: dict[str, int]
    growth: list[dict[str, Any]]
    engines_min: int
    engines_max: int
    orphaned_engines_max: int
    held_after: dict[str, int] | None
    samples: list[dict[str, Any]] = field(default_factory=list)
    verdicts: dict[str, bool] = field(default_factory=dict)


async def run_soak(url: str, model: str, plan: SoakPlan, serve_pid: int | None = None) -> SoakResult:
    prompts, arrivals = schedule(plan)
    duration_s = plan.minutes * 60
    extra = (serve_pid,) if serve_pid else ()
    samples: list[Sample] = []
    started = time.perf_counter()

    async def sample_until(stop: asyncio.Event) -> None:
        while not stop.is_set():
            samples.append(await asyncio.to_thread(take_sample, time.perf_counter() - started, extra))
            try:
                await asyncio.wait_for(stop.wait(), plan.sample_s)
            except asyncio.TimeoutError:
                pass

    stop = asyncio.Event()
    sampler = asyncio.create_task(sample_until(stop))
    leaving = asyncio.create_task(clients_that_leave(url, model, plan.leave_rps, duration_s))
    # The schedule's send times replace the shape's own arrivals.
    records, wall_s = await run_load(url, prompts, LoadShape(rate_rps=1.0), model=model, arrivals=arrivals,
                                     timeout_s=HANG_S, progress=False, label="soak")
    outcomes = await leaving
    held = await held_once_released(url)
    stop.set()
    await sampler
    samples.append(await asyncio.to_thread(take_sample, time.perf_counter() - started, extra))
    return summarize(plan, records, outcomes, samples, held, wall_s)


def summarize(
    plan: SoakPlan, records: list[RequestRecord], leaving: Counter[str], samples: list[Sample],
    held: dict[str, int] | None, duration_s: float,
) -> SoakResult:
    by_kind: dict[str, dict[str, Any]] = {}
    errors: Counter[str] = Counter()
    for record in records:
        kind = f"{record.scenario} on {record.pool or '?'}"
        entry = by_kind.setdefault(kind, {"sent": 0, "ok": 0, "e2e_s": []})
        entry["sent"] += 1
        if record.ok:
            entry["ok"] += 1
            entry["e2e_s"].append(record.e2e_s)
        else:
            errors[" ".join(record.error.split()[:6])] += 1
    for entry in by_kind.values():
        e2e = entry.pop("e2e_s")
        entry["e2e_p50_s"] = percentile(e2e, 50) if e2e else None
        entry["e2e_p99_s"] = percentile(e2e, 99) if e2e else None
    growth = growth_over(samples, plan.window_min * 60)
    result = SoakResult(
        plan=plan.model_dump(), duration_s=duration_s, by_kind=by_kind, errors=dict(errors),
        leaving=dict(leaving), growth=[_growth_row(g) for g in growth],
        engines_min=min((s.engines for s in samples), default=0),
        engines_max=max((s.engines for s in samples), default=0),
        orphaned_engines_max=max((s.orphaned_engines for s in samples), default=0),
        held_after=held, samples=[asdict(s) for s in samples],
    )
    left_badly = sum(count for outcome, count in leaving.items() if outcome != "200")
    result.verdicts = {
        "no error the load did not ask for": not errors and not left_badly,
        f"RSS growth under {plan.growth_limit:.0%} per process over the last {plan.window_min:.0f} min":
            bool(growth) and all(g.fraction < plan.growth_limit for g in growth),
        "engine processes flat, none orphaned":
            result.engines_min == result.engines_max and result.orphaned_engines_max == 0,
        "nothing held once the load is over": held is not None and not any(held.values()),
    }
    return result


def _growth_row(growth: Growth) -> dict[str, Any]:
    return {"process": growth.process, "start_mib": round(growth.start_mib, 1),
            "end_mib": round(growth.end_mib, 1), "growth": round(growth.fraction, 4)}


def markdown(result: SoakResult, meta: dict[str, Any]) -> str:
    plan = result.plan
    lines = [
        f"# {meta['name']}\n",
        f"Command: `{meta['command']}`\n",
        f"{plan['minutes']:.0f} minutes on {meta['url']} ({meta.get('machine', 'machine not recorded')}): chat {plan['chat_rps']} req/s, long documents "
        f"{plan['long_rps']} req/s, batch {plan['batch_rps']} req/s, clients leaving mid-stream "
        f"{plan['leave_rps']} req/s; memory read every {plan['sample_s']:.0f} s.\n",
        "| target | met |", "| --- | --- |",
        *(f"| {name} | {'yes' if met else '**no**'} |" for name, met in result.verdicts.items()),
        "\n| requests | sent | answered | E2E p50 / p99 (s) |", "| --- | --- | --- | --- |",
        *(f"| {kind} | {e['sent']} | {e['ok']} | {fmt(e['e2e_p50_s'])} / {fmt(e['e2e_p99_s'])} |"
          for kind, e in sorted(result.by_kind.items())),
        f"\nClients that left: {result.leaving or 'none'}. Errors: {result.errors or 'none'}. "
        f"Engine processes: {result.engines_min} to {result.engines_max}, orphaned at most "
        f"{result.orphaned_engines_max}. Held once the load was over: {result.held_after}.\n",
        f"\nRSS over the last {plan['window_min']:.0f} minutes, per process alive through them:\n",
        "| process | start (MiB) | end (MiB) | growth |", "| --- | --- | --- | --- |",
        *(f"| {g['process']} | {g['start_mib']:.0f} | {g['end_mib']:.0f} | {g['growth']:+.1%} |" for g in result.growth),
    ]
    return "\n".join(lines) + "\n"
