"""The engine busy clock: busy while at least one request is in the engine, never more."""

from __future__ import annotations

import pytest

from pool.engine_activity import EngineActivity
from tests.support import ManualClock


def test_overlapping_requests_count_their_union_once():
    clock = ManualClock(100.0)
    activity = EngineActivity(clock)
    clock.now = 102.0
    activity.begin()            # busy from 102
    clock.now = 103.0
    activity.begin()            # overlaps: still one busy interval
    clock.now = 105.0
    activity.end()
    clock.now = 106.0
    activity.end()              # idle from 106: 4 s busy
    clock.now = 110.0
    snapshot = activity.snapshot()
    assert snapshot.busy_s == pytest.approx(4.0)
    assert snapshot.wall_s == pytest.approx(10.0)
    assert (snapshot.in_flight, snapshot.requests_started, snapshot.requests_finished) == (0, 2, 2)


def test_an_open_interval_counts_up_to_the_reading():
    clock = ManualClock(100.0)
    activity = EngineActivity(clock)
    activity.begin()
    clock.now = 103.0
    assert activity.snapshot().busy_s == pytest.approx(3.0)
    assert activity.snapshot().in_flight == 1


def test_end_without_begin_is_a_bug_not_a_negative_count():
    with pytest.raises(RuntimeError, match="without a matching begin"):
        EngineActivity().end()
