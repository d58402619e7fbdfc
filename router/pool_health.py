"""What the router knows of each pool's health: which pools can take a request now, and for a
pool that cannot, why and when it is expected back.

Two sources, because each alone is late: the Serve controller's count of running replicas
(read every second or so) sees a replica that is gone, and the router's own requests see an
engine die at once, seconds before the controller's health check does. A failure closes the
pool for `failure_hold_s`; after that one request may try it again (a circuit breaker's
half-open state), and a pool whose engine is still dead fails that request at once, which the
router then sends elsewhere.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Iterable

# How long a pool stays closed after a request saw its replica or engine die. Longer than the
# health check's period, so the controller has seen the death by the time the pool reopens.
FAILURE_HOLD_S = 5.0
# Retry-After of a 503 when no one knows how long a replica takes to start.
UNKNOWN_START_RETRY_AFTER_S = 30


@dataclass(frozen=True)
class Outage:
    """Why a pool takes no requests now, since when, and how long until it should be back."""

    pool: str
    reason: str
    down_for_s: float
    expected_back_in_s: float | None  # None: no replica start has been measured yet

    @property
    def retry_after_s(self) -> int:
        if self.expected_back_in_s is None:
            return UNKNOWN_START_RETRY_AFTER_S
        return max(1, math.ceil(self.expected_back_in_s))

    def describe(self) -> str:
        when = (
            f"expected back in about {self.expected_back_in_s:.0f} s"
            if self.expected_back_in_s is not None
            else "expected back once a new replica has started (no start time measured yet)"
        )
        return f"pool {self.pool!r} is down ({self.reason}, {self.down_for_s:.0f} s ago); {when}"


@dataclass
class _PoolRecord:
    running: int | None = None  # None: not read yet; the pool is assumed up
    starting: int = 0
    start_s: float | None = None  # the last measured replica start, warm-up included
    down_since: float | None = None
    failure: str | None = None  # what the last request that failed here saw
    closed_until: float = float("-inf")


class PoolHealth:
    """Per pool: up, or an `Outage`. Fed by `observe` (the controller) and `failed` (requests)."""

    def __init__(
        self, pools: Iterable[str], *, failure_hold_s: float = FAILURE_HOLD_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pools = {pool: _PoolRecord() for pool in pools}
        self._failure_hold_s = failure_hold_s
        self._clock = clock

    def observe(self, pool: str, *, running: int, starting: int, start_s: float | None = None) -> None:
        """A reading of the controller: replicas serving and starting, and how long the pool's
        last replica took to start."""
        record = self._pools[pool]
        record.running, record.starting = running, starting
        if start_s is not None:
            record.start_s = start_s
        if running == 0 and record.down_since is None:
            record.down_since = self._clock()
        self.outage(pool)  # a pool that is up again forgets its outage

    def failed(self, pool: str, reason: str) -> None:
        """A request saw this pool's replica or engine die."""
        record = self._pools[pool]
        now = self._clock()
        if record.down_since is None:
            record.down_since = now
        record.failure = reason
        record.closed_until = now + self._failure_hold_s

    def available(self, pool: str) -> bool:
        return self.outage(pool) is None

    def outage(self, pool: str) -> Outage | None:
        record = self._pools[pool]
        now = self._clock()
        closed = now < record.closed_until
        if not closed and record.running != 0:  # running, or not read yet
            record.down_since, record.failure = None, None
            return None
        reasons = [record.failure] if record.failure else []
        if record.running == 0:
            reasons.append(f"no replica running, {record.starting} starting")
        down_for = now - (record.down_since if record.down_since is not None else now)
        # A replica replaced after a failure starts from scratch: its start time counts from then.
        expected = None if record.start_s is None else max(0.0, record.start_s - down_for)
        return Outage(pool, "; ".join(reasons), down_for, expected)
