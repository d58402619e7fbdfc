"""Admission: the policies' decisions (table-driven) and the replica queue that applies them."""

from __future__ import annotations

import asyncio

import pytest

from contract.pool_faults import PoolOverloaded
from core.config import AdmissionConfig
from core.wire import PRIORITY_HEADER
from pool.admission import (
    AdmissionPolicy,
    QueueState,
    request_priority,
)
from pool.admission_queue import AdmissionQueue
from tests.support import ManualClock

# max_queued 8 with the default shares: priority 0 may fill 8, 1: 6, 2: 4, 3: 2.
PRIORITY = AdmissionPolicy.from_config(AdmissionConfig(max_queued=8), max_in_engine=2)
FIFO = AdmissionPolicy.from_config(AdmissionConfig(policy="fifo", max_queued=3), max_in_engine=2)


@pytest.mark.parametrize(
    ("policy", "priority", "state", "action", "evict"),
    [
        # A free engine slot and nobody waiting: straight in, whatever the class.
        (PRIORITY, 3, QueueState(in_engine=1), "admit", None),
        # Nobody jumps a queue, even into a free slot.
        (PRIORITY, 0, QueueState(in_engine=1, waiting=(3,)), "queue", None),
        # Engine full: each class queues while the queue is under its share.
        (PRIORITY, 3, QueueState(in_engine=2, waiting=(0,)), "queue", None),
        (PRIORITY, 3, QueueState(in_engine=2, waiting=(0, 0)), "shed", None),
        (PRIORITY, 2, QueueState(in_engine=2, waiting=(0, 0, 0)), "queue", None),
        (PRIORITY, 2, QueueState(in_engine=2, waiting=(0,) * 4), "shed", None),
        (PRIORITY, 0, QueueState(in_engine=2, waiting=(0,) * 7), "queue", None),
        # Full for real-time, and only real-time waits: the arrival is shed.
        (PRIORITY, 0, QueueState(in_engine=2, waiting=(0,) * 8), "shed", None),
        # Full, but lower classes wait: the newest of the least urgent gives up its place.
        (PRIORITY, 0, QueueState(in_engine=2, waiting=(3, 0, 2, 0, 0, 3, 0, 1)), "queue", 5),
        (PRIORITY, 1, QueueState(in_engine=2, waiting=(0, 2, 0, 0, 2, 0)), "queue", 4),
        # At its share, a class never displaces its own class or a more urgent one.
        (PRIORITY, 2, QueueState(in_engine=2, waiting=(2, 1, 0, 2)), "shed", None),
        # FIFO ignores class: the line's end is shed, real-time included.
        (FIFO, 3, QueueState(in_engine=2, waiting=(0, 0)), "queue", None),
        (FIFO, 0, QueueState(in_engine=2, waiting=(3, 3, 3)), "shed", None),
        (FIFO, 0, QueueState(in_engine=0), "admit", None),
    ],
)
def test_admission_decisions(policy, priority, state, action, evict):
    decision = policy.decide(priority, state)
    assert (decision.action, decision.evict) == (action, evict), decision.reason


def test_a_shed_reason_names_the_limit_and_its_value():
    decision = PRIORITY.decide(3, QueueState(in_engine=2, waiting=(0, 0)))
    assert "priority 3's limit of 2" in decision.reason
    assert "admission.max_queued 8 x queue_share 0.25" in decision.reason


def test_unknown_policy_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="'priority' or 'fifo'"):
        AdmissionConfig(policy="lifo")


def test_a_priority_no_share_lists_takes_the_nearest_more_urgent_share():
    policy = AdmissionPolicy.from_config(AdmissionConfig(max_queued=8, queue_share={0: 1.0, 2: 0.5}), 1)
    assert [policy.class_limit(p) for p in (-1, 0, 1, 2, 9)] == [8, 8, 8, 4, 4]


@pytest.mark.parametrize(
    ("headers", "body_priority", "expected"),
    [({PRIORITY_HEADER: "3"}, None, 3), ({}, 2, 2), (None, None, 0), ({PRIORITY_HEADER: "x"}, 1, 1),
     ({PRIORITY_HEADER: "--1"}, None, 0)],
)
def test_request_priority(headers, body_priority, expected):
    class Body:
        priority = body_priority

    assert request_priority(headers, Body()) == expected


def _queue(policy=PRIORITY, clock=None):
    shed: list[tuple[int, str]] = []
    queue = AdmissionQueue("short", policy, on_shed=lambda p, a: shed.append((p, a)),
                           clock=clock or ManualClock())
    return queue, shed


async def _hold(queue: AdmissionQueue, priority: int, order: list[int], release: asyncio.Event):
    async with queue.slot(priority):
        order.append(priority)
        await release.wait()


async def test_the_queue_serves_the_most_urgent_first_and_fifo_within_a_class():
    queue, _ = _queue()
    order: list[int] = []
    gates = [asyncio.Event() for _ in range(6)]
    tasks = [asyncio.create_task(_hold(queue, p, order, g)) for p, g in zip((3, 3, 2, 3, 0, 2), gates)]
    await asyncio.sleep(0)
    assert order == [3, 3] and (queue.in_engine, queue.waiting) == (2, 4)
    for gate in gates:  # each release lets the most urgent waiter in, once a slot is free
        gate.set()
        await asyncio.sleep(0.01)
    await asyncio.gather(*tasks)
    assert order == [3, 3, 0, 2, 2, 3]
    assert (queue.in_engine, queue.waiting) == (0, 0)


