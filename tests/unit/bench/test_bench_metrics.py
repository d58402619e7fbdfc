"""Benchmark aggregates against hand-computed values."""

from __future__ import annotations

import math

import pytest

from bench.metrics import RequestRecord, Slo, percentile, summarize


@pytest.mark.parametrize(
    "values, q, expected",
    [([1, 2, 3, 4], 50, 2.5), ([1, 2, 3, 4], 90, 3.7), ([1, 2, 3, 4], 99, 3.97),
     ([5], 99, 5), (list(range(101)), 99, 99), ([3, 1, 2], 0, 1), ([3, 1, 2], 100, 3)],
)
def test_percentile_interpolates_like_numpy(values, q, expected):
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_of_nothing_is_nan():
    assert math.isnan(percentile([], 50))


def record(ttft, e2e, out, scenario="chat", cost=None, error=None, prompt=10):
    return RequestRecord(scenario=scenario, started_s=0, e2e_s=e2e, ttft_s=ttft, prompt_tokens=prompt,
                         completion_tokens=out, cost_usd=cost, error=error)


def test_tpot_excludes_the_first_token():
    assert record(0.2, 1.2, 11).tpot_s == pytest.approx(0.1)
    assert record(0.2, 0.2, 1).tpot_s is None


def test_summary_throughput_goodput_and_cost():
    records = [
        record(0.1, 1.1, 11, cost=0.001),                  # tpot 0.1: meets both
        record(0.6, 1.6, 11, cost=0.001),                  # ttft 0.6 > 0.5: misses
        record(0.1, 3.1, 11, cost=0.002),                  # tpot 0.3 > 0.2: misses
        record(0.3, 1.0, 8, scenario="batch"),             # no SLO for batch: good, no cost
        record(None, 0.05, 0, error="http 503: closed"),   # failed: neither ok nor good
    ]
    summary = summarize(records, duration_s=10.0, slos={"chat": Slo(ttft_s=0.5, tpot_s=0.2)})
    assert summary["succeeded"] == 4 and summary["errors"] == {"http 503": 1}
    assert summary["request_throughput_rps"] == pytest.approx(0.4)
    assert summary["output_token_throughput_tps"] == pytest.approx((11 * 3 + 8) / 10)
    assert summary["total_token_throughput_tps"] == pytest.approx((11 * 3 + 8 + 40) / 10)
    assert summary["goodput_rps"] == pytest.approx(0.2)
    assert summary["slo_attainment"] == pytest.approx(2 / 5)
    assert summary["ttft_ms"]["p50"] == pytest.approx(200)
    assert summary["cost_usd"] == pytest.approx(0.004)
    assert summary["usd_per_request"] == pytest.approx(0.004 / 3)
    # Only requests with a cost count towards $ per token: 0.004 over 3 x (10 + 11) tokens.
    assert summary["usd_per_1m_tokens"] == pytest.approx(0.004 / 63 * 1e6)


def test_summary_without_costs_says_none():
    summary = summarize([record(0.1, 1.0, 5)], duration_s=1.0)
    assert summary["cost_usd"] is None and summary["usd_per_1m_tokens"] is None
