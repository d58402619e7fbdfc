"""Admission under saturation and replica choice, on a real Ray Serve app with fake engines.

The short pool has one replica that holds one request in its engine for HOLD_S and queues
four more (priority 0 may fill 4 places, 1: 3, 2: 2, 3: 1); the long pool has three replicas.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import httpx
import pytest

from serve_app.launcher import deployed
from tests.fake_engine import FakeEngine
from tests.support import config_for_tests

pytestmark = pytest.mark.integration

MODEL = "SmolLM2-135M-Instruct"
HOLD_S = 3.0
SPACING_S = 0.25  # between arrivals: far above the router's own time, far below HOLD_S


@pytest.fixture(scope="module")
def admission_url(ray_cluster, embedded_model_dir):
    raw = config_for_tests().model_dump()
    raw["app_name"] = "trilemma-admission"
    fake_pace = {"TRILEMMA_FAKE_TTFT_S": str(HOLD_S)}
    raw["pools"]["short"].update(
        resources={"CPU": 0.1}, env=fake_pace, admission={"max_in_engine": 1, "max_queued": 4},
    )
    raw["pools"]["long"].update(resources={"CPU": 0.1}, env=fake_pace, replicas=3)
    config = type(config_for_tests()).from_dict(raw)
    with deployed(config, engine_cls=FakeEngine, model_source=str(embedded_model_dir),
                  route_prefix="/admission") as url:
        httpx.post(f"{url}/api/chat", json=_body(), timeout=30).raise_for_status()  # the router's first request is slow
        yield url


def _body(max_tokens: int = 2) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens}


async def _send(client: httpx.AsyncClient, scenario: str, *, after_s: float, pool: str | None = None):
    await asyncio.sleep(after_s)
    headers = {"X-Trilemma-Pool": pool} if pool else {}
    return scenario, await client.post(f"/api/{scenario}", json=_body(), headers=headers)


async def test_saturation_sheds_batch_with_retry_after_and_never_real_time(admission_url):
    # One chat takes the engine; one batch waits; the next batch finds its one place taken
    # (shed); three chats queue; the last chat finds the queue full and takes the waiting
    # batch request's place (evicted). Arrivals are spaced so their order is certain.
    arrivals = ["chat", "batch", "batch", "chat", "chat", "chat", "chat"]
    async with httpx.AsyncClient(base_url=admission_url, timeout=60) as client:
        results = await asyncio.gather(*(
            _send(client, scenario, after_s=SPACING_S * index) for index, scenario in enumerate(arrivals)
        ))
    outcome = [(scenario, response.status_code, response.text[-160:]) for scenario, response in results]
    statuses = Counter((scenario, response.status_code) for scenario, response in results)
    assert statuses == {("chat", 200): 5, ("batch", 429): 2}, outcome
    refusals = [response for _, response in results if response.status_code == 429]
    for response in refusals:
        error = response.json()["error"]
        assert error["code"] == "pool_overloaded" and error["type"] == "RateLimitError"
        assert int(response.headers["retry-after"]) >= 1
        assert response.headers["x-trilemma-pool"] == "short"
    evicted, shed = (response.json()["error"]["message"] for response in refusals)  # in arrival order
    assert shed.startswith("pool 'short' is overloaded for priority 3: 1 waiting")
    assert "at priority 3's limit of 1 (admission.max_queued 4 x queue_share 0.25)" in shed
    assert "a priority 0 request took its place in the queue" in evicted


def test_the_engine_receives_the_scenario_priority(admission_url):
    with httpx.Client(base_url=admission_url, timeout=30) as client:
        batch = client.post("/api/batch", json=_body())
        chat = client.post("/api/chat", json=_body())
    assert batch.status_code == chat.status_code == 200
    assert batch.headers["x-trilemma-priority"] == "3"
    # The fake engine stamps a non-zero priority it was given, as vLLM's scheduler reads it.
    assert ",priority=3" in batch.json()["choices"][0]["message"]["content"]
    assert ",priority=" not in chat.json()["choices"][0]["message"]["content"]


async def test_least_loaded_router_spreads_concurrent_requests_over_idle_replicas(admission_url):
    async with httpx.AsyncClient(base_url=admission_url, timeout=60) as client:
        for _ in range(2):  # a random two-choice pick would double up a third of the time
            results = await asyncio.gather(*(
                _send(client, "chat", after_s=0.2 * index, pool="long") for index in range(3)
            ))
            replicas = {response.json()["choices"][0]["message"]["content"].split()[0] for _, response in results}
            assert len(replicas) == 3, replicas
