"""A pool that sleeps when idle, through the whole app: after its idle period the engine
sleeps, the next request wakes it and is answered (the fake engine fails any request that
reaches it asleep), and the replica reports its state and the wake."""

from __future__ import annotations

import time

import httpx
import pytest

from core.config import TrilemmaConfig
from serve_app.launcher import deployed
from tests.fake_engine import FakeEngine
from tests.support import config_for_tests

pytestmark = pytest.mark.integration

MODEL = "SmolLM2-135M-Instruct"
IDLE_S = 2.0
WAKE_S = 0.6
TIMER_SLACK_S = 0.002


@pytest.fixture(scope="module")
def sleepy_url(ray_cluster, embedded_model_dir):
    raw = config_for_tests().model_dump(mode="json")
    raw["app_name"] = "trilemma-sleep"
    raw["pools"]["short"].update(
        resources={"CPU": 0.1}, sleep_when_idle={"after_s": IDLE_S},
        env={"TRILEMMA_FAKE_WAKE_S": str(WAKE_S)},
    )
    raw["pools"]["long"]["resources"] = {"CPU": 0.1}
    with deployed(TrilemmaConfig.from_dict(raw), engine_cls=FakeEngine, model_source=str(embedded_model_dir),
                  route_prefix="/sleep") as url:
        yield url


def short_replica(client: httpx.Client) -> dict:
    (replica,) = client.get("/trilemma/pools").json()["pools"]["short"]["replicas"]
    return replica


def ask(client: httpx.Client) -> tuple[int, float]:
    started = time.monotonic()
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    response = client.post("/v1/chat/completions", json=body)
    return response.status_code, time.monotonic() - started


def test_an_idle_engine_sleeps_and_the_next_request_wakes_it(sleepy_url):
    with httpx.Client(base_url=sleepy_url, timeout=60) as client:
        status, _ = ask(client)
        assert status == 200
        deadline = time.monotonic() + IDLE_S + 10
        while not short_replica(client)["asleep"]:
            assert time.monotonic() < deadline, f"not asleep {IDLE_S + 10:.0f} s after the last request"
            time.sleep(0.5)
        assert not short_replica(client)["falling_asleep"] and short_replica(client)["last_sleep_s"] >= 0
        status, seconds = ask(client)
        assert status == 200
        assert seconds >= WAKE_S  # the request waited for the wake, not for a cold start
        replica = short_replica(client)
        # The fake's wake is an asyncio sleep of WAKE_S on the replica's loop, which Ray makes a
        # uvloop: its timers count whole milliseconds and may fire up to one early (0.59992 s seen).
        assert not replica["asleep"] and replica["last_wake_s"] >= WAKE_S - TIMER_SLACK_S
        # Awake again, the next request pays no wake.
        status, seconds = ask(client)
        assert status == 200 and seconds < WAKE_S


def test_requests_that_find_the_engine_asleep_together_are_all_answered(sleepy_url):
    import concurrent.futures

    with httpx.Client(base_url=sleepy_url, timeout=60) as client:
        deadline = time.monotonic() + IDLE_S + 10
        while not short_replica(client)["asleep"]:
            assert time.monotonic() < deadline
            time.sleep(0.5)
        with concurrent.futures.ThreadPoolExecutor(4) as workers:
            answers = list(workers.map(lambda _: ask(client), range(4)))
        assert [status for status, _ in answers] == [200] * 4
