"""End to end: a pool that embeds (vLLM's pooling runner, the embedded model converted to embed)
beside a generating one, in an app of its own; /v1/embeddings answers through it as plain
`vllm serve` with the same engine settings answers, and generation stays on the other pool."""

from __future__ import annotations

import math

import httpx
import pytest

from bench.parity.cli import started_plain_vllm_of_pool
from core.config import TrilemmaConfig
from serve_app.launcher import deployed
from tests.support import config_for_tests

pytestmark = pytest.mark.e2e

EMBED_MODEL = "smol-embed"
DEFAULT = "SmolLM2-135M-Instruct"
INPUTS = ["The capital of France is Paris.", "Two plus two is four."]


@pytest.fixture(scope="module")
def config(embedded_model_dir) -> TrilemmaConfig:
    raw = config_for_tests().model_dump(mode="json")
    raw["app_name"] = "trilemma-embed"
    # The same weights under a name of their own, run by vLLM's pooling runner (`--convert embed`).
    raw["pools"]["short"]["model"] = {"name": EMBED_MODEL, "source": str(embedded_model_dir)}
    raw["pools"]["short"]["engine_kwargs"] = {"runner": "pooling", "convert": "embed"}
    return TrilemmaConfig.from_dict(raw)


@pytest.fixture(scope="module")
def plain(config, tmp_path_factory):
    # Started before the app deploys, so the two starts overlap (each waits on I/O and Ray part of the time).
    with started_plain_vllm_of_pool(config, "short", tmp_path_factory.mktemp("plain-embed")) as plain:
        yield plain


@pytest.fixture(scope="module")
def app_url(ray_cluster, config, embedded_model_dir, plain):
    with deployed(config, model_source=str(embedded_model_dir), route_prefix="/embed") as url:
        yield url


@pytest.fixture(scope="module")
def plain_url(plain):
    return plain.ready()


def embed(url: str, api_key: str | None, **body) -> httpx.Response:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.post(f"{url}/v1/embeddings", json={"model": EMBED_MODEL, **body}, headers=headers, timeout=120)


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def test_embeddings_are_plain_vllms_for_one_input_and_a_list(app_url, plain_url, api_key):
    for given in (INPUTS[0], INPUTS):
        app, plain = embed(app_url, api_key, input=given), embed(plain_url, None, input=given)
        assert app.status_code == plain.status_code == 200, app.text
        app_data, plain_data = app.json()["data"], plain.json()["data"]
        assert len(app_data) == len(plain_data) == (1 if isinstance(given, str) else len(given))
        for ours, theirs in zip(app_data, plain_data):
            assert len(ours["embedding"]) == len(theirs["embedding"]) > 0
            # Two processes, the same weights and kernels: the same vector up to float rounding.
            assert cosine(ours["embedding"], theirs["embedding"]) > 0.9999
        assert app.json()["usage"]["prompt_tokens"] == plain.json()["usage"]["prompt_tokens"] > 0
    # Different texts are told apart: the vectors are the model's, not a constant.
    first, second = (item["embedding"] for item in embed(app_url, api_key, input=INPUTS).json()["data"])
    assert cosine(first, second) < 0.999


def test_an_input_over_the_pools_length_is_refused_as_vllm_refuses_it(app_url, plain_url, api_key, config):
    too_long = " ".join(["word"] * (config.pools["short"].max_model_len + 100))
    app, plain = embed(app_url, api_key, input=too_long), embed(plain_url, None, input=too_long)
    assert app.status_code == plain.status_code == 400, app.text
    assert app.json()["error"]["type"] == plain.json()["error"]["type"]


def test_models_lists_the_embedding_model_and_generation_is_the_generating_pools(app_url, api_key):
    headers = {"Authorization": f"Bearer {api_key}"}
    models = httpx.get(f"{app_url}/v1/models", headers=headers, timeout=30).json()
    assert sorted(card["id"] for card in models["data"]) == sorted([EMBED_MODEL, DEFAULT])
    chat = httpx.post(f"{app_url}/v1/chat/completions", headers=headers, timeout=120, json={
        "model": DEFAULT, "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 4})
    assert chat.status_code == 200 and chat.headers["x-trilemma-pool"] == "long"
    refused = httpx.post(f"{app_url}/v1/chat/completions", headers=headers, timeout=120, json={
        "model": EMBED_MODEL, "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 4})
    assert refused.status_code == 400 and "generate" in refused.json()["error"]["message"], refused.text


def test_the_generating_models_embeddings_are_refused_naming_why(app_url, api_key):
    response = httpx.post(f"{app_url}/v1/embeddings", headers={"Authorization": f"Bearer {api_key}"}, timeout=60,
                          json={"model": DEFAULT, "input": "Hello"})
    assert response.status_code == 404 and "does not embed" in response.json()["error"]["message"]
