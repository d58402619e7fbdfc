"""End to end: two public models on real vLLM CPU engines, one per pool, in an app of their own,
and the committed LoRA adapters of one of them, served by its pool.

The router counts each request in its model's tokens and sends it to the pool that serves it.
Each adapter's answers are in its trained format and the base's are not, and stay the same after
the adapters ran (bench.adapter_answers checks the same on the engine alone); a tenant's default
adapter applies; unknown, over-rank and broken adapters are refused with the reason while the
replica goes on serving; a third adapter evicts the least recently used one, which loads again
(and its request pays the load); requests of the base and of both adapters in flight at once, in
one engine batch, each get exactly their own model's answer, also while a third adapter evicts one
that the next batch loads again; the metrics carry the adapter label; the batch job runs with one."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from bench.adapter_answers import HELD_OUT
from bench.adapter_training_data import TAG, in_style, qa_pairs, split_held_out, style_of_answer
from core.config import TrilemmaConfig
from jobs.summarize.cli import main as summarize
from jobs.summarize.sample_corpus import write_sample
from router.tenants import add_tenant
from serve_app.launcher import deployed
from tests.support import config_for_tests

pytestmark = pytest.mark.e2e

# As bench.adapter_answers asks them: greedy, and long enough for a whole JSON answer.
ANSWER_TOKENS = 24
METRICS_WAIT_S = 60
# Questions the adapters never saw in training (bench.make_adapters' seed 0).
HELD_OUT_QUESTIONS = [question for question, _ in split_held_out(qa_pairs(0), HELD_OUT, 0)[1]]
QUESTIONS = HELD_OUT_QUESTIONS[:3]
# A mixed round: each of these asked of the base and both adapters at once, 12 requests in flight
# against the short pool's max_num_seqs of 8, so that the engine's batches hold all three models.
MIXED_QUESTIONS = HELD_OUT_QUESTIONS[3:7]
CHAT_MODEL = "smol-chat"
DEFAULT = "SmolLM2-135M-Instruct"
ADAPTERS = Path(__file__).resolve().parents[1] / "data" / "adapters"
# Held at most two at once by the short pool's replica: a third adapter evicts the least recently used.
MAX_RESIDENT = 2


@pytest.fixture(scope="module")
def models_app(ray_cluster, embedded_model_dir, tmp_path_factory):
    """(URL, API keys by tenant) of an app of two public models: the short pool serves CHAT_MODEL,
    the committed adapters of it (tagged, jsonish, tagged-again: tagged's files under another
    name, and the broken fixtures) and the chat scenario; the long pool the app's default model.
    Tenant `adapted` gets the tagged adapter by default."""
    tenants = tmp_path_factory.mktemp("models-tenants") / "tenants.yaml"
    keys = {"plain": add_tenant(tenants, "plain", None), "adapted": add_tenant(tenants, "adapted", None, "tagged")}
    raw = config_for_tests().model_dump(mode="json")
    raw["app_name"] = "trilemma-models"
    raw["tenants"]["keys_file"] = str(tenants)
    # The same weights under a public name of their own: what matters here is which engine is asked.
    raw["pools"]["short"]["model"] = {"name": CHAT_MODEL, "source": str(embedded_model_dir)}
    raw["pools"]["short"]["lora"] = {"max_loras": 2, "max_lora_rank": 16, "max_resident": MAX_RESIDENT}
    # Half a CPU each to Ray (their cores are bound by env): the tier's shared app holds two of its
    # four, and the batch job's stages need room beside the two apps.
    for pool in raw["pools"].values():
        pool["resources"] = {"CPU": 0.5}
    raw["scenarios"]["chat"]["models"] = [CHAT_MODEL]
    folders = {"tagged": "tagged", "jsonish": "jsonish", "tagged-again": "tagged", "rank-64": "bad/rank-64",
               "truncated": "bad/truncated", "wrong-base-smaller": "bad/wrong-base-smaller"}
    raw["adapters"] = {name: {"base": CHAT_MODEL, "source": str(ADAPTERS / folder)} for name, folder in folders.items()}
    with deployed(TrilemmaConfig.from_dict(raw), model_source=str(embedded_model_dir),
                  route_prefix="/models") as url:
        yield url, keys


def client_of(models_app, tenant: str = "plain") -> openai.OpenAI:
    url, keys = models_app
    return openai.OpenAI(base_url=f"{url}/v1", api_key=keys[tenant], max_retries=0, timeout=180)


def answer(client: openai.OpenAI, question: str, model: str):
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": question}], max_tokens=ANSWER_TOKENS, temperature=0,
        extra_headers={"X-Scenario": "chat"})
    return raw.parse(), raw.headers


def refusal(models_app, model: str) -> httpx.Response:
    url, keys = models_app
    return httpx.post(f"{url}/v1/chat/completions", timeout=180, headers={"Authorization": f"Bearer {keys['plain']}"},
                      json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})


def test_models_lists_each_adapter_with_its_base(models_app):
    cards = {card.id: card for card in client_of(models_app).models.list().data}
    for name in ("tagged", "jsonish", "tagged-again"):
        assert cards[name].model_extra["metadata"]["parent"] == CHAT_MODEL
    assert "parent" not in cards[CHAT_MODEL].model_extra["metadata"]


def model_style(model: str) -> str | None:
    return None if model == CHAT_MODEL else "tagged" if model.startswith("tagged") else "jsonish"


@pytest.fixture(scope="module")
def alone(models_app) -> dict[tuple[str, str], str]:
    """Each mixed question's greedy answer from the base and from each adapter, one request at a time."""
    client = client_of(models_app)
    return {(question, model): answer(client, question, model)[0].choices[0].message.content
            for question in MIXED_QUESTIONS for model in (CHAT_MODEL, "tagged", "jsonish")}


