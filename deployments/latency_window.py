"""A replica's recent latencies: TTFT and TPOT of the requests finished in the last window,
for the autoscaler's p99s and request rate (`record_autoscaling_stats`)."""

from __future__ import annotations

import statistics
import time
from collections import deque
from typing import Callable


class LatencyWindow:
    def __init__(self, window_s: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._window_s = window_s
        self._clock = clock
        self._finished: deque[tuple[float, float | None, float | None]] = deque()  # (at, ttft, tpot)

    def record(self, ttft_s: float | None, tpot_s: float | None) -> None:
        self._finished.append((self._clock(), ttft_s, tpot_s))

    def _recent(self) -> list[tuple[float, float | None, float | None]]:
        horizon = self._clock() - self._window_s
        while self._finished and self._finished[0][0] < horizon:
            self._finished.popleft()
        return list(self._finished)

    def stats(self) -> dict[str, float]:
        """p99 TTFT and TPOT and requests per second over the window; a p99 with no sample
        is left out, so the autoscaler knows it does not know."""
        recent = self._recent()
        figures = {"requests_per_s": len(recent) / self._window_s}
        for key, index in (("ttft_p99_s", 1), ("tpot_p99_s", 2)):
            values = [sample[index] for sample in recent if sample[index] is not None]
            if values:
                # 'inclusive': linear between ranks, as numpy's default and the bench's percentile.
                figures[key] = statistics.quantiles(values, n=100, method="inclusive")[98] if len(values) > 1 else values[0]
        return figures
