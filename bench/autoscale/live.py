"""The autoscaler live: the app deployed with its real engines, chat traffic that goes quiet,
bursts past one replica's capacity and goes quiet again, and a timeline sampled every second
(replicas paid and serving, the client's p99 TTFT, $/hour) beside the policy's decisions."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

import aiohttp

from bench.autoscale.bursty_trace import Phase, arrivals
from bench.datasets import load_dataset
from bench.load_generator import send_one
from bench.metrics import RequestRecord, percentile
from core.config import TrilemmaConfig
from serve_app.autoscale_cli import read_decisions

ROLLING_S = 30.0  # the client's p99 covers the first tokens of this many seconds, as a replica's does


def burst_phases(quiet_rate: float, burst_rate: float, quiet_s: float, burst_s: float, after_s: float) -> list[Phase]:
    return [Phase("quiet", quiet_s, quiet_rate, quiet_rate), Phase("burst", burst_s, burst_rate, burst_rate),
            Phase("quiet", after_s, quiet_rate, quiet_rate)]


def _replica_counts(app: str, deployment: str) -> tuple[int, int]:
    """(paid, serving): replicas that exist in any state, and those running."""
    from ray import serve

    states = serve.status().applications[app].deployments[deployment].replica_states
    counts = {str(state).rsplit(".", 1)[-1]: count for state, count in states.items()}
    return sum(counts.values()), counts.get("RUNNING", 0)


def _decisions(app: str, pool: str) -> list[dict[str, Any]]:
    return read_decisions(app, [pool])[pool]


def _rolling_p99(records: list[RequestRecord], now: float) -> float | None:
    recent = [r.ttft_s for r in records if r.ttft_s is not None and now - ROLLING_S < r.started_s + r.ttft_s <= now]
    return percentile(recent, 99) if recent else None


async def run_live(config: TrilemmaConfig, url: str, model: str, pool: str, phases: list[Phase], *,
                   output_tokens: int, scenario: str, usd_per_hour: float, seed: int = 0) -> dict[str, Any]:
    schedule = arrivals(phases, prompt_tokens=(0, 0), output_tokens=(output_tokens, output_tokens), seed=seed)
    prompts = load_dataset("questions", len(schedule), seed=seed)
    prompts = [replace(p, max_tokens=output_tokens, scenario=scenario, extra={**p.extra, "ignore_eos": True})
               for p in prompts]
    records: list[RequestRecord] = []
    timeline: list[dict[str, Any]] = []
    deployment = f"pool-{pool}"
    started = time.perf_counter()
    wall_started = time.time()
    done = asyncio.Event()

    seen: dict[float, dict[str, Any]] = {}  # decisions by time: the board keeps only the latest

    async def sample() -> None:
        while not done.is_set():
            now = time.perf_counter() - started
            paid, serving = await asyncio.to_thread(_replica_counts, config.app_name, deployment)
            timeline.append({"t": now, "replicas": paid, "serving": serving,
                             "ttft_p99_s": _rolling_p99(records, now), "usd_per_hour": paid * usd_per_hour})
            if len(timeline) % 5 == 0:
                seen.update((d["at"], d) for d in await asyncio.to_thread(_decisions, config.app_name, pool))
            await asyncio.sleep(1.0)

    async def send(session: aiohttp.ClientSession, at: float, prompt) -> None:
        await asyncio.sleep(max(0.0, at - (time.perf_counter() - started)))
        records.append(await send_one(session, prompt, model, started))

    sampler = asyncio.create_task(sample())
    timeout = aiohttp.ClientTimeout(total=config.router.request_timeout_s)
    async with aiohttp.ClientSession(base_url=url.rstrip("/") + "/", timeout=timeout) as session:
        await asyncio.gather(*(send(session, request.at, prompt) for request, prompt in zip(schedule, prompts)))
        # Quiet to the end of the last phase, so that the scale-down is in the timeline.
        end = sum(p.seconds for p in phases)
        await asyncio.sleep(max(0.0, end - (time.perf_counter() - started)))
    done.set()
    await sampler
    seen.update((d["at"], d) for d in _decisions(config.app_name, pool))
    decisions = [{**d, "at": d["at"] - wall_started, **({"until": d["until"] - wall_started} if "until" in d else {})}
                 for _, d in sorted(seen.items())]
    return {"records": records, "timeline": timeline, "decisions": [d for d in decisions if d["at"] >= 0]}


def live_verdicts(run: dict[str, Any], phases: list[Phase], slo_ttft_s: float) -> dict[str, Any]:
    """When the client's p99 first crossed the SLO, when the policy scaled up and when the new
    replica served, when it scaled back down after the burst, and what failed."""
    burst_end = phases[0].seconds + phases[1].seconds
    timeline, decisions = run["timeline"], run["decisions"]
    crossed = next((s["t"] for s in timeline if (s["ttft_p99_s"] or 0) > slo_ttft_s), None)
    first = timeline[0]["serving"] if timeline else 0
    up = next((d["at"] for d in decisions if d["direction"] == "up"), None)
    serving_more = next((s["t"] for s in timeline if s["serving"] > first), None)
    down = next((d["at"] for d in decisions if d["direction"] == "down" and up is not None and d["at"] > up), None)
    back = next((s["t"] for s in timeline if up is not None and s["t"] > up and s["replicas"] <= first), None)
    failed = [r.error for r in run["records"] if not r.ok]
    return {
        "slo_crossed_at_s": crossed, "scale_up_decided_at_s": up, "new_replica_serving_at_s": serving_more,
        "scale_up_within_30s_of_crossing": crossed is not None and up is not None and up - crossed <= 30,
        "decision_after_crossing_s": None if crossed is None or up is None else up - crossed,
        "burst_ended_at_s": burst_end, "scale_down_decided_at_s": down, "back_to_start_at_s": back,
        "scaled_down_after_burst": down is not None and down >= burst_end,
        "requests": len(run["records"]), "failed": len(failed), "failures": failed[:5],
    }
