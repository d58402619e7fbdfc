"""The endpoints plain `vllm serve` answers beside the OpenAI ones, on the real app (vLLM CPU
engines, the embedded model): health, version, metrics on the serving port, and tokenizer and
embedding calls answered through a pool as vLLM answers them."""

from __future__ import annotations

import time

import httpx
import pytest

pytestmark = pytest.mark.e2e

MODEL = "SmolLM2-135M-Instruct"
EXPORT_WAIT_S = 30  # Ray exports a process's metrics on its own period


def test_health_is_200_with_no_body_while_a_pool_serves(base_url):
    response = httpx.get(f"{base_url}/health", timeout=30)
    assert response.status_code == 200 and response.content == b""


def test_version_names_vllm_and_the_app(base_url):
    import vllm

    versions = httpx.get(f"{base_url}/version", timeout=30).json()
    assert versions["version"] == vllm.__version__ and versions["trilemma"]


def test_metrics_on_the_serving_port_hold_the_apps_and_the_engines(base_url, api_key):
    httpx.post(f"{base_url}/v1/completions", headers={"Authorization": f"Bearer {api_key}"}, timeout=120,
               json={"model": MODEL, "prompt": "Hello", "max_tokens": 2}).raise_for_status()
    deadline = time.monotonic() + EXPORT_WAIT_S
    while True:
        response = httpx.get(f"{base_url}/metrics", timeout=30)
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
        if "trilemma_requests_total" in response.text or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert "trilemma_requests_total" in response.text
    assert "vllm" in response.text  # the engines' own metrics, exported through Ray


def test_tokenize_and_detokenize_round_trip_with_and_without_a_model(base_url):
    for body in ({"prompt": "Hello, world!"}, {"model": MODEL, "prompt": "Hello, world!"}):
        tokens = httpx.post(f"{base_url}/tokenize", json=body, timeout=60).json()
        assert tokens["count"] == len(tokens["tokens"]) > 0 and tokens["max_model_len"] > 0
        text = httpx.post(f"{base_url}/detokenize", json={"tokens": tokens["tokens"]}, timeout=60).json()
        assert text["prompt"] == "Hello, world!"


def test_tokenize_takes_chat_messages_with_their_template(base_url):
    plain = httpx.post(f"{base_url}/tokenize", json={"prompt": "Hi"}, timeout=60).json()
    chat = httpx.post(f"{base_url}/tokenize", timeout=60,
                      json={"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": True}).json()
    assert chat["count"] > plain["count"]  # the chat template's own tokens


def test_tokenize_of_an_unknown_model_is_404(base_url):
    response = httpx.post(f"{base_url}/tokenize", json={"model": "no-such-model", "prompt": "Hi"}, timeout=60)
    assert response.status_code == 404 and "no-such-model" in response.json()["error"]["message"]


def test_embeddings_of_a_model_that_does_not_embed_are_refused_as_vllm_refuses_them(base_url, api_key):
    response = httpx.post(f"{base_url}/v1/embeddings", headers={"Authorization": f"Bearer {api_key}"}, timeout=60,
                          json={"model": MODEL, "input": "Hello"})
    assert response.status_code == 404, response.text  # plain vLLM has no embeddings path for it
    assert "does not embed" in response.json()["error"]["message"]
