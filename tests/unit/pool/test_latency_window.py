"""A replica's latency window: p99s and rate over the last seconds, nothing when it saw nothing."""

from __future__ import annotations

import pytest

from core import wire
from pool.latency_window import LatencyWindow
from tests.support import ManualClock


def test_p99s_and_rate_cover_only_the_window():
    clock = ManualClock()
    window = LatencyWindow(window_s=10.0, clock=clock)
    empty = window.stats()
    assert {key: empty.pop(key) for key in ("requests_per_s", "tokens_per_s")} == {"requests_per_s": 0.0,
                                                                                 "tokens_per_s": 0.0}
    assert not any(key.endswith("_p99_s") for key in empty)  # no p99: the autoscaler holds
    assert set(empty) == {*wire.SIZE_REQUESTS_KEYS, *wire.SIZE_TOKENS_KEYS} and not any(empty.values())
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


def test_requests_and_their_tokens_by_routed_size():
    """Each finished request counts in the bucket of its routed size (prompt + max_tokens): at or
    below an edge and above the one before; its work is its prompt and output tokens."""
    clock = ManualClock()
    window = LatencyWindow(window_s=10.0, clock=clock)
    window.record(0.1, 0.01, output_tokens=20, size_tokens=1024, prompt_tokens=900)  # on the edge: <= 1024
    window.record(0.1, 0.01, output_tokens=10, size_tokens=1025, prompt_tokens=1000)
    window.record(0.1, 0.01, output_tokens=5, size_tokens=10**6, prompt_tokens=10**6 - 64)
    window.record(0.1, None, output_tokens=5)  # no size known: not in the histogram
    stats = window.stats()
    assert stats["size_rps_le_1024"] == pytest.approx(0.1)
    assert stats["size_tps_le_1024"] == pytest.approx(92.0)
    assert stats["size_rps_le_1448"] == pytest.approx(0.1) and stats["size_tps_le_1448"] == pytest.approx(101.0)
    assert stats[f"size_rps_gt_{wire.SIZE_BUCKET_EDGES[-1]}"] == pytest.approx(0.1)
    assert sum(stats[key] for key in wire.SIZE_REQUESTS_KEYS) == pytest.approx(0.3)
    assert stats["requests_per_s"] == pytest.approx(0.4)
