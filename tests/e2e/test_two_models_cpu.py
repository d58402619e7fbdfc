"""End to end: two public models on real vLLM CPU engines, one per pool, in an app of their own;
the router counts each request in its model's tokens and sends it to the pool that serves it."""

from __future__ import annotations

import openai
import pytest

from core.config import TrilemmaConfig
from serve_app.launcher import deployed
from tests.support import config_for_tests

pytestmark = pytest.mark.e2e

CHAT_MODEL = "smol-chat"
DEFAULT = "SmolLM2-135M-Instruct"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def client(ray_cluster, embedded_model_dir, api_key):
    raw = config_for_tests().model_dump(mode="json")
    raw["app_name"] = "trilemma-models"
    # The same weights under a public name of their own: what matters here is which engine is asked.
    raw["pools"]["short"]["model"] = {"name": CHAT_MODEL, "source": str(embedded_model_dir)}
    raw["scenarios"]["chat"]["models"] = [CHAT_MODEL]
    with deployed(TrilemmaConfig.from_dict(raw), model_source=str(embedded_model_dir),
                  route_prefix="/models") as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key=api_key, max_retries=0, timeout=120)


def ask(client, model: str, scenario: str):
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=QUESTION, max_tokens=16, temperature=0, extra_headers={"X-Scenario": scenario})
    return raw.parse(), raw.headers


def test_models_lists_each_public_name(client):
    assert sorted(model.id for model in client.models.list().data) == sorted([CHAT_MODEL, DEFAULT])


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
