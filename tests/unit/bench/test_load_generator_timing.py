"""How the load generator reads a timed stream: which of its own stamps and which of the app's
series each of a record's gaps and delays comes from."""

from __future__ import annotations

import json

import pytest

from bench import load_generator
from bench.metrics import RequestRecord
from contract.request_timeline import CLIENT_FIRST_TOKEN, CLIENT_SENT, TIMING_KEY


class SteppingClock:
    """`time()` and `perf_counter()` both move 10 ms at every reading of `time()`."""

    def __init__(self, start: float) -> None:
        self.now = start

    def time(self) -> float:
        self.now += 0.01
        return self.now

    def perf_counter(self) -> float:
        return self.now


class FakeResponse:
    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    @property
    def content(self):
        async def lines():
            for line in self.lines:
                yield line.encode()
        return lines()


def sse(event: dict) -> str:
    return f"data: {json.dumps(event)}\n"


async def test_every_event_is_timed_and_the_router_items_are_matched_to_them(monkeypatch):
    clock = SteppingClock(100.0)
    monkeypatch.setattr(load_generator, "time", clock)
    timing = {"engine_outputs": [100.005, 100.015, 100.025], "router_items": [100.006, 100.016, 100.026]}
    response = FakeResponse([
        sse({"choices": [{"delta": {"role": "assistant", "content": ""}}]}),  # arrives at 100.01
        sse({"choices": [{"delta": {"content": "Hi"}}]}),                      # 100.02
        "\n",                                                                   # not an event
        sse({"choices": [{"delta": {"content": ""}}]}),                        # 100.03, a token without text
        # The usage event, with the app's timing beside the usage (as the router sends it): 100.04.
        sse({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}, TIMING_KEY: timing}),
        "data: [DONE]\n",                                                      # not an event
    ])
    record = RequestRecord("chat", 0.0, 0.0)
    stamps = {CLIENT_SENT: 100.0}
    await load_generator._read_stream(response, record, started=100.0, stamps=stamps)

    # Four events, each stamped as it arrived, 10 ms apart; [DONE] and blank lines are not events.
    assert record.event_gaps_s == pytest.approx([0.01, 0.01, 0.01])
    # The first text chunk's stamp is its arrival stamp.
    assert stamps[CLIENT_FIRST_TOKEN] == pytest.approx(100.02)
    # Only text chunks make the client's inter-token gaps: one text chunk, so none.
    assert record.itl_s == []
    # The replica's outputs meet the router's items 1 ms later; the router's items meet the
    # client's next event.
    assert record.replica_to_router_s == pytest.approx([0.001, 0.001, 0.001])
    assert record.router_to_client_s == pytest.approx([0.004, 0.004, 0.004])


async def test_without_timing_no_series_is_kept(monkeypatch):
    monkeypatch.setattr(load_generator, "time", SteppingClock(100.0))
    response = FakeResponse([sse({"choices": [{"delta": {"content": "Hi"}}]}),
                             sse({"choices": [{"delta": {"content": "!"}}]})])
    record = RequestRecord("chat", 0.0, 0.0)
    await load_generator._read_stream(response, record, started=100.0, stamps=None)
    assert record.ttft_s is not None and len(record.itl_s) == 1
    assert record.event_gaps_s == record.router_to_client_s == record.replica_to_router_s == []
