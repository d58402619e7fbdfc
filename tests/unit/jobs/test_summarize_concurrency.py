"""Summarize job: the AIMD controller's answer to each signal, the gate that applies it, the
app's pool readings, and the client's handling of 429s and errors (against a mock transport)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from core.wire import BATCH_DOCUMENT_HEADER as DOCUMENT_HEADER
from jobs.summarize.concurrency import AimdController, AimdSettings
from jobs.summarize.pool_load import job_load, parse_pools
from jobs.summarize.request_gate import RequestGate
from jobs.summarize.serve_client import RequestFailed, ServeClient, ServeSettings
from tests.support import ManualClock


def controller(initial=8, minimum=1, maximum=16, clock=None):
    return AimdController(AimdSettings(initial=initial, minimum=minimum, maximum=maximum), clock or ManualClock())


def test_a_429_halves_the_limit_and_pauses_for_its_retry_after():
    clock = ManualClock(100.0)
    aimd = controller(initial=8, clock=clock)
    change = aimd.on_overload(aimd.started(), retry_after_s=3)
    assert change.limit == 4 and "429" in change.reason
    assert aimd.pause_remaining() == 3 and not aimd.may_start(0)
    clock.now = 103.0
    assert aimd.may_start(3) and not aimd.may_start(4)


def test_a_burst_of_429s_from_one_window_halves_once():
    aimd = controller(initial=8)
    tickets = [aimd.started() for _ in range(8)]  # all in flight when the pool pushed back
    assert [aimd.on_overload(ticket, 1) is not None for ticket in tickets] == [True] + [False] * 7
    assert aimd.limit == 4
    # A request started after the decrease belongs to the new window: its 429 counts again.
    assert aimd.on_overload(aimd.started(), 1).limit == 2


def test_success_grows_the_limit_by_one_per_full_window():
    aimd = controller(initial=4)
    growth = []
    for _ in range(4 + 5 + 6):
        aimd.on_success(aimd.started())
        growth.append(aimd.limit)
    # 4 successes at limit 4 make it 5; 5 more make 6; 6 more make 7.
    assert growth[3] == 5 and growth[8] == 6 and growth[14] == 7
    assert growth[:3] == [4, 4, 4] and growth[4:8] == [5] * 4


def test_the_limit_never_passes_the_cap_nor_drops_under_the_floor():
    aimd = controller(initial=3, minimum=2, maximum=4)
    for _ in range(100):
        aimd.on_success(aimd.started())
    assert aimd.limit == 4
    for _ in range(10):
        aimd.on_overload(aimd.started(), None)
    assert aimd.limit == 2


def test_successes_from_before_a_decrease_do_not_count_toward_growth():
    aimd = controller(initial=2)
    old = [aimd.started() for _ in range(2)]
    aimd.on_overload(aimd.started(), None)  # limit 1
    for ticket in old:
        aimd.on_success(ticket)
    assert aimd.limit == 1
    aimd.on_success(aimd.started())
    assert aimd.limit == 2


def test_pool_load_shrinks_when_congested_and_holds_when_busy():
    aimd = controller(initial=8)
    assert aimd.on_load("congested", "short: 3 waiting").limit == 4
    assert aimd.on_load("congested").limit == 2  # each reading that still shows a queue
    aimd.on_load("busy")
    for _ in range(10):
        aimd.on_success(aimd.started())
    assert aimd.limit == 2  # engines full: hold
    aimd.on_load("clear")
    for _ in range(2):
        aimd.on_success(aimd.started())
    assert aimd.limit == 3


def test_settings_are_checked():
    with pytest.raises(ValueError):
        AimdSettings(initial=20, maximum=16)
    with pytest.raises(ValueError):
        AimdSettings(decrease_factor=1.0)


async def test_the_gate_holds_requests_to_the_limit():
    gate = RequestGate(controller(initial=2))
    peak = 0

    async def request():
        nonlocal peak
        async with gate.slot():
            peak = max(peak, gate.in_flight)
            await asyncio.sleep(0.01)

    await asyncio.gather(*(request() for _ in range(10)))
    assert peak == 2 and gate.in_flight == 0


async def test_the_gate_waits_out_a_pause_then_lets_requests_go():
    gate = RequestGate(AimdController(AimdSettings(initial=2)))
    loop = asyncio.get_running_loop()  # its clock is the controller's (monotonic)
    async with gate.slot() as ticket:
        # Timed from before the pause starts: a busy machine may run the next line late, and a
        # wait timed from there would look shorter than the pause.
        paused_at = loop.time()
        await gate.overloaded(ticket, 0.2)
    async with gate.slot():
        waited = loop.time() - paused_at
    # Not before the pause ends; then without waiting for a notification (none comes).
    assert 0.2 <= waited < 5.0


def pools_payload(**pools):
    return {"pools": {name: {"replicas": [{"in_engine": e, "max_in_engine": m, "waiting": w} for e, m, w in replicas]}
                      for name, replicas in pools.items()}}


def test_pool_readings_classify_the_pools_the_job_uses():
    readings = parse_pools(pools_payload(short=[(16, 16, 3)], long=[(1, 8, 0)]))
    assert job_load(readings, ["long"]) == ("clear", "")
    assert job_load(readings, ["short", "long"]) == ("congested", "short: 3 waiting, 16 in its engines")
    assert job_load(readings, [])[0] == "congested"  # before any answer: every pool counts
    assert job_load(parse_pools(pools_payload(short=[(16, 16, 0)])), ["short"])[0] == "busy"
    # An app without the queue figures gives no reading at all.
    assert parse_pools({"pools": {"short": {"replicas": [{"busy_s": 1.0}]}}}) is None


def mock_client(responses, settings=None, initial=4):
    """A client whose transport answers from `responses` in turn and records every request."""
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return responses[min(len(seen), len(responses)) - 1]

    http = httpx.AsyncClient(base_url="http://app", transport=httpx.MockTransport(handler))
    gate = RequestGate(AimdController(AimdSettings(initial=initial)))
    return ServeClient(settings or ServeSettings(url="http://app", model="m", max_attempts=3), gate, http), seen


def answer(text="a summary", cost=1e-6, pool="short"):
    body = {"choices": [{"message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 50, "completion_tokens": 7, "cost_usd": cost}}
    return httpx.Response(200, json=body, headers={"x-trilemma-pool": pool})


def overloaded(retry_after="0"):
    body = {"error": {"message": "pool 'short' is overloaded", "code": "pool_overloaded"}}
    return httpx.Response(429, json=body, headers={"Retry-After": retry_after})


async def test_a_429_is_waited_out_and_the_limit_halves():
    client, seen = mock_client([overloaded(), overloaded(), answer()])
    completion = await client.complete([{"role": "user", "content": "x"}], "docs/a b.md")
    assert (completion.text, completion.prompt_tokens, completion.completion_tokens) == ("a summary", 50, 7)
    assert completion.cost_usd == 1e-6 and completion.pool == "short" and client.pools_used == {"short"}
    # 4 -> 2 -> 1 (each retry starts in a new window), then the success fills a window of 1: 2.
    assert len(seen) == 3 and client.gate.controller.limit == 2
    request = seen[0]
    assert request.url.path == "/api/batch/chat/completions"
    assert request.headers[DOCUMENT_HEADER] == "docs%2Fa%20b.md"
    assert json.loads(request.content)["max_tokens"] == 128


async def test_server_errors_are_retried_then_fail_the_document():
    client, seen = mock_client([httpx.Response(502, json={"error": {"message": "llm request failed: boom"}})])
    client.settings = ServeSettings(url="http://app", model="m", max_attempts=2)
    with pytest.raises(RequestFailed, match=r"HTTP 502: llm request failed: boom \(after 2 attempts\)"):
        await client.complete([{"role": "user", "content": "x"}], "a")
    assert len(seen) == 2


async def test_client_errors_and_budgets_fail_at_once():
    budget = httpx.Response(429, json={"error": {"message": "over budget", "code": "budget_exceeded"}})
    client, seen = mock_client([budget])
    with pytest.raises(RequestFailed, match="HTTP 429: over budget"):
        await client.complete([{"role": "user", "content": "x"}], "a")
    client, seen = mock_client([httpx.Response(400, json={"error": {"message": "too long"}})])
    with pytest.raises(RequestFailed, match="HTTP 400: too long"):
        await client.complete([{"role": "user", "content": "x"}], "a")
    assert len(seen) == 1


def ttft_histogram(chat_buckets: dict[str, int]) -> str:
    """Ray's exposition of the router's TTFT histogram for the chat scenario."""
    lines = [f'ray_trilemma_ttft_seconds_bucket{{le="{le}",scenario="chat",priority="0"}} {count}'
             for le, count in chat_buckets.items()]
    return "\n".join(lines) + "\n"


def test_online_latency_over_its_slo_shrinks_the_job_near_it_holds():
    from jobs.summarize.latency_signal import LatencyWatch, judge

    assert [judge(p99, 1000, 0.8) for p99 in (500, 900, 1500)] == ["clear", "busy", "congested"]
    watch = LatencyWatch("http://app:8080/metrics", "chat", slo_ms=1000)
    assert watch.reading(ttft_histogram({"0.5": 10, "1.0": 10, "2.0": 10, "+Inf": 10})) is None  # one scrape: no window
    # The next 100 requests: 90 under 0.5 s, 10 between 1 and 2 s: p99 ~1.9 s.
    load, detail = watch.reading(ttft_histogram({"0.5": 100, "1.0": 100, "2.0": 110, "+Inf": 110}))
    assert load == "congested" and detail.startswith("chat TTFT p99 19") and "SLO 1000 ms" in detail
    # A window without chat requests says nothing.
    assert watch.reading(ttft_histogram({"0.5": 100, "1.0": 100, "2.0": 110, "+Inf": 110})) is None


async def test_the_watcher_shrinks_the_job_while_a_pool_queues():
    payloads = [pools_payload(short=[(16, 16, 4)]), pools_payload(short=[(16, 16, 2)]),
                pools_payload(short=[(3, 16, 0)])]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=payloads.pop(0) if len(payloads) > 1 else payloads[0])

    http = httpx.AsyncClient(base_url="http://app", transport=httpx.MockTransport(handler))
    gate = RequestGate(AimdController(AimdSettings(initial=8)))
    client = ServeClient(ServeSettings(url="http://app", model="m"), gate, http)
    watcher = asyncio.create_task(client.watch_service(0.01))
    await asyncio.sleep(0.2)
    watcher.cancel()
    assert gate.controller.limit == 2 and gate.controller.load == "clear"  # halved twice, then clear again


async def test_the_watcher_stops_asking_an_app_without_queue_figures():
    asked = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        return httpx.Response(200, json={"pools": {"short": {"replicas": [{"busy_s": 1.0}]}}})

    http = httpx.AsyncClient(base_url="http://app", transport=httpx.MockTransport(handler))
    client = ServeClient(ServeSettings(url="http://app", model="m"), RequestGate(controller()), http)
    await asyncio.wait_for(client.watch_service(0.01), timeout=5)
    assert asked == ["/trilemma/pools"]
