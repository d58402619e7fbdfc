"""Phase quantiles from two scrapes of the router's cumulative histograms."""

from __future__ import annotations

import math

import pytest

from core.prometheus_text import phase_latency, quantile


def _exposition(counts: dict[str, list[int]]) -> str:
    bounds = ["0.1", "0.5", "1.0", "+Inf"]
    lines = []
    for scenario, cumulative in counts.items():
        priority = "0" if scenario == "chat" else "3"
        for bound, count in zip(bounds, cumulative):
            lines.append(f'ray_trilemma_ttft_seconds_bucket{{le="{bound}",pool="short",priority="{priority}",'
                         f'scenario="{scenario}",tenant="x"}} {count}')
    return "\n".join(lines)


def test_quantile_interpolates_within_a_bucket_like_promql():
    buckets = {0.1: 50.0, 0.5: 90.0, 1.0: 100.0, math.inf: 100.0}
    assert quantile(buckets, 0.5) == pytest.approx(0.1)
    assert quantile(buckets, 0.7) == pytest.approx(0.1 + 0.4 * 20 / 40)
    assert quantile(buckets, 0.99) == pytest.approx(0.5 + 0.5 * 9 / 10)
    assert quantile({0.1: 0.0, math.inf: 4.0}, 0.5) == 0.1  # above the last bound: that bound
    assert math.isnan(quantile({0.1: 0.0, math.inf: 0.0}, 0.5))


def test_a_phase_is_the_difference_of_two_scrapes_by_scenario_and_priority():
    before = _exposition({"chat": [10, 10, 10, 10], "batch": [0, 1, 1, 1]})
    after = _exposition({"chat": [10, 20, 30, 30], "batch": [0, 1, 1, 1]})
    figures = phase_latency(before, after)
    assert set(figures) == {"chat/0"}  # batch saw nothing new in the phase
    chat = figures["chat/0"]
    assert chat["ttft_count"] == 20
    assert chat["ttft_p50_ms"] == pytest.approx(500.0)  # 10 of the 20 new ones are under 0.5 s
    assert "tpot_count" not in chat
    assert phase_latency(None, after) is None
