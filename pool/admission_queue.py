"""A pool replica's bounded priority queue in front of its engine.

At most `max_in_engine` requests are in the engine at once; the rest wait here, the most
urgent first (first come, first served within a class), until the engine finishes one.
The engine gets enough to batch fully, and the order of everything beyond that is ours.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import AsyncIterator, Callable

from contract.pool_faults import PoolOverloaded
from pool.admission import AdmissionPolicy, QueueState

# Retry-After bounds: never "retry now", never so long that a client gives up on a blip.
MIN_RETRY_AFTER_S = 1
MAX_RETRY_AFTER_S = 60
# Weight of the newest gap between two finished requests in the smoothed drain rate.
_DRAIN_SMOOTHING = 0.2


@dataclass(order=True)
class _Waiter:
    priority: int
    sequence: int
    granted: asyncio.Future = field(compare=False)


class AdmissionQueue:
    """Hands out engine slots by priority; `slot()` holds one for a request's whole stream."""

    def __init__(
        self, pool: str, policy: AdmissionPolicy, *,
        on_shed: Callable[[int, str], None] = lambda priority, action: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pool = pool
        self._policy = policy
        self._on_shed = on_shed
        self._clock = clock
        self._in_engine = 0
        self._waiting: list[_Waiter] = []  # arrival order; dispatch picks the most urgent
        self._sequence = itertools.count()
        self._finish_interval_s: float | None = None  # smoothed time between two finishes
        self._last_finish: float | None = None

    @property
    def in_engine(self) -> int:
        return self._in_engine

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def max_in_engine(self) -> int:
        return self._policy.max_in_engine

    def set_max_in_engine(self, limit: int) -> None:
        """The autoscaler's concurrency rule moves the limit at run time. Raised, waiters
        enter at once; lowered, requests already in the engine finish and none enters until
        the engine is under the new limit."""
        self._policy.max_in_engine = limit
        self._dispatch()

    def state(self) -> QueueState:
        return QueueState(self._in_engine, tuple(waiter.priority for waiter in self._waiting))

    @asynccontextmanager
    async def slot(self, priority: int) -> AsyncIterator[None]:
        """Waits for an engine slot; raises PoolOverloaded when shed, on arrival or later
        (a more urgent request took this one's place in the queue)."""
        waiter = self._arrive(priority)
        try:
            await waiter.granted
        except BaseException:
            if waiter in self._waiting:  # cancelled while waiting: the client went away
                self._waiting.remove(waiter)
            elif waiter.granted.done() and not waiter.granted.cancelled() and waiter.granted.exception() is None:
                self._finish(served=False)  # granted just as it was cancelled: give the slot back
            raise
        try:
            yield
        finally:
            self._finish()

    def _arrive(self, priority: int) -> _Waiter:
        # A waiter whose task was cancelled leaves the list only when that task runs again;
        # until then it is no one's place to take.
        self._waiting = [waiter for waiter in self._waiting if not waiter.granted.done()]
        waiter = _Waiter(priority, next(self._sequence), asyncio.get_running_loop().create_future())
        decision = self._policy.decide(priority, self.state())
        if decision.action == "shed":
            self._on_shed(priority, "shed")
            raise self._overloaded(priority, decision.reason)
        if decision.evict is not None:
            victim = self._waiting.pop(decision.evict)
            victim.granted.set_exception(self._overloaded(
                victim.priority, f"a priority {priority} request took its place in the queue ({decision.reason})"
            ))
            self._on_shed(victim.priority, "evicted")
        if decision.action == "admit":
            self._enter_engine(waiter)
        else:
            self._waiting.append(waiter)
        return waiter

    def _enter_engine(self, waiter: _Waiter) -> None:
        if self._in_engine == 0:
            self._last_finish = self._clock()  # a busy period starts: idle time is no drain time
        self._in_engine += 1
        waiter.granted.set_result(None)

    def _finish(self, *, served: bool = True) -> None:
        self._in_engine -= 1
        if served:
            self._note_drain()
        self._dispatch()

    def _dispatch(self) -> None:
        while self._waiting and self._in_engine < self._policy.max_in_engine:
            waiter = min(self._waiting)
            self._waiting.remove(waiter)
            if waiter.granted.done():  # cancelled between its last check and now
                continue
            self._enter_engine(waiter)

    def _note_drain(self) -> None:
        now = self._clock()
        if self._last_finish is not None:
            interval = now - self._last_finish
            self._finish_interval_s = interval if self._finish_interval_s is None else (
                (1 - _DRAIN_SMOOTHING) * self._finish_interval_s + _DRAIN_SMOOTHING * interval
            )
        self._last_finish = now

    def retry_after_s(self, priority: int) -> int:
        """Seconds until an engine slot is likely free for this class: one finish for each
        request waiting ahead of it, and one for itself."""
        ahead = sum(1 for waiter in self._waiting if waiter.priority <= priority) + 1
        if self._finish_interval_s is None:
            return MIN_RETRY_AFTER_S
        return min(MAX_RETRY_AFTER_S, max(MIN_RETRY_AFTER_S, math.ceil(ahead * self._finish_interval_s)))

    def _overloaded(self, priority: int, reason: str) -> PoolOverloaded:
        return PoolOverloaded(self._pool, priority, reason, self.retry_after_s(priority))
