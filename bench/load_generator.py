"""Sends prompts to an OpenAI-compatible endpoint, streamed, and times every token.

aiohttp rather than httpx: on a small machine the client shares cores with the engines, and
httpx's per-chunk cost delayed request starts by seconds under load, inflating TTFT.
"""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
from tqdm import tqdm

from bench.arrivals import LoadShape, poisson_arrival_times
from bench.datasets import Prompt
from bench.metrics import RequestRecord
from contract.request_timeline import (
    CLIENT_FIRST_TOKEN,
    CLIENT_SENT,
    ENGINE_OUTPUTS,
    ROUTER_ITEMS,
    TIMING_KEY,
    gaps_s,
    hops_ms,
    item_delays_s,
)
from core import wire


async def send_one(
    session: aiohttp.ClientSession, prompt: Prompt, model: str, run_started: float, timing: bool = False,
) -> RequestRecord:
    """With `timing`, the app is asked for its hop times (contract.request_timeline), which the
    record keeps as `hops_ms`."""
    body = {
        "model": model, "messages": prompt.messages, "max_tokens": prompt.max_tokens,
        "stream": True, "stream_options": {"include_usage": True}, **prompt.extra,
    }
    headers = {wire.SCENARIO_HEADER: prompt.scenario} if prompt.scenario else {}
    record = RequestRecord(scenario=prompt.scenario or "default", started_s=0.0, e2e_s=0.0)
    return await send_streamed(session, "v1/chat/completions", body, headers, record, run_started, timing)


async def send_streamed(
    session: aiohttp.ClientSession, path: str, body: dict, headers: dict[str, str], record: RequestRecord,
    run_started: float, timing: bool = False,
) -> RequestRecord:
    """Posts a streamed chat or completion `body` to `path` and fills `record` as the answer
    arrives: pool and scenario from the app's headers, every text chunk's time, the usage, or the
    error (`http <status>: <body>`, `transport: ...`)."""
    headers = dict(headers)
    if timing:
        headers[wire.TIMING_HEADER] = "1"
    stamps = {CLIENT_SENT: time.time()} if timing else None
    started = time.perf_counter()
    record.started_s = started - run_started
    try:
        async with session.post(path, json=body, headers=headers) as response:
            record.pool = response.headers.get(wire.POOL_HEADER)
            record.scenario = response.headers.get(wire.SCENARIO_ANSWER_HEADER, record.scenario)
            if response.status == 200:
                await _read_stream(response, record, started, stamps)
            else:
                detail = (await response.read()).decode(errors="replace")[:300]
                record.error = f"http {response.status}: {detail}"
    except (aiohttp.ClientError, asyncio.TimeoutError) as error:
        record.error = f"transport: {type(error).__name__}: {error}"
    record.e2e_s = time.perf_counter() - started
    return record


async def _read_stream(
    response: aiohttp.ClientResponse, record: RequestRecord, started: float, stamps: dict[str, float] | None,
) -> None:
    """Fills `record` from server-sent events: text timings, then the usage of the last chunk
    (and the hop times, when `stamps` holds the send time)."""
    last_text_at = None
    # Every event's arrival on the wall clock, read against the router's stamps; taken as the line
    # arrives, before parsing, so that the first token's stamp and the others' mean the same.
    received: list[float] = []
    async for raw_line in response.content:
        line = raw_line.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        if stamps is not None:
            received.append(time.time())
        chunk = json.loads(line[len("data: "):])
        if "error" in chunk:
            record.error = f"stream error: {chunk['error'].get('message')}"
            return
        now = time.perf_counter()
        # A chat chunk's text is its delta's content; a completion chunk's, its text.
        if any((choice.get("delta") or {}).get("content") or choice.get("text") for choice in chunk.get("choices", [])):
            if record.ttft_s is None:
                record.ttft_s = now - started
                if stamps is not None:
                    stamps[CLIENT_FIRST_TOKEN] = received[-1]
            else:
                record.itl_s.append(now - last_text_at)
            last_text_at = now
        usage = chunk.get("usage")
        if usage:
            record.prompt_tokens = usage.get("prompt_tokens", 0)
            record.completion_tokens = usage.get("completion_tokens", 0)
            cost = usage.get("cost_usd")  # a number, or a breakdown with its total
            record.cost_usd = cost.get("total") if isinstance(cost, dict) else cost
        if stamps is not None and TIMING_KEY in chunk:
            timing = chunk[TIMING_KEY]
            record.hops_ms = hops_ms({**timing, **stamps})
            engine_outputs, router_items = timing.get(ENGINE_OUTPUTS) or [], timing.get(ROUTER_ITEMS) or []
            record.engine_gaps_s, record.router_gaps_s = gaps_s(engine_outputs), gaps_s(router_items)
            record.event_gaps_s = gaps_s(received)
            record.replica_to_router_s = item_delays_s(engine_outputs, router_items)
            record.router_to_client_s = item_delays_s(router_items, received)


async def run_load(
    base_url: str, prompts: list[Prompt], shape: LoadShape, *, model: str,
    timeout_s: float = 600.0, seed: int = 0, progress: bool = True, label: str = "requests",
    api_key: str | None = None, arrivals: list[float] | None = None, timing: bool = False,
) -> tuple[list[RequestRecord], float]:
    """Runs every prompt once in the given shape; returns the records and the wall time.
    `arrivals` (send times, s from start, one per prompt) replays a schedule made elsewhere
    instead of drawing one from the shape's rate; `timing` asks the app for its hop times."""
    if arrivals is not None and len(arrivals) != len(prompts):
        raise ValueError(f"{len(arrivals)} arrival times for {len(prompts)} prompts")
    connector = aiohttp.TCPConnector(limit=0)  # no client-side cap on requests in flight
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    # A base URL may carry a path (an app behind a route prefix): relative request paths
    # append to it only when it ends in a slash.
    session_url = base_url.rstrip("/") + "/"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    async with aiohttp.ClientSession(session_url, connector=connector, timeout=timeout, headers=headers) as session:
        bar = tqdm(total=len(prompts), desc=label, unit="req", disable=not progress)
        run_started = time.perf_counter()

        async def tracked(prompt: Prompt) -> RequestRecord:
            record = await send_one(session, prompt, model, run_started, timing)
            bar.update(1)
            return record

        if arrivals is None and shape.rate_rps is not None:
            arrivals = poisson_arrival_times(shape.rate_rps, len(prompts), seed)
        if arrivals is not None:

            async def at(send_time: float, prompt: Prompt) -> RequestRecord:
                await asyncio.sleep(max(0.0, send_time - (time.perf_counter() - run_started)))
                return await tracked(prompt)

            records = await asyncio.gather(*(at(t, p) for t, p in zip(arrivals, prompts)))
        else:
            gate = asyncio.Semaphore(shape.concurrency)

            async def gated(prompt: Prompt) -> RequestRecord:
                async with gate:
                    return await tracked(prompt)

            records = await asyncio.gather(*(gated(p) for p in prompts))
        duration = time.perf_counter() - run_started
        bar.close()
    return list(records), duration
