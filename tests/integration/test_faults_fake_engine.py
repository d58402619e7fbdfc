"""Faults on a real Ray Serve app with fake engines: an engine that dies and a replica process
that dies are found at once, the request that saw it goes to the other pool, later requests
skip the dead pool until Serve has replaced its replica, and a request no other pool may take
gets a 503 that names the pool and when it is expected back, at once. A stream cut by a dead
replica goes on in the other pool as one answer; clients that leave free their engine slots."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from core import wire

pytestmark = pytest.mark.integration

MODEL = "SmolLM2-135M-Instruct"
# A fault may take no longer than this to show in an answer: the router does not wait it out.
AT_ONCE_S = 2.0
# Clients that leave after the first chunk; a stream would otherwise take 8 x 0.2 s.
CLIENTS_LEAVING = 200
# The replacement: Serve's health check, a stop, a start of START_S, and slack for 2 cores.
REPLACED_WITHIN_S = 60.0


def _chat(url: str, content: str, scenario: str = "chat", stream: bool = False, timeout: float = 30) -> httpx.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 8, "stream": stream}
    return httpx.post(f"{url}/api/{scenario}/chat/completions", json=body, timeout=timeout)


def _served_by(response: httpx.Response) -> str:
    """The fake engine's stamp: deployment/replica that answered."""
    text = response.json()["choices"][0]["message"]["content"]
    return text.split()[0].removeprefix("served-by=")


def _wait_until_short_serves(url: str, not_by: str | None = None) -> str:
    """The stamp of the short pool's replica once it answers (a new one, if `not_by` is given)."""
    deadline = time.monotonic() + REPLACED_WITHIN_S
    while time.monotonic() < deadline:
        response = _chat(url, "hi", scenario="short-only")
        if response.status_code == 200 and _served_by(response) != not_by:
            return _served_by(response)
        time.sleep(0.5)
    raise AssertionError(f"the short pool did not serve again within {REPLACED_WITHIN_S} s")


@pytest.mark.parametrize("fault, reasons", [
    ("KILL_ENGINE", ("its engine died",)),
    # By gRPC (the default transport) Ray cannot tell a replica that died from one it cannot
    # reach; through the object store it can.
    ("KILL_REPLICA", ("its replica became unreachable", "its replica process died")),
])
def test_a_dead_short_pool_is_skipped_named_and_replaced(faults_url, fault, reasons):
    before = _wait_until_short_serves(faults_url)
    started = time.monotonic()
    response = _chat(faults_url, f"please {fault}@short now")
    assert response.status_code == 200, response.text
    assert response.headers[wire.POOL_HEADER] == "long"
    route = response.headers[wire.ROUTE_REASON_HEADER]
    assert any(f"retried after pool 'short' failed: {reason}" in route for reason in reasons), route
    assert time.monotonic() - started < AT_ONCE_S + 1

    # Until Serve has replaced the replica: chat skips the pool, short-only gets a 503 at once.
    started = time.monotonic()
    skipped = _chat(faults_url, "hello")
    refused = _chat(faults_url, "hello", scenario="short-only")
    assert time.monotonic() - started < AT_ONCE_S
    assert skipped.status_code == 200 and skipped.headers[wire.POOL_HEADER] == "long"
    assert "skipped pool 'short' is down" in skipped.headers[wire.ROUTE_REASON_HEADER]
    assert refused.status_code == 503, refused.text
    error = refused.json()["error"]
    assert error["code"] == "pool_unavailable"
    assert "pool 'short' is down" in error["message"] and "expected back" in error["message"]
    assert int(refused.headers["retry-after"]) >= 1

    after = _wait_until_short_serves(faults_url, not_by=before)
    assert after.startswith("pool-short/") and after != before


def _stream_events(url: str, content: str, scenario: str) -> list[str]:
    body = {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 8,
            "stream": True, "stream_options": {"include_usage": True}, "temperature": 0}
    with httpx.stream("POST", f"{url}/api/{scenario}/chat/completions", json=body, timeout=30) as response:
        assert response.status_code == 200
        return [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]


@pytest.mark.parametrize("fault", ["KILL_ENGINE_MIDSTREAM", "KILL_REPLICA_MIDSTREAM"])
def test_a_stream_cut_by_a_dead_replica_goes_on_in_the_other_pool_as_one_answer(faults_url, fault):
    _wait_until_short_serves(faults_url)
    events = _stream_events(faults_url, f"{fault}@short", scenario="chat")
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert not any("error" in chunk for chunk in chunks), chunks
    words = [chunk["choices"][0]["delta"]["content"].strip() for chunk in chunks if chunk["choices"]]
    assert words[0].startswith("served-by=pool-short/")
    assert words[1].startswith("served-by=pool-long/")  # the continuation's own first word
    assert len(words) == 8 and len({chunk["id"] for chunk in chunks}) == 1
    resumed = chunks[-1]["trilemma_resumed"]
    assert (resumed["from_pool"], resumed["to_pool"], resumed["after_tokens"]) == ("short", "long", 1)
    assert chunks[-1]["usage"]["completion_tokens"] == 8  # 1 from short + 7 from long, counted once
    _wait_until_short_serves(faults_url)


def test_a_stream_no_other_pool_may_take_ends_with_an_error_a_client_can_act_on(faults_url):
    _wait_until_short_serves(faults_url)
    events = _stream_events(faults_url, "KILL_ENGINE_MIDSTREAM@short", scenario="short-only")
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    assert "pool 'short' failed mid-stream after 1 tokens: its engine died" in error["message"]
    assert "pool 'short' is down" in error["message"]
    assert "stack trace" not in error["message"]
    _wait_until_short_serves(faults_url)


async def _leave_after_first_chunk(client: httpx.AsyncClient, url: str) -> int:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": True}
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        if response.status_code == 200:
            async for _ in response.aiter_lines():
                break  # the client leaves: the connection closes with the stream half read
        return response.status_code


def _in_pools(url: str) -> dict[str, int]:
    pools = httpx.get(f"{url}{wire.POOLS_PATH}", timeout=30).json()["pools"]
    return {f"{name}.{key}": sum(replica[key] for replica in pool["replicas"])
            for name, pool in pools.items() for key in ("in_engine", "waiting")}


async def test_clients_that_leave_mid_stream_free_every_engine_slot(faults_url):
    _wait_until_short_serves(faults_url)
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=None)) as client:
        statuses = await asyncio.gather(*(_leave_after_first_chunk(client, faults_url) for _ in range(CLIENTS_LEAVING)))
    assert statuses.count(200) >= CLIENTS_LEAVING // 4, statuses  # the rest were shed (429), not lost
    assert set(statuses) <= {200, 429}
    deadline = time.monotonic() + 10
    while any(_in_pools(faults_url).values()) and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
    assert not any(_in_pools(faults_url).values()), _in_pools(faults_url)
