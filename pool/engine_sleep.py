"""An idle engine sleeps, and the next request wakes it (`pools.<name>.sleep_when_idle`).

vLLM's sleep mode frees the KV cache and moves the weights to host memory (level 1), so an idle
pool's GPU memory can serve the other pool or the batch job, and the pool answers again after a
wake of seconds instead of a replica's cold start of minutes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, AsyncIterator, Callable

# How often a replica looks whether its engine has been idle long enough.
IDLE_CHECK_INTERVAL_S = 1.0


class EngineSleep:
    """Puts `engine` (an LLMEngine with `sleep` and `wakeup`) to sleep after `after_s` without a
    request, and wakes it, once, for the requests that find it asleep.

    `in_use()` brackets every request: it wakes the engine first and keeps it awake while the
    request runs. A request that arrives while the engine falls asleep waits for that to end and
    then wakes it; it never reaches a sleeping engine. `asleep` is True only once the fall has
    ended, and `falling_asleep` while it runs: a replica's first fall is the slow one (on an H200,
    5.5 s against 0.2 s after it, as vLLM pins the host memory that the weights move to), and a
    request that meets it waits that long.
    """

    def __init__(
        self, engine: Any, *, after_s: float, level: int, name: str, log: logging.Logger,
        on_wake: Callable[[float], None] = lambda seconds: None, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._engine, self._after_s, self._level, self._name, self._log = engine, after_s, level, name, log
        self._on_wake, self._clock = on_wake, clock
        self._transition = asyncio.Lock()
        self._in_use = 0
        self._idle_since = clock()
        # From the moment the engine starts falling asleep to its wake: a request must wake it first.
        self._needs_wake = False
        self.falling_asleep = False
        self.last_sleep_s: float | None = None
        self.last_wake_s: float | None = None

    @property
    def asleep(self) -> bool:
        """The engine has fallen asleep (its GPU memory is free) and no request has woken it yet."""
        return self._needs_wake and not self.falling_asleep

    @contextlib.asynccontextmanager
    async def in_use(self) -> AsyncIterator[None]:
        self._in_use += 1
        try:
            await self.wake()
            yield
        finally:
            self._in_use -= 1
            if not self._in_use:
                self._idle_since = self._clock()

    async def wake(self) -> None:
        if not self._needs_wake:
            return
        async with self._transition:
            if not self._needs_wake:  # another request woke it while this one waited
                return
            started = self._clock()
            await self._engine.wakeup()
            self._needs_wake = False
            self.last_wake_s = self._clock() - started
        self._log.info("%s: engine woke in %.2f s", self._name, self.last_wake_s)
        self._on_wake(self.last_wake_s)

    def idle_for(self) -> float | None:
        """Seconds without a request, or None while one runs."""
        return None if self._in_use else self._clock() - self._idle_since

    async def sleep_if_idle(self) -> bool:
        """Puts the engine to sleep when it has been idle for `after_s`; True when it did."""
        idle = self.idle_for()
        if self._needs_wake or idle is None or idle < self._after_s:
            return False
        async with self._transition:
            if self._needs_wake or self._in_use:
                return False
            self._needs_wake = self.falling_asleep = True  # arrivals now wait for the lock and wake it after
            started = self._clock()
            try:
                await self._engine.sleep(level=self._level)
            except Exception:
                self._needs_wake = False
                raise
            finally:
                self.falling_asleep = False
            self.last_sleep_s = self._clock() - started
        self._log.info("%s: idle for %.0f s, engine asleep (level %d) in %.2f s", self._name, idle,
                       self._level, self.last_sleep_s)
        return True

    async def run(self) -> None:
        """Checks for idleness forever; a failed sleep is logged and the engine stays awake."""
        while True:
            await asyncio.sleep(IDLE_CHECK_INTERVAL_S)
            try:
                await self.sleep_if_idle()
            except Exception as error:
                self._log.warning("%s: the engine could not sleep (%r); it stays awake", self._name, error)
                self._idle_since = self._clock()  # try again after another idle period
