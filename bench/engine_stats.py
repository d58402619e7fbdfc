"""vLLM's own account of a load run: how long its requests waited in the engine core's queue,
how long their prefill took, and how long from the arrival vLLM stamps on them (vLLM 0.29 stamps
it before the chat template and tokenization) to their first token, as means over the run, read
from a server's metrics before and after it.

Plain `vllm serve` serves vLLM's histograms at /metrics (`vllm:<name>_sum` and `_count`). The
app's replicas count the same times, exactly, by pool and stage
(`trilemma_engine_stage_seconds_total` and `trilemma_engine_stage_requests_total`, through
Ray's metrics agent): the agent exports vLLM's own histograms only as bucket midpoints, which
would put every queue time under 0.3 s at 0.15 s. Summed over all the app's pools (a comparison
loads one).

Beside the client's TTFT they split a gap between two servers of one engine: the engine core's
part (queue, prefill), the front end's (the template and tokenization where vLLM counts them,
input processing, the way to the engine core and the first token's way back: in the engine TTFT
but in neither of those), and what lies outside the engine (HTTP, the app's hops): the client's
TTFT less the engine's.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from core import wire
from core.prometheus_text import EXPORT_DELAY_S, samples, scrape, total_by
from engine.stat_loggers import FIRST_TOKEN, PREFILL, QUEUED

# The figure's name here: vLLM's histogram, and the app's stage. The engine TTFT is timed at the
# first token, the others when the request finishes.
FIGURES = {
    "engine_ttft": ("time_to_first_token_seconds", FIRST_TOKEN),
    "queue": ("request_queue_time_seconds", QUEUED),
    "prefill": ("request_prefill_time_seconds", PREFILL),
}
FINISHED = "queue"  # counts the finished requests

Totals = dict[str, tuple[float, float]]  # figure -> (sum of seconds, count)


def plain_vllm_totals(text: str) -> Totals:
    """Each figure's sum and count from plain vLLM's histograms, over all its label sets (engines)."""
    return {figure: (sum(samples(text, f"vllm:{name}_sum").values()),
                     sum(samples(text, f"vllm:{name}_count").values()))
            for figure, (name, _) in FIGURES.items()}


def app_totals(text: str) -> Totals:
    """Each figure's sum and count from the app's stage counters, over all its pools and replicas."""
    seconds = total_by(samples(text, wire.exported(wire.ENGINE_STAGE_SECONDS_TOTAL)), "stage")
    requests = total_by(samples(text, wire.exported(wire.ENGINE_STAGE_REQUESTS_TOTAL)), "stage")
    return {figure: (seconds.get((stage,), 0.0), requests.get((stage,), 0.0)) for figure, (_, stage) in FIGURES.items()}


def means_ms(before: Totals, after: Totals) -> dict[str, Any]:
    """The run's mean per figure in ms (None where it observed nothing), with its sums and counts
    so that runs pool (`pooled_means`)."""
    delta = {figure: (after[figure][0] - before[figure][0], after[figure][1] - before[figure][1]) for figure in after}
    return {"requests": delta[FINISHED][1], "totals": {figure: list(delta[figure]) for figure in FIGURES},
            **{f"{figure}_ms": _mean_ms(*delta[figure]) for figure in FIGURES}}


def pooled_means(runs: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The runs of one arm as one sample: means over all their requests; None when any run
    could not be read (a partial figure would mislead)."""
    if not runs or any(run is None for run in runs):
        return None
    pooled: dict[str, Any] = {"requests": sum(run["requests"] for run in runs)}
    for figure in FIGURES:
        seconds = sum(run["totals"][figure][0] for run in runs)
        count = sum(run["totals"][figure][1] for run in runs)
        pooled[f"{figure}_ms"] = _mean_ms(seconds, count)
    return pooled


def _mean_ms(seconds: float, count: float) -> float | None:
    return seconds / count * 1000 if count > 0 else None


class EngineStats:
    """One server's figures: `read()` before a run, `since(before, requests)` after it. Ray's
    metrics agent takes up to its report interval (10 s) to expose what a replica recorded, so
    `since` reads again until every request of the run has finished in the figures, or `settle_s`
    has passed (then the figures are None: they would be part of the run). A server whose figures
    do not move at all within the report interval records none (a fake engine): None sooner."""

    def __init__(self, url: str, totals: Callable[[str], Totals], *, settle_s: float = 0.0,
                 fetch: Callable[[str], str | None] = scrape, sleep: Callable[[float], None] = time.sleep):
        self.url, self.totals, self.settle_s = url, totals, settle_s
        self._fetch, self._sleep = fetch, sleep

    def read(self) -> Totals | None:
        text = self._fetch(self.url)
        return None if text is None else self.totals(text)

    def since(self, before: Totals | None, requests: int) -> dict[str, Any] | None:
        if before is None:
            return None
        waited = 0.0
        while True:
            after = self.read()
            finished = None if after is None else after[FINISHED][1] - before[FINISHED][1]
            if finished is not None and finished >= requests:
                return means_ms(before, after)
            if waited >= self.settle_s or (not finished and waited >= EXPORT_DELAY_S):
                return None
            self._sleep(0.5)
            waited += 0.5


def account_table(points: list[dict[str, Any]]) -> list[str]:
    """Markdown lines: a comparison's load points (bench.vs_vllm) with both arms' account, the
    client's mean TTFT beside it; none where an arm's could not be read."""
    read = [p for p in points if p["app"].get("engine") and p["vllm"].get("engine")]
    if not read:
        return []
    lines = ["", "Where the first token's time goes, means in ms, app / vLLM: the client's TTFT; vLLM's own "
             "account of the same requests (read from each server's metrics before and after each run): from "
             "the arrival vLLM stamps on a request (vLLM 0.29 stamps it before the chat template and "
             "tokenization) to its first token, and of that the time queued in the engine core and the prefill; "
             "and what lies outside the engine (HTTP, the app's hops): the client's TTFT less the engine's.", "",
             "| in flight | client TTFT | engine TTFT | of it queued | of it prefill | outside the engine |",
             "| --- | --- | --- | --- | --- | --- |"]
    for p in read:
        a, v = p["app"], p["vllm"]
        outside = [_less(arm["ttft_ms"].get("mean"), arm["engine"]["engine_ttft_ms"]) for arm in (a, v)]
        lines.append(
            f"| {p['concurrency']} | {_pair(a['ttft_ms'].get('mean'), v['ttft_ms'].get('mean'))} "
            f"| {_pair(a['engine']['engine_ttft_ms'], v['engine']['engine_ttft_ms'])} "
            f"| {_pair(a['engine']['queue_ms'], v['engine']['queue_ms'])} "
            f"| {_pair(a['engine']['prefill_ms'], v['engine']['prefill_ms'])} | {_pair(*outside)} |")
    return lines


def _less(total: float | None, part: float | None) -> float | None:
    return None if total is None or part is None else total - part


def _pair(app: float | None, vllm: float | None) -> str:
    shown = ["-" if value is None else f"{value:.1f}" for value in (app, vllm)]
    return f"{shown[0]} / {shown[1]}"