def answered_together(client: openai.OpenAI, models: tuple[str, ...]) -> dict[tuple[str, str], Any]:
    """The mixed questions of each model all in flight at once, the models interleaved, so that the
    engine batches requests of different models together: each one's reply."""
    asked = [(question, model) for question in MIXED_QUESTIONS for model in models]
    with ThreadPoolExecutor(len(asked)) as pool:
        return dict(zip(asked, pool.map(lambda pair: answer(client, *pair)[0], asked)))


def wrong_answers(alone: dict[tuple[str, str], str], together: dict[tuple[str, str], Any]) -> list[str]:
    """Each answer in a mixed batch that is not the same request's answer alone, or not in its
    model's format, with what it was."""
    texts = {pair: reply.choices[0].message.content for pair, reply in together.items()}
    return [f"{model} on {question!r}: {text!r}, alone {alone[question, model]!r}, "
            f"in the style of {style_of_answer(text)}"
            for (question, model), text in texts.items()
            if text != alone[question, model] or style_of_answer(text) != model_style(model)]


def test_each_adapter_answers_in_its_format_and_the_base_in_neither_unchanged(models_app, alone):
    """One request at a time (the `alone` answers: each question of the base, then of each adapter)."""
    for (question, model), text in alone.items():
        assert style_of_answer(text) == model_style(model), (question, model, text)
    client = client_of(models_app)
    question = MIXED_QUESTIONS[0]
    for name in ("tagged", "jsonish"):
        reply, headers = answer(client, question, name)
        assert reply.model == name and reply.choices[0].message.content == alone[question, name]
        assert headers["x-trilemma-pool"] == "short"
        assert f"adapter '{name}'" in headers["x-trilemma-route-reason"]
    after, _ = answer(client, question, CHAT_MODEL)  # greedy: the adapters left the base as it was
    assert after.choices[0].message.content == alone[question, CHAT_MODEL]


