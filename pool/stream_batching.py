"""How a pool replica sends an engine's stream on: token by token, or a few tokens at a time.

Every chunk a replica yields costs a trip through Ray Serve (replica, router, proxy). With a
few streams in flight those trips are cheap and each token should leave the moment the engine
makes it: holding it only adds to the time between tokens the client sees. With hundreds of
streams in flight the trips add up, and sending a stream's tokens together every few tens of
milliseconds keeps the replica's event loop and the router free for more streams.

Ray Serve LLM's own batcher holds every chunk for its interval, the first token included
(50 ms by default). Here the first chunk never waits; later chunks wait only while the
replica holds at least `min_streams` streams, and then at most `interval_ms` each. Below
that, chunks that are ready when the replica's consumer asks leave together, without waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import AsyncGenerator, Callable, TypeVar

T = TypeVar("T")

_END = object()


@dataclass(frozen=True)
class StreamBatching:
    """`interval_s`: the longest a later chunk waits for others; `min_streams`: the streams
    in flight on the replica from which later chunks are batched at all."""

    interval_s: float
    min_streams: int

    def window_s(self, streams_in_flight: int) -> float:
        """How long the next chunk may wait for others, with this many streams in flight."""
        return self.interval_s if streams_in_flight >= self.min_streams else 0.0


async def batched_stream(
    source: AsyncGenerator[T, None], batching: StreamBatching, streams_in_flight: Callable[[], int],
) -> AsyncGenerator[list[T], None]:
    """`source`'s items in lists, as Ray Serve LLM's streams carry them. Each list holds what
    was ready when it left: the first item at once; a later one after at most the window that
    `batching` gives for the streams in flight when it was taken up. An error of `source` is
    raised after the items before it; closing this generator stops `source` before it returns."""
    queue: asyncio.Queue = asyncio.Queue()
    ended = asyncio.Event()

    async def read() -> None:
        try:
            async for item in source:
                queue.put_nowait(item)
        finally:
            queue.put_nowait(_END)
            ended.set()

    reader = asyncio.create_task(read())
    first = True
    try:
        while True:
            batch = [await queue.get()]
            window = 0.0 if first else batching.window_s(streams_in_flight())
            first = False
            if window > 0 and batch[-1] is not _END:
                # Until the window closes or the source ends, whichever comes first.
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(ended.wait(), window)
            while batch[-1] is not _END and not queue.empty():
                batch.append(queue.get_nowait())
            items = batch[:-1] if batch[-1] is _END else batch
            if items:
                yield items
            if batch[-1] is _END:
                reader.result()  # the source's error, if it failed
                return
    finally:
        if not reader.done():
            # Waited for: the engine request is aborted before the replica frees its slot.
            reader.cancel()
            try:
                await reader
            except asyncio.CancelledError:
                if asyncio.current_task().cancelling():
                    raise
            except Exception:  # the source failed as the stream was closed: nobody wants its error
                pass
        elif not reader.cancelled():
            reader.exception()  # retrieved: a failure nobody read is not logged as never retrieved