async def _one_running(max_queued: int):
    """A queue whose single engine slot a real-time request holds until `release` is set."""
    queue, shed = _queue(AdmissionPolicy.from_config(AdmissionConfig(max_queued=max_queued), max_in_engine=1))
    release = asyncio.Event()
    order: list[int] = []
    running = asyncio.create_task(_hold(queue, 0, order, release))
    await asyncio.sleep(0)
    return queue, shed, release, order, running


async def test_a_full_queue_evicts_the_least_urgent_waiter_with_a_429_reason():
    queue, shed, release, order, running = await _one_running(max_queued=2)
    waiting_batch = asyncio.create_task(_hold(queue, 1, order, release))
    waiting_chat = asyncio.create_task(_hold(queue, 0, order, release))
    await asyncio.sleep(0)
    urgent = asyncio.create_task(_hold(queue, 0, order, release))  # queue full: priority 1 goes
    await asyncio.sleep(0)
    with pytest.raises(PoolOverloaded, match="a priority 0 request took its place") as raised:
        await waiting_batch
    assert raised.value.retry_after_s >= 1 and shed == [(1, "evicted")]
    with pytest.raises(PoolOverloaded, match="limit of 2"):  # only real-time waits now
        async with queue.slot(0):
            pass
    release.set()
    await asyncio.gather(running, waiting_chat, urgent)
    assert shed == [(1, "evicted"), (0, "shed")]


async def test_a_cancelled_waiter_leaves_the_queue_and_frees_nothing_it_did_not_hold():
    queue, _, release, order, running = await _one_running(max_queued=4)
    waiter = asyncio.create_task(_hold(queue, 2, order, release))
    await asyncio.sleep(0)
    assert queue.waiting == 1
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    assert (queue.in_engine, queue.waiting) == (1, 0)
    release.set()
    await running
    assert (queue.in_engine, queue.waiting) == (0, 0)


async def test_retry_after_grows_with_the_work_ahead():
    clock = ManualClock()
    queue, _ = _queue(AdmissionPolicy.from_config(AdmissionConfig(max_queued=16), max_in_engine=1), clock)
    assert queue.retry_after_s(0) == 1  # nothing measured yet: the floor
    for _ in range(3):  # one request finishes every 2 s
        async with queue.slot(0):
            clock.now += 2.0
    release = asyncio.Event()
    order: list[int] = []
    tasks = [asyncio.create_task(_hold(queue, p, order, release)) for p in (0, 0, 0, 3, 3)]
    await asyncio.sleep(0)
    # 1 in the engine + 2 real-time waiting, 2 s apart: 6 s for a real-time request;
    # a batch request also waits for the 2 batch requests ahead of it.
    assert queue.retry_after_s(0) == 6
    assert queue.retry_after_s(3) == 10
    release.set()
    await asyncio.gather(*tasks)


async def test_a_cancelled_waiter_is_never_the_one_evicted():
    # A full queue (4: one batch, three real-time) whose batch waiter's client has just gone.
    queue, shed, release, order, running = await _one_running(max_queued=4)
    leaving = asyncio.create_task(_hold(queue, 3, order, release))
    staying = [asyncio.create_task(_hold(queue, 0, order, release)) for _ in range(3)]
    await asyncio.sleep(0)
    assert queue.waiting == 4
    # The arrival's task is scheduled first, so it runs before the cancelled task can leave.
    urgent = asyncio.create_task(_hold(queue, 0, order, release))
    leaving.cancel()  # its future is cancelled now; the task leaves the list when it next runs
    await asyncio.sleep(0)
    assert shed == [] and queue.waiting == 4  # the cancelled one was dropped, not evicted
    release.set()
    await asyncio.gather(running, *staying, urgent)
    assert leaving.cancelled() and (queue.in_engine, queue.waiting) == (0, 0)


async def test_idle_time_is_not_counted_as_drain_time():
    clock = ManualClock()
    queue, _ = _queue(AdmissionPolicy.from_config(AdmissionConfig(max_queued=16), max_in_engine=1), clock)
    for _ in range(3):
        async with queue.slot(0):
            clock.now += 2.0
        clock.now += 3600.0  # an idle hour between requests
    release = asyncio.Event()
    tasks = [asyncio.create_task(_hold(queue, 0, [], release)) for _ in range(3)]
    await asyncio.sleep(0)
    assert queue.retry_after_s(0) == 6  # (2 waiting + itself) x 2 s, not an hour
    release.set()
    await asyncio.gather(*tasks)


async def test_a_raised_engine_limit_lets_waiters_in_at_once_and_a_lowered_one_waits_for_finishes():
    queue, _ = _queue(AdmissionPolicy.from_config(AdmissionConfig(), max_in_engine=1))
    order: list[int] = []
    gates = [asyncio.Event() for _ in range(3)]
    tasks = [asyncio.create_task(_hold(queue, 0, order, gate)) for gate in gates]
    await asyncio.sleep(0)
    assert (queue.in_engine, queue.waiting) == (1, 2)
    queue.set_max_in_engine(3)
    await asyncio.sleep(0)
    assert (queue.in_engine, queue.waiting, queue.max_in_engine) == (3, 0, 3)
    queue.set_max_in_engine(1)  # nobody is stopped mid-stream
    assert queue.in_engine == 3
    late = asyncio.create_task(_hold(queue, 0, order, asyncio.Event()))
    await asyncio.sleep(0)
    assert queue.waiting == 1
    gates[0].set()
    gates[1].set()
    await asyncio.sleep(0.01)
    assert (queue.in_engine, queue.waiting) == (1, 1)  # two left, none entered: still at the limit
    gates[2].set()
    await asyncio.gather(*tasks)
    await asyncio.sleep(0.01)
    assert (queue.in_engine, queue.waiting) == (1, 0)
    late.cancel()
