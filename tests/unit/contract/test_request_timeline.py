"""A request's hop times: asked for by header, stamped once per point, added up to its TTFT."""

from __future__ import annotations

import pytest

from bench.hops import engine_split, hop_summary, markdown
from bench.metrics import RequestRecord
from contract import request_timeline
from contract.request_timeline import CLIENT_FIRST_TOKEN, CLIENT_SENT, HOPS, RequestTimeline, hops_ms
from core import wire


def test_only_a_request_that_asks_gets_a_timeline():
    assert RequestTimeline.asked_for({wire.TIMING_HEADER: "1"}) is not None
    assert RequestTimeline.asked_for({}) is None and RequestTimeline.asked_for(None) is None


def test_the_first_stamp_of_a_point_stands(monkeypatch):
    clock = iter([10.0, 11.0])
    monkeypatch.setattr(request_timeline.time, "time", lambda: next(clock))
    timeline = RequestTimeline()
    timeline.stamp("engine_first_output")
    timeline.stamp("engine_first_output")
    assert timeline.stamps == {"engine_first_output": 10.0}


def test_the_hops_follow_each_other_and_add_up_to_the_time_to_first_token():
    names = [start for _, start, _ in HOPS] + [HOPS[-1][2]]
    assert names[0] == CLIENT_SENT and names[-1] == CLIENT_FIRST_TOKEN
    assert all(HOPS[i][2] == HOPS[i + 1][1] for i in range(len(HOPS) - 1))  # no gap, no overlap
    stamps = {name: 100.0 + 0.01 * index for index, name in enumerate(names)}
    hops = hops_ms(stamps)
    assert list(hops) == [hop for hop, _, _ in HOPS]
    assert sum(hops.values()) == pytest.approx((stamps[CLIENT_FIRST_TOKEN] - stamps[CLIENT_SENT]) * 1000)


def test_a_missing_stamp_leaves_out_only_its_hops():
    stamps = {name: 1.0 for _, start, end in HOPS for name in (start, end)}
    del stamps["pool_admitted"]
    assert set(hops_ms(stamps)) == {hop for hop, _, _ in HOPS} - {"admission queue", "engine"}


def test_the_summary_counts_only_requests_with_every_hop():
    full = {hop: 2.0 for hop, _, _ in HOPS}
    records = [
        RequestRecord("chat", 0.0, 1.0, ttft_s=0.016, completion_tokens=4, itl_s=[0.01, 0.01, 0.05], hops_ms=full,
                      engine_gaps_s=[0.01, 0.01, 0.01], router_gaps_s=[0.01, 0.01, 0.05],
                      event_gaps_s=[0.0, 0.002, 0.003, 0.004], replica_to_router_s=[0.0005, 0.0005, 0.0005, 0.003],
                      router_to_client_s=[0.001, 0.001, 0.001, 0.002]),
        RequestRecord("chat", 0.0, 1.0, ttft_s=0.5, completion_tokens=4, itl_s=[0.0001, 0.05, 0.0001],
                      hops_ms={"router": 1.0}),
    ]
    summary = hop_summary(records)
    assert (summary["requests"], summary["timed"]) == (2, 1)
    assert summary["hops_ms"]["engine"]["p50"] == 2.0
    assert summary["sum_of_hop_medians_ms"] == 2.0 * len(HOPS)
    assert summary["ttft_ms"]["p50"] == pytest.approx(16.0)
    assert summary["tokens_per_burst"] == pytest.approx((1.0 + 2.0) / 2)  # 4 tokens in 4 bursts, in 2
    # A 50 ms gap the engine did not make and the router already saw: the way to the router added it.
    assert summary["chunk_gap_ms"]["p99"] > 40 and summary["router_item_gap_ms"]["p99"] > 40
    assert summary["engine_output_gap_ms"]["p99"] == pytest.approx(10.0)
    # Each series from its own field: no other has these values.
    assert summary["event_gap_ms"]["p50"] == pytest.approx(2.5)
    assert summary["router_to_client_item_ms"]["p50"] == pytest.approx(1.0)
    assert summary["replica_to_router_item_ms"]["p50"] == pytest.approx(0.5)
    assert summary["replica_to_router_item_ms"]["p99"] > 2.9


def test_the_engine_hop_is_split_by_vllms_own_account_and_the_parts_add_up_to_it():
    hops = {hop: 1.0 for hop, _, _ in HOPS} | {"engine": 40.0}
    summary = hop_summary([RequestRecord("chat", 0.0, 1.0, ttft_s=0.047, completion_tokens=2, hops_ms=hops)])
    engine = {"requests": 1, "engine_ttft_ms": 36.0, "queue_ms": 0.5, "prefill_ms": 28.0}
    split = engine_split(summary, engine)
    assert split["engine_hop"] == 40.0
    parts = [value for part, value in split.items() if part != "engine_hop"]
    assert parts == pytest.approx([4.0, 7.5, 0.5, 28.0])  # serving layer, front end, queue, prefill
    assert sum(parts) == pytest.approx(40.0)
    assert engine_split(summary, None) is None  # the app's metrics could not be read
    assert engine_split(summary, {**engine, "prefill_ms": None}) is None
    point = {"concurrency": 1, "summary": summary, "engine_split": split}
    shown = markdown({"name": "h", "command": "c", "url": "u", "machine": "m", "max_tokens": 2, "points": [point]})
    assert "| queued in the engine core's scheduler | 0.5 |" in shown
    assert "vLLM's own account" not in markdown({"name": "h", "command": "c", "url": "u", "machine": "m",
                                                 "max_tokens": 2, "points": [{**point, "engine_split": None}]})


def test_each_router_item_is_matched_to_the_first_client_event_after_it():
    # Two items the router got; the client's events: one before either (a stale one), one 1 ms
    # after the first, one 30 ms after the second (held on the way out).
    delays = request_timeline.item_delays_s([10.0, 10.05], [9.9, 10.001, 10.08])
    assert delays == pytest.approx([0.001, 0.03])
    # An item whose event never came (a stream cut short) has no delay, not a made-up one.
    assert request_timeline.item_delays_s([10.0, 11.0], [10.002]) == pytest.approx([0.002])
    # A receipt at the very time of the item counts ("at or after"); nothing in, nothing out.
    assert request_timeline.item_delays_s([10.0], [10.0]) == [0.0]
    assert request_timeline.item_delays_s([], [10.0]) == [] and request_timeline.item_delays_s([10.0], []) == []


def test_an_item_delay_is_a_lower_bound_where_the_next_point_lags():
    # Three engine outputs the replica sent 10 ms apart, batched into one router item 40 ms after
    # the first: each meets that one receipt, the first with its whole wait, the last with less.
    delays = request_timeline.item_delays_s([10.0, 10.01, 10.02], [10.04])
    assert delays == pytest.approx([0.04, 0.03, 0.02])
    # A client two items behind: the second item meets the first one's late receipt, so its
    # delay reads shorter than the 60 ms it waited; never longer.
    delays = request_timeline.item_delays_s([10.0, 10.05], [10.06, 10.11])
    assert delays == pytest.approx([0.06, 0.01])
