"""LoRA adapters on a real Ray Serve app with fake engines: a pool of two replicas, each holding
one adapter at most. The replica that loaded an adapter gets its later requests (Serve's
multiplexing, ranked by router.replica_router), and the request that loaded it pays the load."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from core.config import TrilemmaConfig
from serve_app.launcher import deployed
from tests.fake_engine import FakeEngine
from tests.support import config_for_tests

pytestmark = pytest.mark.integration

ADAPTERS = Path(__file__).resolve().parents[1] / "data" / "adapters"
MODEL = "SmolLM2-135M-Instruct"
LOAD_S = 0.3
# How long a replica's new adapter takes to reach the routers (the replica reports it to Serve's
# controller, which tells the routers): the test waits this long after a load.
PROPAGATION_S = 3.0
TPOT_S = 0.05


@pytest.fixture(scope="module")
def url(ray_cluster, embedded_model_dir):
    raw = config_for_tests().model_dump(mode="json")
    raw["app_name"] = "trilemma-adapters"
    raw["pools"]["short"].update(replicas=2, resources={"CPU": 0.1}, lora={"max_loras": 1, "max_resident": 1},
                                 env={"TRILEMMA_FAKE_ADAPTER_LOAD_S": str(LOAD_S), "TRILEMMA_FAKE_TPOT_S": str(TPOT_S)})
    raw["pools"]["long"].update(resources={"CPU": 0.1})
    raw["adapters"] = {name: {"base": MODEL, "source": str(ADAPTERS / name)} for name in ("tagged", "jsonish")}
    with deployed(TrilemmaConfig.from_dict(raw), engine_cls=FakeEngine, model_source=str(embedded_model_dir),
                  route_prefix="/adapters") as url:
        yield url


def ask(url: str, model: str, max_tokens: int = 2) -> dict:
    response = httpx.post(f"{url}/v1/chat/completions", timeout=60, json={
        "model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens})
    assert response.status_code == 200, response.text
    return response.json()


def served_by(answer: dict) -> str:
    return answer["choices"][0]["message"]["content"].split()[0]


def test_the_replica_holding_an_adapter_gets_its_requests_and_the_loading_request_pays_the_load(url):
    # The adapter is loaded on the replica that is not Serve's first choice between idle replicas:
    # while a long base request holds that one, the least loaded is the other.
    with ThreadPoolExecutor(1) as pool:
        long = pool.submit(ask, url, MODEL, 80)  # 4 s at TPOT_S
        time.sleep(1.0)
        first = ask(url, "tagged")
        busy = served_by(long.result())
    # The fake engine's load sleeps LOAD_S; asyncio's timers may end a sleep a hair early.
    assert first["model"] == "tagged" and first["usage"]["adapter_load_s"] >= 0.9 * LOAD_S
    assert first["usage"]["engine_busy_s"] >= first["usage"]["adapter_load_s"]
    holder = served_by(first)
    assert holder.endswith(",adapter=tagged") and not holder.startswith(busy)
    time.sleep(PROPAGATION_S)
    # Both replicas idle now: without the preference these go where idle ties go, the other replica.
    later = [ask(url, "tagged") for _ in range(8)]
    assert {served_by(answer) for answer in later} == {holder}
    assert all("adapter_load_s" not in answer["usage"] for answer in later)
