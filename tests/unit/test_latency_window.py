"""A replica's latency window: p99s and rate over the last seconds, nothing when it saw nothing."""

from __future__ import annotations

import pytest

from serving.latency_window import LatencyWindow
from tests.support import ManualClock


def test_p99s_and_rate_cover_only_the_window():
    clock = ManualClock()
    window = LatencyWindow(window_s=10.0, clock=clock)
    assert window.stats() == {"requests_per_s": 0.0, "tokens_per_s": 0.0}  # no p99: the autoscaler holds
    window.record(5.0, 0.5)  # an old outlier
    clock.now = 20.0
    for ttft in range(1, 101):
        window.record(ttft / 1000, None, output_tokens=3)
    stats = window.stats()
    assert stats["requests_per_s"] == pytest.approx(10.0)
    assert stats["tokens_per_s"] == pytest.approx(30.0)
    assert stats["ttft_p99_s"] == pytest.approx(0.09901)  # the outlier has left the window
    assert stats["ttft_p50_s"] == pytest.approx(0.0505)
    assert "tpot_p99_s" not in stats
