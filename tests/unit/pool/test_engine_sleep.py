"""An idle engine sleeps after its idle period; a request wakes it before it reaches the engine,
one wake serves every request that arrives meanwhile, and a request that arrives while the
engine falls asleep waits and wakes it."""

from __future__ import annotations

import asyncio
import logging

import pytest

from pool.engine_sleep import EngineSleep
from tests.support import ManualClock

log = logging.getLogger("test")


class Engine:
    def __init__(self, sleep_s: float = 0.0, wake_s: float = 0.0) -> None:
        self.asleep, self.sleeps, self.wakes = False, 0, 0
        self._sleep_s, self._wake_s = sleep_s, wake_s

    async def sleep(self, level: int) -> None:
        await asyncio.sleep(self._sleep_s)
        self.asleep, self.sleeps = True, self.sleeps + 1

    async def wakeup(self) -> None:
        await asyncio.sleep(self._wake_s)
        self.asleep, self.wakes = False, self.wakes + 1

    def generate(self) -> None:
        assert not self.asleep, "a request reached a sleeping engine"


def sleeper(engine: Engine, clock: ManualClock, woke: list[float] | None = None) -> EngineSleep:
    return EngineSleep(engine, after_s=60, level=1, name="pool short", log=log, clock=clock,
                       on_wake=(woke.append if woke is not None else lambda s: None))


async def test_the_engine_sleeps_only_after_the_idle_period_and_never_under_a_request():
    engine, clock = Engine(), ManualClock(0.0)
    sleep = sleeper(engine, clock)
    clock.now = 59
    assert not await sleep.sleep_if_idle()
    async with sleep.in_use():
        clock.now = 200
        assert not await sleep.sleep_if_idle()  # a request runs: never
    clock.now = 259
    assert not await sleep.sleep_if_idle()  # the idle period counts from the request's end
    clock.now = 260
    assert await sleep.sleep_if_idle() and engine.asleep and sleep.asleep
    assert sleep.last_sleep_s == 0.0 and not sleep.falling_asleep


async def test_a_request_wakes_the_engine_first_and_the_wake_is_measured():
    engine, clock, woke = Engine(), ManualClock(0.0), []
    sleep = sleeper(engine, clock, woke)
    clock.now = 60
    await sleep.sleep_if_idle()
    async with sleep.in_use():
        engine.generate()
    assert engine.wakes == 1 and not sleep.asleep
    assert woke == [0.0] and sleep.last_wake_s == 0.0


async def test_requests_that_arrive_together_share_one_wake():
    engine, clock = Engine(wake_s=0.05), ManualClock(0.0)
    sleep = sleeper(engine, clock)
    clock.now = 60
    await sleep.sleep_if_idle()

    async def request():
        async with sleep.in_use():
            engine.generate()

    await asyncio.gather(*(request() for _ in range(5)))
    assert engine.wakes == 1


async def test_a_request_that_arrives_while_the_engine_falls_asleep_waits_and_wakes_it():
    engine, clock = Engine(sleep_s=0.05), ManualClock(0.0)
    sleep = sleeper(engine, clock)
    clock.now = 60
    falling = asyncio.create_task(sleep.sleep_if_idle())
    await asyncio.sleep(0.01)  # the engine is falling asleep now
    # Reported apart: a client waiting for a sleeping pool must not take the fall for the sleep.
    assert sleep.falling_asleep and not sleep.asleep
    async with sleep.in_use():
        engine.generate()
    assert await falling and engine.sleeps == 1 and engine.wakes == 1
    assert not sleep.falling_asleep and not sleep.asleep


async def test_a_failed_sleep_leaves_the_engine_awake_for_requests():
    class Refuses(Engine):
        async def sleep(self, level: int) -> None:
            raise RuntimeError("sleep mode is off")

    engine, clock = Refuses(), ManualClock(0.0)
    sleep = sleeper(engine, clock)
    clock.now = 60
    with pytest.raises(RuntimeError):
        await sleep.sleep_if_idle()
    assert not sleep.asleep and not sleep.falling_asleep and sleep.last_sleep_s is None
    async with sleep.in_use():
        engine.generate()
    assert engine.wakes == 0
