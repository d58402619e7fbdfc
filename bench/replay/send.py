"""A trace's requests sent at their times to an OpenAI-compatible server, streamed, each with
exactly its prompt and output length (vLLM's ignore_eos), and what each answer was."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
from tqdm import tqdm

from bench.load_generator import send_streamed
from bench.metrics import RequestRecord
from bench.replay.prompts import PromptBuilder
from bench.replay.trace import ScheduledRequest
from core import wire

ENDPOINTS = {"completions": "v1/completions", "chat": "v1/chat/completions"}


@dataclass
class ReplayRecord(RequestRecord):
    """One request of the trace as the client saw it: the figures of any load run, with the
    trace's row and sizes, when it was meant to leave, and why it was refused, if it was."""

    line: int = 0
    trace_prompt_tokens: int = 0
    trace_output_tokens: int = 0
    planned_s: float = 0.0
    refused: str | None = None  # "too_long", "shed" or "error" (see refusal)


def refusal(error: str) -> str:
    """Why a server refused a request, from the error a record carries: a prompt over the
    model's length (both vLLM's and the app's words for it), shed for load (429, or 503 while
    no pool can take it), or anything else."""
    status, _, detail = error.partition(": ")
    lowered = detail.lower()
    if status == "http 400" and ("context_length" in lowered or "context length" in lowered
                                 or "max_model_len" in lowered or "maximum model length" in lowered):
        return "too_long"
    if status in ("http 429", "http 503"):
        return "shed"
    return "error"


@dataclass(frozen=True)
class ReplayRequest:
    """What goes on the wire for one scheduled request."""

    scheduled: ScheduledRequest
    path: str
    body: dict[str, Any]
    scenario: str


def build_requests(scheduled: list[ScheduledRequest], builder: PromptBuilder, *, model: str, endpoint: str,
                   default_scenario: str, block_size: int | None = None) -> list[ReplayRequest]:
    """Every request's body, built before the clock starts (building is not free on a small
    machine, and must not delay a send)."""
    requests = []
    for item in scheduled:
        traced = item.request
        body: dict[str, Any] = {
            "model": model, "max_tokens": traced.output_tokens, "ignore_eos": True, "temperature": 0.0,
            "stream": True, "stream_options": {"include_usage": True},
        }
        if endpoint == "chat":
            body["messages"] = builder.chat_messages(traced, block_size)
        else:
            body["prompt"] = builder.completion_prompt(traced, block_size)
        requests.append(ReplayRequest(item, ENDPOINTS[endpoint], body, traced.scenario or default_scenario))
    return requests


async def _send(session: aiohttp.ClientSession, request: ReplayRequest, run_started: float) -> ReplayRecord:
    traced = request.scheduled.request
    # A server that does not say the scenario (plain vLLM) served the one the request asked for.
    record = ReplayRecord(scenario=request.scenario, started_s=0.0, e2e_s=0.0, line=traced.line,
                          trace_prompt_tokens=traced.prompt_tokens, trace_output_tokens=traced.output_tokens,
                          planned_s=request.scheduled.send_at_s)
    await send_streamed(session, request.path, request.body, {wire.SCENARIO_HEADER: request.scenario}, record,
                        run_started)
    if record.error is not None:
        record.refused = refusal(record.error)
    return record


async def replay(base_url: str, requests: list[ReplayRequest], *, api_key: str | None = None,
                 timeout_s: float = 900.0, progress: bool = True, label: str = "replay") -> tuple[list[ReplayRecord], float]:
    """Sends every request at its time (open loop: a slow answer never delays the next send);
    returns the records in trace order and the wall time from the first send to the last answer."""
    connector = aiohttp.TCPConnector(limit=0)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    async with aiohttp.ClientSession(base_url.rstrip("/") + "/", connector=connector, headers=headers,
                                     timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
        bar = tqdm(total=len(requests), desc=label, unit="req", disable=not progress)
        run_started = time.perf_counter()

        async def at(request: ReplayRequest) -> ReplayRecord:
            await asyncio.sleep(max(0.0, request.scheduled.send_at_s - (time.perf_counter() - run_started)))
            record = await _send(session, request, run_started)
            bar.update(1)
            return record

        records = await asyncio.gather(*(at(request) for request in requests))
        duration = time.perf_counter() - run_started
        bar.close()
    return list(records), duration
