"""Utilization and capacity cost from two busy-clock readings."""

from __future__ import annotations

import pytest

from bench.pool_activity import capacity_cost, utilization


def reading(short_replicas, long_replicas=()):
    return {
        "short": {"accelerator": "cpu", "price_usd_per_hour": 3.6, "replicas": list(short_replicas)},
        "long": {"accelerator": "cpu", "price_usd_per_hour": 7.2, "replicas": list(long_replicas)},
    }


def replica(name, busy, wall):
    return {"replica": name, "busy_s": busy, "wall_s": wall, "in_flight": 0,
            "requests_started": 0, "requests_finished": 0}


def test_busy_fraction_and_dollars_over_the_window():
    before = reading([replica("a", 10, 100), replica("b", 0, 50)], [replica("c", 5, 100)])
    after = reading([replica("a", 40, 150), replica("b", 10, 100)], [replica("c", 5, 200)])
    pools = utilization(before, after)
    # short: (30 + 10) busy of (50 + 50) replica-seconds at $0.001/s
    assert pools["short"]["busy_fraction"] == pytest.approx(0.4)
    assert pools["short"]["busy_usd"] == pytest.approx(0.040)
    assert pools["short"]["idle_usd"] == pytest.approx(0.060)
    # long: idle for its whole 100 s window at $0.002/s
    assert pools["long"]["busy_fraction"] == 0.0
    assert pools["long"]["idle_usd"] == pytest.approx(0.2)


def test_replicas_without_a_window_are_left_out():
    before = reading([replica("a", 0, 10)])
    after = reading([replica("a", 5, 20), replica("new", 1, 1)])
    pools = utilization(before, after)
    assert pools["short"]["replicas"] == 1 and pools["short"]["busy_fraction"] == pytest.approx(0.5)
    assert pools["long"]["busy_fraction"] is None


def test_no_clock_means_unknown_not_zero():
    assert utilization(None, reading([])) is None
    assert capacity_cost({"prompt_tokens": 1, "completion_tokens": 1, "goodput_rps": 1, "duration_s": 1}, None) == {
        "provisioned_usd": None, "provisioned_usd_per_1m_tokens": None, "good_requests_per_usd": None}


def test_capacity_cost_per_token_and_per_good_request():
    pools = {"short": {"busy_usd": 0.3, "idle_usd": 0.1}, "long": {"busy_usd": 0.0, "idle_usd": 0.1}}
    summary = {"prompt_tokens": 150_000, "completion_tokens": 50_000, "goodput_rps": 2.0, "duration_s": 10.0}
    cost = capacity_cost(summary, pools)
    assert cost["provisioned_usd"] == pytest.approx(0.5)
    assert cost["provisioned_usd_per_1m_tokens"] == pytest.approx(2.5)   # $0.5 / 0.2M tokens
    assert cost["good_requests_per_usd"] == pytest.approx(40.0)          # 20 good requests / $0.5
