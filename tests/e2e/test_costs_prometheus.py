"""Costs with the real engine: answers priced from the catalog, a real Prometheus server that
scrapes the app and sees the counters move by what the requests did, tenants and budgets."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from cluster.pricing import load_catalog, pool_rates
from core.config import CostConfig
from serve_app.cli import main
from tests.e2e.prometheus_reads import query, settled, wait_for
from tests.support import METRICS_TEST_PORT, config_for_tests

pytestmark = pytest.mark.e2e

MODEL = "SmolLM2-135M-Instruct"
QUESTION = [{"role": "user", "content": "Name   three   colors.\n\n\n\nBe brief."}]


@pytest.fixture
def client(base_url, api_key):
    return openai.OpenAI(base_url=f"{base_url}/api/cost", api_key=api_key, max_retries=0, timeout=120)


def test_a_real_answer_costs_its_busy_time_at_the_catalog_price(client):
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=QUESTION, max_tokens=12)
    usage = raw.parse().usage.model_dump()
    rate = pool_rates(config_for_tests(), load_catalog(CostConfig()))[raw.headers["x-trilemma-pool"]]
    assert usage["completion_tokens"] > 0 and usage["engine_busy_s"] > 0
    assert usage["cost_usd"] == pytest.approx(rate.usd_per_s * usage["engine_busy_s"], rel=1e-4)
    assert float(raw.headers["x-trilemma-cost-usd"]) == pytest.approx(usage["cost_usd"], rel=1e-4)
    assert sum(usage["cost_breakdown_usd"].values()) == pytest.approx(usage["cost_usd"], rel=1e-6)


def test_prometheus_sees_the_counters_move_by_what_requests_did(client, prometheus, capsys):
    tokens_q = 'sum(trilemma_tokens_total{scenario="cost",direction="completion"})'
    prompt_q = 'sum(trilemma_tokens_total{scenario="cost",direction="prompt"})'
    cost_q = 'sum(trilemma_request_cost_usd_total{scenario="cost"})'
    before = settled(prometheus, (tokens_q, prompt_q, cost_q))
    usages = [client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=8).usage
              for _ in range(3)]
    completion = sum(u.completion_tokens for u in usages)
    prompt = sum(u.prompt_tokens for u in usages)
    dollars = sum(u.model_dump()["cost_usd"] for u in usages)
    assert wait_for(prometheus, tokens_q, before[tokens_q] + completion) == before[tokens_q] + completion
    assert wait_for(prometheus, prompt_q, before[prompt_q] + prompt) == before[prompt_q] + prompt
    assert wait_for(prometheus, cost_q, before[cost_q] + dollars * 0.999) == pytest.approx(
        before[cost_q] + dollars, rel=1e-6)
    # The per-pool $/1M tokens docs/costs.md's query gives, and the idle dollars beside it.
    per_million = query(prometheus, "1e6 * sum by (pool) (trilemma_request_cost_usd_total) / "
                                    "sum by (pool) (trilemma_tokens_total)")
    assert per_million > 0
    assert wait_for(prometheus, "sum(trilemma_pool_idle_usd_total)", 1e-12) > 0
    # The prompt's extra whitespace was removed before it was counted: the cost scenario saves.
    assert wait_for(prometheus, 'sum(trilemma_prompt_tokens_saved_total{scenario="cost"})', 1) >= 1
    assert main(["cost", "report", "--metrics-url", f"http://127.0.0.1:{METRICS_TEST_PORT}/metrics"]) == 0
    report = capsys.readouterr().out.splitlines()
    assert any(line.split()[:2] == ["scenario", "cost"] for line in report)
    assert any(line.startswith("pool short:") for line in report)


def test_a_request_without_a_valid_key_is_401(base_url):
    for key in ("", "tk-not-a-key"):
        response = httpx.post(f"{base_url}/v1/chat/completions", timeout=30,
                              headers={"Authorization": f"Bearer {key}"} if key else {},
                              json={"model": MODEL, "messages": QUESTION, "max_tokens": 4})
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "invalid_api_key"


def test_a_tenant_over_its_daily_budget_is_429_until_reset(base_url, tenant_keys):
    tiny = openai.OpenAI(base_url=f"{base_url}/v1", api_key=tenant_keys[1]["tiny"], max_retries=0, timeout=120)
    tiny.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=4)   # spends past $1e-9
    deadline = time.monotonic() + 10   # the spend reaches the ledger just after the answer
    while True:
        try:
            tiny.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=4)
        except openai.RateLimitError as error:
            message = error.body["message"]
            assert "tenant 'tiny' has spent $" in message and "daily budget of $1e-09" in message
            assert "resets at" in message and 0 < int(error.response.headers["retry-after"]) <= 86401
            return
        assert time.monotonic() < deadline, "the over-budget tenant was still served"


def test_prometheus_sees_ttft_and_tpot_by_priority(base_url, api_key, prometheus):
    """Streamed requests of two classes land in the latency histograms under their priority."""
    chat_q = 'sum(trilemma_ttft_seconds_count{scenario="chat",priority="0"})'
    batch_q = 'sum(trilemma_tpot_seconds_count{scenario="batch",priority="3"})'
    before = settled(prometheus, (chat_q, batch_q))
    for scenario in ("chat", "batch"):
        streamed = openai.OpenAI(base_url=f"{base_url}/api/{scenario}", api_key=api_key, max_retries=0,
                                 timeout=120).chat.completions.create(
            model=MODEL, messages=QUESTION, max_tokens=8, stream=True, extra_body={"ignore_eos": True})
        assert "".join(chunk.choices[0].delta.content or "" for chunk in streamed if chunk.choices)
    assert wait_for(prometheus, chat_q, before[chat_q] + 1) == before[chat_q] + 1
    assert wait_for(prometheus, batch_q, before[batch_q] + 1) == before[batch_q] + 1
