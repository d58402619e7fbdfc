"""Models per pool on a real Ray Serve app with fake engines: /v1/models lists every public name,
a request's model picks the pools that serve it, and each scenario serves only its own models."""

from __future__ import annotations

import httpx
import pytest

from core.config import TrilemmaConfig
from serve_app.launcher import deployed
from tests.fake_engine import FakeEngine
from tests.support import config_for_tests

pytestmark = pytest.mark.integration

APP = "trilemma-models"
DEFAULT = "SmolLM2-135M-Instruct"
FAST = "smol-fast"


@pytest.fixture(scope="module")
def models_app(ray_cluster, embedded_model_dir):
    raw = config_for_tests().model_dump(mode="json")
    raw["app_name"] = APP
    # The short pool serves a model of its own; the long pool, the app's.
    raw["pools"]["short"].update(resources={"CPU": 0.1}, model={"name": FAST, "source": str(embedded_model_dir)})
    raw["pools"]["long"].update(resources={"CPU": 0.1})
    raw["scenarios"]["chat"]["models"] = [FAST]
    config = TrilemmaConfig.from_dict(raw)
    with deployed(config, engine_cls=FakeEngine, model_source=str(embedded_model_dir), route_prefix="/models") as url:
        yield url


def ask(url: str, scenario: str, model: str | None) -> httpx.Response:
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **({"model": model} if model else {})}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers={"X-Scenario": scenario}, timeout=60)


def test_every_public_name_is_listed_and_each_scenario_lists_its_own(models_app):
    listed = httpx.get(f"{models_app}/v1/models", timeout=30).json()
    assert sorted(card["id"] for card in listed["data"]) == sorted([DEFAULT, FAST])
    chat = httpx.get(f"{models_app}/api/chat/models", timeout=30).json()
    assert [card["id"] for card in chat["data"]] == [FAST]


@pytest.mark.parametrize("scenario, model, pool", [
    ("chat", None, "short"),       # chat's first model, on the pool that serves it
    ("chat", FAST, "short"),
    ("batch", None, "long"),       # the app's default: a short prompt still goes where its model is
    ("batch", FAST, "short"),
])
def test_a_requests_model_picks_the_pools_that_serve_it(models_app, scenario, model, pool):
    response = ask(models_app, scenario, model)
    assert response.status_code == 200, response.text
    assert response.headers["x-trilemma-pool"] == pool
    assert response.json()["model"] == (model or (FAST if scenario == "chat" else DEFAULT))


def test_a_model_the_scenario_does_not_serve_is_a_400_that_names_its_models(models_app):
    response = ask(models_app, "chat", DEFAULT)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "model_not_allowed" and error["param"] == "model"
    assert f"its models: ['{FAST}']" in error["message"]
    unknown = ask(models_app, "batch", "gpt-4")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