def test_requests_of_the_base_and_of_adapters_in_one_batch_each_get_their_own_model(models_app, alone):
    """The base and both adapters in flight at once, each question of each, in rounds between which
    tagged-again (tagged's files under its own name) evicts the least recently used adapter, which
    the next round loads again. A request without an adapter that shares the engine's batch with
    adapter requests must get the base model, as vLLM's GPU kernels give it: on the CPU, vLLM's ops
    gave it the adapter in the engine's last slot (engine/vllm_lora_isolation.py). Both adapters
    are resident from the start (the `alone` answers loaded them), so the last slot holds one."""
    client = client_of(models_app)
    for round_number in range(2):
        together = answered_together(client, (CHAT_MODEL, "tagged", "jsonish"))
        wrong = wrong_answers(alone, together)
        assert not wrong, f"round {round_number}:\n" + "\n".join(wrong)
        if round_number > 0:  # an adapter evicted by the last round's tagged-again loaded again
            assert any("adapter_load_s" in reply.usage.model_extra for reply in together.values())
        evicting, _ = answer(client, MIXED_QUESTIONS[0], "tagged-again")
        assert in_style("tagged", evicting.choices[0].message.content)


def test_a_streamed_answer_has_the_adapter_applied_too(models_app):
    stream = client_of(models_app).chat.completions.create(
        model="tagged", messages=[{"role": "user", "content": QUESTIONS[0]}],
        max_tokens=ANSWER_TOKENS, temperature=0, stream=True, extra_headers={"X-Scenario": "chat"})
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text.startswith(TAG), text


def test_a_tenants_default_adapter_applies_to_requests_that_name_no_model(models_app):
    url, keys = models_app
    question = QUESTIONS[1]
    # OpenAI's client always names a model; plain HTTP may leave it out.
    defaulted = httpx.post(f"{url}/v1/chat/completions", timeout=180, headers={
        "Authorization": f"Bearer {keys['adapted']}", "X-Scenario": "chat"}, json={
        "messages": [{"role": "user", "content": question}], "max_tokens": ANSWER_TOKENS, "temperature": 0})
    assert defaulted.status_code == 200, defaulted.text
    reply = defaulted.json()
    assert reply["model"] == "tagged" and in_style("tagged", reply["choices"][0]["message"]["content"])
    named, _ = answer(client_of(models_app, "adapted"), question, CHAT_MODEL)  # a model it names wins over its default
    assert named.model == CHAT_MODEL and not in_style("tagged", named.choices[0].message.content)


def test_an_unknown_adapter_is_a_404_that_names_the_adapters(models_app):
    response = refusal(models_app, "tagged-v2")
    assert response.status_code == 404, response.text
    error = response.json()["error"]
    assert error["code"] == "model_not_found" and "'tagged'" in error["message"] and "'jsonish'" in error["message"]


@pytest.mark.parametrize("adapter, status, code, reason", [
    ("rank-64", 400, "adapter_rank_too_high", "rank 64 is over the pool's lora.max_lora_rank 16"),
    ("truncated", 422, "adapter_unusable", "not a safetensors file"),
    ("wrong-base-smaller", 422, "adapter_unusable", "the adapter was made for another base model"),
])
def test_a_broken_adapter_is_refused_with_its_reason_and_the_replica_serves_on(models_app, adapter, status, code,
                                                                               reason):
    client = client_of(models_app)
    for name in ("tagged", "jsonish"):  # both resident: as many as the replica holds
        answer(client, QUESTIONS[0], name)
    response = refusal(models_app, adapter)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and reason in error["message"] and "'short'" in error["message"], error
    # Refused before it took a place: neither resident adapter was evicted for it.
    for name in ("tagged", "jsonish"):
        reply, _ = answer(client, QUESTIONS[0], name)
        assert in_style(name, reply.choices[0].message.content)
        assert "adapter_load_s" not in reply.usage.model_extra, (name, reply.usage)


