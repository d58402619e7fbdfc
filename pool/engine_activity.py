"""How busy a replica's engine is: the share of wall time it had at least one request.

A coarse "utilization %" counts a replica as busy whenever it exists; what costs money
and what capacity planning needs is the time the engine actually had work, queued or
running. Each pool replica keeps one, advanced around every engine call (request_metering).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Callable


@dataclass(frozen=True)
class ActivitySnapshot:
    """Cumulative counters since the replica started; diff two to get a window."""

    busy_s: float
    wall_s: float
    in_flight: int
    requests_started: int
    requests_finished: int
    # Request-seconds in the engine (the integral of in_flight): over wall time and the batch
    # size, how full the engine's batches were, which busy time alone cannot tell.
    request_s: float = 0.0

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


class EngineActivity:
    """Accumulates busy time: intervals during which at least one request is in the engine."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._started_at = clock()
        self._busy_since: float | None = None
        self._busy_total = 0.0
        self._in_flight = 0
        self._requests_started = 0
        self._requests_finished = 0
        self._request_s = 0.0
        self._counted_at = self._started_at

    def _count(self) -> float:
        now = self._clock()
        self._request_s += self._in_flight * (now - self._counted_at)
        self._counted_at = now
        return now

    def begin(self) -> None:
        self._count()
        if self._in_flight == 0:
            self._busy_since = self._clock()
        self._in_flight += 1
        self._requests_started += 1

    def end(self) -> None:
        if self._in_flight == 0:
            raise RuntimeError("EngineActivity.end() without a matching begin()")
        self._count()
        self._in_flight -= 1
        self._requests_finished += 1
        if self._in_flight == 0:
            self._busy_total += self._clock() - self._busy_since
            self._busy_since = None

    def snapshot(self) -> ActivitySnapshot:
        now = self._clock()
        open_interval = now - self._busy_since if self._busy_since is not None else 0.0
        return ActivitySnapshot(
            busy_s=self._busy_total + open_interval,
            wall_s=now - self._started_at,
            in_flight=self._in_flight,
            requests_started=self._requests_started,
            requests_finished=self._requests_finished,
            request_s=self._request_s + self._in_flight * (now - self._counted_at),
        )
