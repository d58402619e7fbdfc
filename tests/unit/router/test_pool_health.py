"""The router's view of pool health: closed on a failure for a hold, down while the controller
counts no running replica, and an expected return from the pool's measured start time."""

from __future__ import annotations

import pytest

from router.pool_health import UNKNOWN_START_RETRY_AFTER_S, PoolHealth
from tests.support import ManualClock


@pytest.fixture
def clock():
    return ManualClock(100.0)


@pytest.fixture
def health(clock):
    return PoolHealth(["short", "long"], failure_hold_s=5.0, clock=clock)


def test_a_pool_not_read_yet_is_assumed_up(health):
    assert health.available("short") and health.outage("short") is None


def test_no_running_replica_is_an_outage_expected_back_after_the_measured_start(health, clock):
    health.observe("short", running=1, starting=0, start_s=200.0)
    clock.now = 110.0
    health.observe("short", running=0, starting=1)
    clock.now = 150.0
    outage = health.outage("short")
    assert outage is not None and not health.available("short")
    assert outage.down_for_s == pytest.approx(40.0)
    assert outage.expected_back_in_s == pytest.approx(160.0)
    assert outage.retry_after_s == 160
    assert "no replica running, 1 starting" in outage.describe()
    assert "expected back in about 160 s" in outage.describe()
    assert health.available("long")


def test_a_pool_back_running_forgets_its_outage(health, clock):
    health.observe("short", running=0, starting=1)
    clock.now = 130.0
    health.observe("short", running=1, starting=0)
    assert health.available("short")
    clock.now = 140.0
    health.observe("short", running=0, starting=1)
    assert health.outage("short").down_for_s == 0.0  # a new outage, not the old one


def test_a_failure_closes_the_pool_for_the_hold_then_lets_a_request_try(health, clock):
    health.observe("short", running=1, starting=0, start_s=60.0)
    health.failed("short", "its engine died: EngineCore stopped")
    clock.now = 104.0
    outage = health.outage("short")
    assert outage is not None
    assert "its engine died" in outage.reason
    assert outage.expected_back_in_s == pytest.approx(56.0)
    clock.now = 105.0
    assert health.available("short")  # the controller still counts the replica: try once


def test_a_failure_and_no_running_replica_keep_the_first_down_time(health, clock):
    health.failed("short", "its replica died")
    clock.now = 110.0
    health.observe("short", running=0, starting=1)
    clock.now = 120.0
    outage = health.outage("short")
    assert outage.down_for_s == pytest.approx(20.0)
    assert outage.reason == "its replica died; no replica running, 1 starting"


def test_an_overdue_pool_asks_for_a_retry_soon_and_an_unmeasured_one_for_the_default(health, clock):
    health.observe("short", running=0, starting=1, start_s=10.0)
    clock.now = 200.0
    assert health.outage("short").expected_back_in_s == 0.0
    assert health.outage("short").retry_after_s == 1
    health.observe("long", running=0, starting=0)
    outage = health.outage("long")
    assert outage.expected_back_in_s is None
    assert outage.retry_after_s == UNKNOWN_START_RETRY_AFTER_S
    assert "no start time measured yet" in outage.describe()


def test_the_controllers_replica_states_count_as_running_or_starting():
    from router.pool_watch import count_replicas

    assert count_replicas(["RUNNING", "STARTING", "STARTING", "STOPPING"]) == (1, 2)
    assert count_replicas(["UPDATING", "STARTING"]) == (0, 2)
    assert count_replicas([]) == (0, 0)
    # A restarted controller's replicas serve while it recovers them.
    assert count_replicas(["RECOVERING", "STARTING"]) == (1, 1)
