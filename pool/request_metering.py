"""Meters one request through a pool replica's engine: busy clock, work share, its cost.

The replica wraps every engine stream with `metered`, before Ray batches stream chunks (so
the first token is timed when the engine produces it, not when a batch leaves). When the
engine reports usage (the non-streamed response, or the stream's final usage event) the
request's share of the replica's busy time is priced and written into that usage:

    "usage": {"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21,
              "cost_usd": 1.9e-07, "engine_busy_s": 0.0138,
              "cost_breakdown_usd": {"hardware": 1.7e-07, "energy": 3.7e-10, "premium": 1.7e-08}}

A request that made its replica load a LoRA adapter also pays for the load: its seconds join
the request's busy time, and the usage says them apart as "adapter_load_s".
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any, AsyncGenerator

from contract.request_timeline import TIMING_KEY, RequestTimeline
from contract.usage_events import KEEP_EVENT, final_usage, map_events
from core import wire
from core.price_catalog import ReplicaRate
from pool.engine_activity import EngineActivity
from pool.latency_window import LatencyWindow
from pool.work_share import WorkShare


def prompt_tokens_hint(headers: dict[str, str] | None, request: Any) -> int:
    """The router's count, or its estimate when the request left before its count was done;
    otherwise a rough one (4 characters a token). It only sets the request's prefill weight
    until the engine reports usage."""
    value = (headers or {}).get(wire.PROMPT_TOKENS_HEADER)
    if value and value.isdigit():
        return int(value)
    text = getattr(request, "prompt", None) or json.dumps(getattr(request, "messages", ""))
    return max(1, len(str(text)) // 4)


def routed_max_tokens(request: Any) -> int | None:
    """The request's cap on output tokens (the router always sets one); None where it has none."""
    value = getattr(request, "max_completion_tokens", None) or getattr(request, "max_tokens", None)
    return value if isinstance(value, int) else None


def usage_fields(rate: ReplicaRate | None, busy_s: float, adapter_load_s: float = 0.0) -> dict[str, Any]:
    """The priced usage of `busy_s` of the engine's time, `adapter_load_s` of which loaded an adapter."""
    fields: dict[str, Any] = {"engine_busy_s": busy_s}
    if adapter_load_s:
        fields["adapter_load_s"] = adapter_load_s
    if rate is not None:
        cost = rate.breakdown(busy_s)
        fields["cost_usd"] = cost.pop("total")
        fields["cost_breakdown_usd"] = cost
    return fields


def _is_streamed(item: Any) -> bool:
    return isinstance(item, (str, list))


async def metered(
    stream: AsyncGenerator[Any, None], *, activity: EngineActivity, work: WorkShare,
    rate: ReplicaRate | None, prompt_tokens: int, latency: LatencyWindow | None = None,
    arrived_at: float | None = None, timeline: RequestTimeline | None = None, max_tokens: int | None = None,
    adapter_load_s: float = 0.0,
) -> AsyncGenerator[Any, None]:
    """Yields `stream`'s items unchanged except for the final usage, which gains the cost.
    A request that completes is counted in `latency`, with its TTFT (from `arrived_at`, its
    arrival at the replica, queueing included) and TPOT when it was streamed, and its size as
    routed (`prompt_tokens` + `max_tokens`); each streamed item is stamped on the `timeline` of
    a request that asked for one."""
    activity.begin()
    share = work.start(prompt_tokens)
    closed = False
    started, first_at, completion_tokens = arrived_at or time.monotonic(), None, 0

    def price(event: dict[str, Any]) -> dict[str, Any]:
        nonlocal closed, completion_tokens
        usage = final_usage(event)
        if usage is not None and not closed:
            closed = True
            completion_tokens = usage.get("completion_tokens") or 0
            busy_s = work.finish(share, completion_tokens) + adapter_load_s
            usage.update(usage_fields(rate, busy_s, adapter_load_s))
        return event

    try:
        async for item in stream:
            if _is_streamed(item):
                first_at = first_at or time.monotonic()
                if timeline is not None:
                    timeline.stamp_engine_output()
                work.first_token(share)
                if not closed:
                    item = [map_events(p, price) if isinstance(p, str) else p for p in item] \
                        if isinstance(item, list) else map_events(item, price)
            elif getattr(item, "usage", None) is not None and not closed:
                # A whole response: it came at the end, so it says nothing about prefill and
                # decode speed; it is charged its share without teaching the replica.
                closed = True
                completion_tokens = item.usage.completion_tokens or 0
                seconds = work.finish(share, completion_tokens, learn=False) + adapter_load_s
                for key, value in usage_fields(rate, seconds, adapter_load_s).items():
                    setattr(item.usage, key, value)
            yield item
    finally:
        if not closed:
            # No usage came (an error, a client that left): the busy time it held is still
            # charged to it, so the replica's requests keep adding up to its busy time.
            work.finish(share, 0, learn=False)
        elif latency is not None:
            # A whole (non-streamed) response has no first-token time; it still counts as served.
            ended = time.monotonic()
            latency.record(
                first_at - started if first_at is not None else None,
                (ended - first_at) / (completion_tokens - 1) if first_at is not None and completion_tokens > 1 else None,
                output_tokens=completion_tokens,
                size_tokens=prompt_tokens + (max_tokens if max_tokens is not None else completion_tokens),
                prompt_tokens=prompt_tokens,
            )
        activity.end()


async def with_timeline(batches: AsyncGenerator[Any, None], timeline: RequestTimeline) -> AsyncGenerator[Any, None]:
    """A replica's outgoing stream with the request's stamps: `pool_first_sent` when its first
    batch leaves, and every stamp of the replica on the usage event as that event leaves (the
    metering before the batching runs ahead of it, so stamps written there could miss one)."""

    def stamped(event: dict[str, Any]) -> dict[str, Any] | object:
        usage = final_usage(event)
        if usage is None:
            return KEEP_EVENT
        usage[TIMING_KEY] = timeline.as_event()
        return event

    def each(packets: Any) -> Any:
        if isinstance(packets, list):
            return [map_events(packet, stamped) if isinstance(packet, str) else packet for packet in packets]
        return map_events(packets, stamped) if isinstance(packets, str) else packets

    async with contextlib.aclosing(batches):
        async for batch in batches:
            timeline.stamp("pool_first_sent")
            yield each(batch)
