"""End to end: the real vLLM CPU engine and the embedded SmolLM2, through the `openai` client."""

from __future__ import annotations

import json
import statistics

import httpx
import openai
import pytest

from bench.app_processes import replica_processes
from engine.processes import engine_cores_under, is_forkserver

pytestmark = pytest.mark.e2e

MODEL = "SmolLM2-135M-Instruct"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
# Real prose, long enough that prompt + max_tokens crosses the 1024-token threshold.
LONG_DOCUMENT = (
    "Ray Serve is a scalable model serving library for building online inference APIs. "
    "It is framework-agnostic, so one toolkit serves everything from deep learning models "
    "to arbitrary business logic, and it scales replicas up and down with the load. "
) * 25


@pytest.fixture
def client(base_url, api_key):
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key=api_key, max_retries=0, timeout=120)


def ask(client, **fields):
    """A chat completion with its HTTP headers."""
    raw = client.chat.completions.with_raw_response.create(model=MODEL, **fields)
    return raw.parse(), raw.headers


def test_models_lists_the_public_name_once(client):
    assert [model.id for model in client.models.list().data] == [MODEL]


def test_chat_answers_and_counts_tokens_like_the_engine(client):
    reply, headers = ask(client, messages=QUESTION, max_tokens=16, temperature=0)
    assert "Paris" in reply.choices[0].message.content
    assert headers["x-trilemma-pool"] == "short"
    assert headers["x-trilemma-scenario"] == "chat"
    # The router's count (used for routing) is the engine's count of the same prompt.
    assert reply.usage.prompt_tokens == int(headers["x-trilemma-prompt-tokens"])
    assert 0 < reply.usage.completion_tokens <= 16


def test_chat_streams(client):
    with client.chat.completions.with_streaming_response.create(
        model=MODEL, messages=QUESTION, max_tokens=16, temperature=0, stream=True
    ) as response:
        assert response.headers["x-trilemma-pool"] == "short"
        chunks = [chunk for chunk in response.parse()]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "Paris" in text and len(chunks) > 3


def test_completions_plain_and_streamed(client):
    reply = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=8, temperature=0)
    assert reply.choices[0].text.strip() and reply.usage.completion_tokens > 0
    streamed = client.completions.create(
        model=MODEL, prompt="The capital of France is", max_tokens=8, temperature=0, stream=True
    )
    assert "".join(chunk.choices[0].text for chunk in streamed) == reply.choices[0].text


def test_long_prompt_goes_to_the_long_pool(client):
    messages = [{"role": "user", "content": f"Summarize in one sentence:\n\n{LONG_DOCUMENT}"}]
    reply, headers = ask(client, messages=messages, max_tokens=16, temperature=0, extra_headers={"X-Scenario": "batch"})
    assert headers["x-trilemma-pool"] == "long"
    assert "> threshold 1024: long pool" in headers["x-trilemma-route-reason"]
    assert reply.usage.prompt_tokens + 16 > 1024 and reply.choices[0].message.content


def test_scenario_entry_point_with_the_openai_client(base_url, api_key):
    quality = openai.OpenAI(base_url=f"{base_url}/api/quality", api_key=api_key, max_retries=0)
    raw = quality.chat.completions.with_raw_response.create(
        model=MODEL, messages=QUESTION, max_tokens=8, temperature=1.5
    )
    assert raw.headers["x-trilemma-scenario"] == "quality"
    assert "temperature 1.5 lowered to 0.1" in raw.headers["x-trilemma-adjustments"]
    assert raw.parse().choices[0].message.content


def assert_still_serving(client):
    reply, _ = ask(client, messages=QUESTION, max_tokens=4, temperature=0)
    assert reply.choices[0].message.content


def test_oversize_prompt_is_400_with_both_numbers(client):
    huge = [{"role": "user", "content": LONG_DOCUMENT * 8}]
    with pytest.raises(openai.BadRequestError) as caught:
        ask(client, messages=huge, max_tokens=16, extra_headers={"X-Scenario": "batch"})
    message = caught.value.body["message"]
    assert "max_tokens 16" in message and "max_model_len of 8192" in message
    assert_still_serving(client)


def test_bad_json_is_400(base_url, client, api_key):
    response = httpx.post(f"{base_url}/v1/chat/completions", content=b'{"model": ', timeout=30,
                          headers={"Authorization": f"Bearer {api_key}"})
    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith("malformed JSON body")
    assert_still_serving(client)