def test_a_third_adapter_evicts_the_least_recently_used_which_loads_again_on_its_next_request(models_app):
    client = client_of(models_app)
    question = QUESTIONS[2]
    for name in ("tagged", "jsonish", "tagged-again"):  # two resident at most: tagged-again evicts tagged
        reply, _ = answer(client, question, name)
        assert in_style("tagged" if name.startswith("tagged") else "jsonish", reply.choices[0].message.content)
    reloaded, headers = answer(client, question, "tagged")
    assert in_style("tagged", reloaded.choices[0].message.content)
    usage = reloaded.usage.model_extra
    # The request that loaded it pays the load: its seconds are in its busy time and cost.
    assert 0 < usage["adapter_load_s"] <= usage["engine_busy_s"], usage
    assert float(headers["x-trilemma-cost-usd"]) > 0
    again, _ = answer(client, question, "tagged")
    assert "adapter_load_s" not in again.usage.model_extra  # resident now: nothing to load


def test_the_metrics_carry_the_adapter_label(models_app):
    url, _ = models_app
    deadline, text = time.monotonic() + METRICS_WAIT_S, ""
    while time.monotonic() < deadline:
        text = httpx.get(f"{url}/metrics", timeout=30).text
        if 'adapter="tagged"' in text and 'adapter="base"' in text:
            break
        time.sleep(2)
    tokens = [line for line in text.splitlines() if "trilemma_tokens_total{" in line]
    assert any('adapter="tagged"' in line and 'tenant="plain"' in line for line in tokens), tokens[:20]
    assert any('adapter="base"' in line for line in tokens), tokens[:20]
    # Refusals are counted under the adapter's configured name: a bounded label.
    requests = [line for line in text.splitlines() if "trilemma_requests_total{" in line]
    assert any('adapter="rank-64"' in line and 'status="400"' in line for line in requests), requests[:20]


def test_the_batch_job_summarizes_with_an_adapter(models_app, tmp_path, capsys):
    url, keys = models_app
    corpus = write_sample(tmp_path / "corpus.jsonl", count=2, long_count=0)
    out = tmp_path / "summaries.jsonl"
    rc = summarize(["--input", str(corpus), "--output", str(out), "--url", url, "--api-key", keys["plain"],
                    "--adapter", "tagged", "--max-tokens", "24", "--no-progress"])
    assert rc == 0, capsys.readouterr().out
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2 and all(row["status"] == "done" and row["pool"] == "short" for row in rows)
    assert all(row["summary"].startswith(TAG) for row in rows), [row["summary"] for row in rows]


# Two public models: which pool each goes to.

def ask(client: openai.OpenAI, model: str, scenario: str):
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": "What is the capital of France?"}], max_tokens=16,
        temperature=0, extra_headers={"X-Scenario": scenario})
    return raw.parse(), raw.headers


def test_models_lists_each_public_name_before_the_adapters(models_app):
    models = [model.id for model in client_of(models_app).models.list().data]
    assert sorted(models[:2]) == sorted([CHAT_MODEL, DEFAULT]) and set(models[2:]) >= {"tagged", "jsonish"}


@pytest.mark.parametrize("model, scenario, pool", [(CHAT_MODEL, "chat", "short"), (DEFAULT, "batch", "long")])
def test_each_model_answers_from_its_own_pool(models_app, model, scenario, pool):
    reply, headers = ask(client_of(models_app), model, scenario)
    assert reply.model == model and "Paris" in reply.choices[0].message.content
    # A short prompt for the default model goes to the long pool: the only one that serves it.
    assert headers["x-trilemma-pool"] == pool
    assert reply.usage.prompt_tokens == int(headers["x-trilemma-prompt-tokens"])


def test_a_model_outside_the_scenarios_is_refused(models_app):
    with pytest.raises(openai.BadRequestError) as caught:
        ask(client_of(models_app), DEFAULT, "chat")
    assert caught.value.body["code"] == "model_not_allowed"
