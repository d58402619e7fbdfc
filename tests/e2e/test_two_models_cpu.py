"""End to end: two public models on real vLLM CPU engines, one per pool, in an app of their own;
the router counts each request in its model's tokens and sends it to the pool that serves it."""

from __future__ import annotations

import openai
import pytest

from tests.e2e.conftest import CHAT_MODEL

pytestmark = pytest.mark.e2e

DEFAULT = "SmolLM2-135M-Instruct"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def client(models_app):
    url, keys = models_app
    return openai.OpenAI(base_url=f"{url}/v1", api_key=keys["plain"], max_retries=0, timeout=120)


def ask(client, model: str, scenario: str):
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=QUESTION, max_tokens=16, temperature=0, extra_headers={"X-Scenario": scenario})
    return raw.parse(), raw.headers


def test_models_lists_each_public_name(client):
    models = [model.id for model in client.models.list().data]
    assert sorted(name for name in models if name in (CHAT_MODEL, DEFAULT)) == sorted([CHAT_MODEL, DEFAULT])


@pytest.mark.parametrize("model, scenario, pool", [(CHAT_MODEL, "chat", "short"), (DEFAULT, "batch", "long")])
def test_each_model_answers_from_its_own_pool(client, model, scenario, pool):
    reply, headers = ask(client, model, scenario)
    assert reply.model == model and "Paris" in reply.choices[0].message.content
    # A short prompt for the default model goes to the long pool: the only one that serves it.
    assert headers["x-trilemma-pool"] == pool
    assert reply.usage.prompt_tokens == int(headers["x-trilemma-prompt-tokens"])


def test_a_model_outside_the_scenarios_is_refused(client):
    with pytest.raises(openai.BadRequestError) as caught:
        ask(client, DEFAULT, "chat")
    assert caught.value.body["code"] == "model_not_allowed"
