"""The cost profile's moves to a cheaper pool, held to each scenario's `max_quality_loss`, on a
real Ray Serve app with fake engines: the long pool is the cheaper one, and the quality
measurement the config names says it loses 1.2 perplexity against the short pool."""

from __future__ import annotations

import json

import httpx
import pytest

from autoscaling.control_board import RayControlBoard, cost_profile_key
from core.config import TrilemmaConfig
from serve_app.launcher import deployed
from tests.fake_engine import FakeEngine
from tests.support import config_for_tests

pytestmark = pytest.mark.integration

APP = "trilemma-quality"
MODEL = "SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def quality_app(ray_cluster, embedded_model_dir, tmp_path_factory):
    measured = tmp_path_factory.mktemp("quality") / "quality-fake.json"
    measured.write_text(json.dumps({"pools": [
        {"pool": "short", "perplexity": 10.0, "task_score": 0.8},
        {"pool": "long", "perplexity": 11.2, "task_score": 0.8, "answer_tokens": [100, 300, 400],
         "answer_max_tokens": 512},
    ]}))
    raw = config_for_tests().model_dump(mode="json")
    raw["app_name"] = APP
    raw["quality"] = {"results": str(measured)}
    # Autoscaling on for the router to follow the cost profile; no pool is scaled, so nothing
    # but this test puts the profile in force.
    raw["autoscaling"] = {"enabled": True}
    raw["pools"]["short"].update(resources={"CPU": 0.1}, price_usd_per_hour=1.0)
    raw["pools"]["long"].update(resources={"CPU": 0.1}, price_usd_per_hour=0.25)
    # Two batch-class scenarios the profile applies to: one that gives up at most 0.5
    # perplexity, one that accepts 2.
    raw["scenarios"]["batch"]["max_quality_loss"] = {"perplexity": 0.5}
    raw["scenarios"]["bulk"] = {"priority": 3, "max_quality_loss": {"perplexity": 2.0}}
    config = TrilemmaConfig.from_dict(raw)
    with deployed(config, engine_cls=FakeEngine, model_source=str(embedded_model_dir),
                  route_prefix="/quality") as url:
        yield url


def ask(url: str, scenario: str, max_tokens: int = 4) -> httpx.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens}
    response = httpx.post(f"{url}/v1/chat/completions", json=body, headers={"X-Scenario": scenario}, timeout=60)
    assert response.status_code == 200, response.text
    return response


def test_the_cost_profile_moves_only_within_each_scenarios_quality_limit(quality_app):
    board = RayControlBoard()
    # Off: both scenarios' short requests go to the short pool, with no quality said.
    for scenario in ("batch", "bulk"):
        response = ask(quality_app, scenario)
        assert response.headers["x-trilemma-pool"] == "short"
        assert "quality" not in response.headers["x-trilemma-route-reason"]
    # As the autoscaler does when the pools cost too much.
    board.put(cost_profile_key(APP), {"in_force": True, "reason": "over the budget (test)"})
    try:
        moved = refused = None
        for _ in range(40):  # the router reads the board every 2 s
            moved, refused = ask(quality_app, "bulk"), ask(quality_app, "batch")
            if "x-trilemma-cost-profile" in moved.headers:
                break
        assert moved.headers["x-trilemma-cost-profile"] == "over the budget (test)"
        # Within its limit of 2: the cheaper pool, and what the move gives up.
        assert moved.headers["x-trilemma-pool"] == "long"
        assert "quality against pool short: perplexity +1.20, task +0.0 points" in \
            moved.headers["x-trilemma-route-reason"]
        # Beyond its limit of 0.5: the short pool, and why the cheaper one was refused.
        assert refused.headers["x-trilemma-pool"] == "short"
        assert "pool long refused: perplexity +1.20 over max_quality_loss.perplexity 0.5" in \
            refused.headers["x-trilemma-route-reason"]
        # The profile's token cap (256) binds a longer request: it says what the cap cuts there.
        capped = ask(quality_app, "bulk", max_tokens=1000)
        assert "max_tokens 1000 capped to 256" in capped.headers["x-trilemma-adjustments"]
        assert capped.headers["x-trilemma-cost-profile"] == (
            "over the budget (test); token cap 256: 2 of 3 measured answers of pool long run longer "
            "(median 300 tokens; quality-fake.json)")
    finally:
        board.put(cost_profile_key(APP), {"in_force": False, "reason": ""})
