"""A replica's recent latencies: TTFT and TPOT of the requests finished in the last window,
for the autoscaler's p50s, p99s, request rate and output tokens/s (`record_autoscaling_stats`)."""

from __future__ import annotations

import statistics
import time
from collections import deque
from typing import Callable


class LatencyWindow:
    def __init__(self, window_s: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._window_s = window_s
        self._clock = clock
        # (at, ttft, tpot, output tokens)
        self._finished: deque[tuple[float, float | None, float | None, int]] = deque()

    def record(self, ttft_s: float | None, tpot_s: float | None, output_tokens: int = 0) -> None:
        self._finished.append((self._clock(), ttft_s, tpot_s, output_tokens))

    def _recent(self) -> list[tuple[float, float | None, float | None, int]]:
        horizon = self._clock() - self._window_s
        while self._finished and self._finished[0][0] < horizon:
            self._finished.popleft()
        return list(self._finished)

    def stats(self) -> dict[str, float]:
        """p50 and p99 TTFT and TPOT, requests and output tokens per second over the window; a
        percentile with no sample is left out, so the autoscaler knows it does not know."""
        recent = self._recent()
        figures = {"requests_per_s": len(recent) / self._window_s,
                   "tokens_per_s": sum(sample[3] for sample in recent) / self._window_s}
        for name, index in (("ttft", 1), ("tpot", 2)):
            values = [sample[index] for sample in recent if sample[index] is not None]
            if len(values) == 1:
                figures[f"{name}_p50_s"] = figures[f"{name}_p99_s"] = values[0]
            elif values:
                # 'inclusive': linear between ranks, as numpy's default and the bench's percentile.
                cuts = statistics.quantiles(values, n=100, method="inclusive")
                figures[f"{name}_p50_s"], figures[f"{name}_p99_s"] = cuts[49], cuts[98]
        return figures
