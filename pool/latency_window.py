"""A replica's recent latencies: TTFT and TPOT of the requests finished in the last window,
for the autoscaler's p50s, p99s, request rate and output tokens/s (`record_autoscaling_stats`),
and the rates of its requests and their tokens by routed size (the traffic split's view)."""

from __future__ import annotations

import bisect
import statistics
import time
from collections import deque
from typing import Callable, NamedTuple

from core import wire


class _Finished(NamedTuple):
    at: float
    ttft_s: float | None
    tpot_s: float | None
    output_tokens: int
    size_tokens: int | None  # prompt + max_tokens, as the router routed it; None: not known
    work_tokens: int  # prompt + output tokens


class LatencyWindow:
    def __init__(self, window_s: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._window_s = window_s
        self._clock = clock
        self._finished: deque[_Finished] = deque()

    def record(self, ttft_s: float | None, tpot_s: float | None, output_tokens: int = 0,
               size_tokens: int | None = None, prompt_tokens: int = 0) -> None:
        self._finished.append(_Finished(self._clock(), ttft_s, tpot_s, output_tokens, size_tokens,
                                        prompt_tokens + output_tokens))

    def _recent(self) -> list[_Finished]:
        horizon = self._clock() - self._window_s
        while self._finished and self._finished[0].at < horizon:
            self._finished.popleft()
        return list(self._finished)

    def stats(self) -> dict[str, float]:
        """p50 and p99 TTFT and TPOT, requests and output tokens per second over the window; a
        percentile with no sample is left out, so the autoscaler knows it does not know."""
        recent = self._recent()
        figures = {"requests_per_s": len(recent) / self._window_s,
                   "tokens_per_s": sum(sample.output_tokens for sample in recent) / self._window_s,
                   **self._by_size(recent)}
        for name, index in (("ttft", 1), ("tpot", 2)):
            values = [sample[index] for sample in recent if sample[index] is not None]
            if len(values) == 1:
                figures[f"{name}_p50_s"] = figures[f"{name}_p99_s"] = values[0]
            elif values:
                # 'inclusive': linear between ranks, as numpy's default and the bench's percentile.
                cuts = statistics.quantiles(values, n=100, method="inclusive")
                figures[f"{name}_p50_s"], figures[f"{name}_p99_s"] = cuts[49], cuts[98]
        return figures

    def _by_size(self, recent: list[_Finished]) -> dict[str, float]:
        """Requests/s and tokens/s per size bucket (core.wire.SIZE_BUCKET_EDGES); every bucket is
        reported, the empty ones as 0, so that a sum over replicas never misses one."""
        requests = [0.0] * len(wire.SIZE_REQUESTS_KEYS)
        tokens = [0.0] * len(wire.SIZE_TOKENS_KEYS)
        for sample in recent:
            if sample.size_tokens is not None:
                bucket = bisect.bisect_left(wire.SIZE_BUCKET_EDGES, sample.size_tokens)
                requests[bucket] += 1 / self._window_s
                tokens[bucket] += sample.work_tokens / self._window_s
        return {**dict(zip(wire.SIZE_REQUESTS_KEYS, requests)), **dict(zip(wire.SIZE_TOKENS_KEYS, tokens))}
