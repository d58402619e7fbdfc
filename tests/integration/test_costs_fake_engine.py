"""Every answer says what it cost; the metrics count it (fake engines on a real Ray Serve app)."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from cluster.pricing import load_catalog, pool_rates
from core.config import CostConfig
from core.prometheus_text import samples as metric_samples
from tests.support import METRICS_TEST_PORT, config_for_tests

pytestmark = pytest.mark.integration

MODEL = "SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def short_rate():
    return pool_rates(config_for_tests(), load_catalog(CostConfig()))["short"]


def body(**fields):
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi there"}], "max_tokens": 6, **fields}


def test_an_answer_carries_its_cost_priced_from_the_catalog(client, short_rate):
    response = client.post("/v1/chat/completions", json=body(), headers={"X-Scenario": "cost"})
    assert response.status_code == 200
    usage = response.json()["usage"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] == 6
    assert usage["engine_busy_s"] > 0
    assert usage["cost_usd"] == pytest.approx(short_rate.usd_per_s * usage["engine_busy_s"], rel=1e-3)
    assert sum(usage["cost_breakdown_usd"].values()) == pytest.approx(usage["cost_usd"])
    assert float(response.headers["x-trilemma-cost-usd"]) == pytest.approx(usage["cost_usd"], rel=1e-3)


def events(response):
    return [json.loads(line[len("data: "):]) for line in response.text.splitlines()
            if line.startswith("data: {")]


def test_a_stream_carries_its_cost_in_the_usage_chunk_when_asked(client):
    asked = client.post("/v1/chat/completions",
                        json=body(stream=True, stream_options={"include_usage": True}))
    assert asked.status_code == 200 and float(asked.headers["x-trilemma-ttft-ms"]) > 0
    usage_events = [e for e in events(asked) if e.get("usage")]
    assert len(usage_events) == 1 and usage_events[0]["choices"] == []
    assert usage_events[0]["usage"]["cost_usd"] > 0 and usage_events[0]["usage"]["completion_tokens"] == 6
    # The router always asks the engine for usage (it needs it to count); a client that did
    # not ask gets none, as the OpenAI API promises.
    plain = client.post("/v1/chat/completions", json=body(stream=True))
    assert plain.status_code == 200 and plain.text.rstrip().endswith("data: [DONE]")
    assert not [e for e in events(plain) if e.get("usage")]
    assert sum(len(e["choices"]) for e in events(plain)) == 6


def test_pool_prices_come_from_the_catalog(client, short_rate):
    pools = client.get("/trilemma/pools").json()["pools"]
    assert pools["short"]["price_usd_per_hour"] == pytest.approx(short_rate.usd_per_hour)


def scrape() -> str:
    return httpx.get(f"http://127.0.0.1:{METRICS_TEST_PORT}/metrics", timeout=10).text


def test_metrics_count_tokens_and_dollars_by_pool_and_scenario(client):
    def tokens(text):
        samples = metric_samples(text, "ray_trilemma_tokens_total")
        return sum(v for labels, v in samples.items()
                   if dict(labels).get("scenario") == "quality" and dict(labels).get("direction") == "completion")

    before = tokens(scrape())
    for _ in range(3):
        assert client.post("/api/quality/chat/completions", json=body(max_tokens=7)).status_code == 200
    deadline = time.monotonic() + 60   # Ray exports application metrics every few seconds
    while tokens(text := scrape()) < before + 21 and time.monotonic() < deadline:
        time.sleep(1)
    assert tokens(text) == before + 21
    cost = metric_samples(text, "ray_trilemma_request_cost_usd_total")
    assert any(dict(labels).get("scenario") == "quality" and v > 0 for labels, v in cost.items())
    busy = metric_samples(text, "ray_trilemma_pool_busy_usd_total")
    idle = metric_samples(text, "ray_trilemma_pool_idle_usd_total")
    assert busy and idle and all(v > 0 for v in idle.values())
    assert metric_samples(text, "ray_trilemma_ttft_seconds_count")