def test_scenario_without_a_pool_is_503(base_url, client, api_key):
    closed = openai.OpenAI(base_url=f"{base_url}/api/closed", api_key=api_key, max_retries=0)
    with pytest.raises(openai.APIStatusError) as caught:
        closed.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=4)
    assert caught.value.status_code == 503
    assert caught.value.body["message"] == "no inference provider configured for scenario closed"
    assert_still_serving(client)


def test_unknown_model_is_404(client):
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4o", messages=QUESTION, max_tokens=4)
    assert_still_serving(client)


def test_bench_run_and_report_against_the_real_app(base_url, api_key, tmp_path):
    """The harness end to end: real engines, busy clocks, a result file, a report with plots."""
    from serve_app.cli import main

    assert main([
        "bench", "run", "--url", base_url, "--dataset", "docs", "--num-prompts", "6", "--concurrency", "3",
        "--warmup", "1", "--slo", "chat:ttft_ms=10000,tpot_ms=1000", "--out", str(tmp_path),
        "--name", "real", "--no-progress", "--api-key", api_key,
    ]) == 0
    (point,) = json.loads((tmp_path / "real.json").read_text())["points"]
    summary = point["summary"]
    assert summary["succeeded"] == 6 and summary["completion_tokens"] > 6
    assert 0 < summary["ttft_ms"]["p50"] <= summary["ttft_ms"]["p99"] < summary["e2e_ms"]["p99"]
    assert summary["tpot_ms"]["p50"] > 0 and summary["itl_ms"]["count"] > 0
    # The short pool's engine was busy for part of the run, by its own clock.
    assert 0 < summary["pools"]["short"]["busy_fraction"] <= 1
    assert summary["provisioned_usd_per_1m_tokens"] > 0

    assert main(["bench", "report", str(tmp_path / "real.json"), "--out", str(tmp_path / "report")]) == 0
    for plot in ("latency-vs-throughput.png", "cost-vs-p99.png"):
        assert (tmp_path / "report" / plot).read_bytes().startswith(b"\x89PNG")
    assert "real concurrency 3" in (tmp_path / "report" / "report.md").read_text()


def test_the_first_tokens_time_has_a_name_for_every_hop(base_url, api_key, tmp_path):
    """Real engine: every request brings back every stamp, and with one stream in flight no
    token waits for a batch window."""
    from contract.request_timeline import HOPS
    from serve_app.cli import main

    assert main(["bench", "hops", "--url", base_url, "--concurrency", "1", "--num-prompts", "5",
                 "--max-tokens", "16", "--warmup", "1", "--out", str(tmp_path), "--name", "hops", "--no-progress",
                 "--api-key", api_key]) == 0
    (point,) = json.loads((tmp_path / "hops.json").read_text())["points"]
    assert point["summary"]["timed"] == 5
    for record in point["records"]:
        assert list(record["hops_ms"]) == [hop for hop, _, _ in HOPS]  # every stamp came back
        assert all(ms > -1.0 for ms in record["hops_ms"].values())  # one host, one clock
        assert max(record["hops_ms"], key=record["hops_ms"].get) == "engine"
    # Ray's own batcher holds every first token for its whole 50 ms window. The median, not
    # each request: on 2 cores the engine's own processes take most of both, and a replica
    # that waits a few tens of ms for a core now and then is not a batch window.
    assert statistics.median(r["hops_ms"]["stream batching"] for r in point["records"]) < 20.0
    assert point["summary"]["tokens_per_burst"] < 1.5


@pytest.mark.parametrize(("pool", "forked"), [("long", True), ("short", False)])
def test_each_engine_core_starts_as_its_pool_asks_and_runs_at_the_pools_nice_value(base_url, pool, forked):
    # conftest has the long pool's engine core forked from its replica's forkserver.
    # The pool's replica in this app: the one with an engine (the tiers before ran fake ones).
    (replica,) = [r for r in replica_processes("trilemma", f"pool-{pool}") if engine_cores_under(r)]
    (engine_core,) = engine_cores_under(replica)
    parent = engine_core.parent()
    assert is_forkserver(parent) is forked
    assert (parent.pid == replica.pid) is not forked
    # The long pool's cpu_niceness (19), which its replica took after the server had started.
    expected = 19 if pool == "long" else replica.nice()
    assert {p.nice() for p in [engine_core, *engine_core.children(recursive=True)]} == {expected}
