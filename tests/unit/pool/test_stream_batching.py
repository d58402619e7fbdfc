"""A replica's stream: the first token never waits, later ones wait only while the replica is busy."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time

import pytest

from pool.stream_batching import StreamBatching, batched_stream

# Far longer than the sources below take: a window that was held shows, and a slow machine
# does not end a window early. A window ends when its source does, so this costs no time.
WINDOW_S = 5.0


async def _tokens(count: int, every_s: float, *, fail_after: int | None = None):
    for index in range(count):
        if fail_after is not None and index == fail_after:
            raise RuntimeError("engine died")
        await asyncio.sleep(every_s)
        yield f"t{index}"


async def _endless(closed: asyncio.Event):
    """A source that never ends by itself; `closed` is set once it was stopped."""
    try:
        while True:
            await asyncio.sleep(0.01)
            yield "t"
    finally:
        closed.set()


async def _arrivals(stream) -> list[tuple[float, list[str]]]:
    started = time.monotonic()
    return [(time.monotonic() - started, batch) async for batch in stream]


def test_a_quiet_replica_sends_every_token_as_it_comes():
    batching = StreamBatching(interval_s=WINDOW_S, min_streams=4)
    arrivals = asyncio.run(_arrivals(batched_stream(_tokens(5, 0.02), batching, lambda: 3)))
    assert [batch for _, batch in arrivals] == [["t0"], ["t1"], ["t2"], ["t3"], ["t4"]]


def test_a_busy_replica_batches_later_tokens_but_never_the_first():
    batching = StreamBatching(interval_s=WINDOW_S, min_streams=4)
    arrivals = asyncio.run(_arrivals(batched_stream(_tokens(6, 0.01), batching, lambda: 4)))
    first_at, first = arrivals[0]
    assert first == ["t0"] and first_at < WINDOW_S / 2  # not held for the window
    # The rest came within one window of the second token: one batch, sent when the source ended.
    assert [batch for _, batch in arrivals[1:]] == [["t1", "t2", "t3", "t4", "t5"]]


def test_tokens_that_are_ready_leave_together_without_a_window():
    async def burst():
        for index in range(4):  # yielded without waiting: all ready at once
            yield f"t{index}"

    batching = StreamBatching(interval_s=0.0, min_streams=1)
    arrivals = asyncio.run(_arrivals(batched_stream(burst(), batching, lambda: 100)))
    assert [batch for _, batch in arrivals] == [["t0", "t1", "t2", "t3"]]


def test_the_window_ends_when_the_stream_does():
    batching = StreamBatching(interval_s=60.0, min_streams=1)
    arrivals = asyncio.run(_arrivals(batched_stream(_tokens(3, 0.01), batching, lambda: 1)))
    assert arrivals[-1][0] < 30.0
    assert [item for _, batch in arrivals for item in batch] == ["t0", "t1", "t2"]


def test_an_error_comes_after_the_tokens_before_it():
    async def collect():
        seen = []
        with pytest.raises(RuntimeError, match="engine died"):
            async for batch in batched_stream(_tokens(5, 0.01, fail_after=2), StreamBatching(0.0, 1), lambda: 0):
                seen.extend(batch)
        return seen

    assert asyncio.run(collect()) == ["t0", "t1"]


def test_closing_the_stream_stops_the_source_before_it_returns():
    closed = asyncio.Event()

    async def leave_after_one():
        stream = batched_stream(_endless(closed), StreamBatching(WINDOW_S, 1), lambda: 0)
        await anext(stream)
        await stream.aclose()
        return closed.is_set()  # set by the time aclose returned: the engine request is aborted

    assert asyncio.run(leave_after_one())


def test_a_cancelled_consumer_stops_the_source_and_stays_cancelled():
    """What Ray Serve does to a request whose client disconnected."""
    closed = asyncio.Event()

    async def consume(stream):
        async with contextlib.aclosing(stream):
            async for _ in stream:
                pass

    async def cancel_mid_stream():
        stream = batched_stream(_endless(closed), StreamBatching(WINDOW_S, 1), lambda: 0)
        consumer = asyncio.create_task(consume(stream))
        await asyncio.sleep(0.05)
        consumer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await consumer
        return closed.is_set()

    assert asyncio.run(cancel_mid_stream())


def test_a_source_that_fails_after_the_client_left_leaves_no_unretrieved_error(caplog):
    async def fails_at_once():
        yield "t0"
        raise RuntimeError("engine died")

    async def leave_after_one():
        stream = batched_stream(fails_at_once(), StreamBatching(0.0, 1), lambda: 0)
        assert await anext(stream) == ["t0"]
        await asyncio.sleep(0.01)  # the source has failed by now, unread
        await stream.aclose()

    asyncio.run(leave_after_one())
    gc.collect()
    assert "never retrieved" not in caplog.text
