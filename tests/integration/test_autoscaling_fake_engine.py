"""Autoscaling on Ray Serve with a fake engine whose TTFT grows with the requests in flight:
a burst scales the short pool up and raises its engine concurrency, puts the cost profile in
force for batch requests, the Serve controller restarts, quiet scales the pool back down, and
each step is explained."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
import ray
from ray import serve

from autoscaling.control_board import RayControlBoard, concurrency_key, cost_profile_key
from core.upstream import serve_controller
from serve_app.autoscale_cli import format_decisions, read_decisions
from serve_app.launcher import deployed
from tests.fake_engine import FakeEngine
from tests.support import config_for_tests

pytestmark = pytest.mark.integration

APP = "trilemma-autoscale"
# From the burst's start to a second replica serving: the policy's decision (seconds) and a
# replica start, which on 2 cores under the burst took from about 10 to over 40 s.
REPLICA_START_BOUND_S = 120.0
MODEL = "SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def autoscaled(ray_cluster, embedded_model_dir):
    raw = config_for_tests().model_dump(mode="json")
    raw["app_name"] = APP
    raw["scenarios"]["chat"]["slo_ttft_ms"] = 300
    raw["autoscaling"] = {
        "enabled": True, "period_s": 1.0, "up_after_periods": 1, "down_after_periods": 3,
        "up_cooldown_s": 0, "down_cooldown_s": 5,
        # Any request costs more than this: the profile is in force while requests flow.
        "cost_profile": {"usd_per_request_above": 1e-9, "max_tokens_cap": 16},
        "pools": {"short": {"min_replicas": 1, "max_replicas": 2, "raise_concurrency": {
            "ttft_p99_ms_above": 300, "requests_per_s_above": 0, "step": 2, "max_in_engine": 20}}},
    }
    raw["pools"]["short"].update(resources={"CPU": 0.1}, env={
        "TRILEMMA_FAKE_TTFT_S": "0.05", "TRILEMMA_FAKE_TTFT_PER_REQUEST_S": "0.1",
    })
    raw["pools"]["long"].update(resources={"CPU": 0.1})
    config = type(config_for_tests()).from_dict(raw)
    with deployed(config, engine_cls=FakeEngine, model_source=str(embedded_model_dir),
                  route_prefix="/autoscale") as url:
        yield url, config


def _replicas() -> int:
    status = serve.status().applications[APP].deployments["pool-short"]
    return sum(count for state, count in status.replica_states.items() if str(state).endswith("RUNNING"))


async def _burst(url: str, in_flight: int, stop: asyncio.Event, max_s: float) -> int:
    """Requests back to back until `stop` (or `max_s`); returns how many failed."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True}
    failures = 0
    deadline = time.monotonic() + max_s
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        async def worker() -> None:
            nonlocal failures
            while not stop.is_set() and time.monotonic() < deadline:
                response = await client.post("/api/chat", json=body)
                failures += response.status_code != 200
        await asyncio.gather(*(worker() for _ in range(in_flight)))
    return failures


def _wait_for(replicas: int, timeout_s: float) -> float:
    started = time.monotonic()
    while _replicas() != replicas:
        assert time.monotonic() - started < timeout_s, f"pool-short has {_replicas()} replicas, not {replicas}"
        time.sleep(0.5)
    return time.monotonic() - started


def _wait_for_metrics(timeout_s: float) -> None:
    started = time.monotonic()
    while True:
        decisions = read_decisions(APP, ["short"])["short"]
        if decisions and not decisions[-1]["reason"].startswith("no metrics"):
            return
        assert time.monotonic() - started < timeout_s, decisions[-1:]
        time.sleep(0.5)


def _engine_limits(url: str) -> list[int]:
    pools = httpx.get(f"{url}/trilemma/pools", timeout=30).json()["pools"]
    return [replica["max_in_engine"] for replica in pools["short"]["replicas"]]


def _restart_controller() -> None:
    controller = serve_controller()
    ray.kill(controller, no_restart=False)
    deadline = time.monotonic() + 60
    while True:
        try:
            ray.get(serve_controller().check_alive.remote(), timeout=5)
            return
        except Exception:
            assert time.monotonic() < deadline, "the Serve controller did not come back"
            time.sleep(0.5)


async def test_a_burst_scales_up_quiet_scales_down_and_every_step_is_explained(autoscaled):
    url, config = autoscaled
    board = RayControlBoard()
    assert _replicas() == 1
    # A fresh replica's first stats reach the controller some seconds after it serves.
    await asyncio.to_thread(_wait_for_metrics, 60.0)
    # 8 in flight: TTFT about 0.05 + 7 x 0.1 s, well past 80% of the 300 ms SLO.
    # The burst lasts until the checks below are done: a new replica's start on 2 busy cores
    # (a Ray worker, then the replica's imports) took over 40 s once, and a burst that ends
    # before the replica serves lets the policy take it back down.
    stop_burst = asyncio.Event()
    burst = asyncio.create_task(_burst(url, 8, stop_burst, max_s=180.0))
    up_after = await asyncio.to_thread(_wait_for, 2, REPLICA_START_BOUND_S)
    # The same pressure raises each replica's engine concurrency, step by step.
    raised = board.get(concurrency_key(APP, "short"))
    assert raised["max_in_engine"] > config.pools["short"].max_in_engine, raised
    assert max(await asyncio.to_thread(_engine_limits, url)) > config.pools["short"].max_in_engine
    # Requests flow, each over its cost limit: a batch request gets the cost profile's cap.
    assert board.get(cost_profile_key(APP))["in_force"]
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        batch = await client.post("/api/batch", json={
            "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 100})
    assert batch.status_code == 200, batch.text
    assert "per request" in batch.headers["x-trilemma-cost-profile"]
    assert "max_tokens 100 capped to 16" in batch.headers["x-trilemma-adjustments"]
    stop_burst.set()
    assert await burst == 0  # no request failed while the pool grew

    # The controller restarts between the scale-up and the scale-down: the policy resumes.
    decided_before = len(read_decisions(APP, ["short"])["short"])
    await asyncio.to_thread(_restart_controller)
    down_after = await asyncio.to_thread(_wait_for, 1, 90.0)
    decisions = read_decisions(APP, ["short"])["short"]
    assert len(decisions) > decided_before  # the history went on from where it was
    text = format_decisions({"short": decisions}, last=len(decisions))
    assert any(d["direction"] == "up" and d["policy"] == "latency" for d in decisions), text
    assert any(d["direction"] == "down" and d["policy"] == "utilization" for d in decisions), text
    assert "TTFT p99" in text and "under the 20% floor" in text and "engine concurrency" in text
    # Quiet again: once the replicas' windows hold no request, the profile is lifted.
    deadline = time.monotonic() + 60
    while board.get(cost_profile_key(APP))["in_force"]:
        assert time.monotonic() < deadline, board.get(cost_profile_key(APP))
        await asyncio.sleep(1)
    print(f"scaled up {up_after:.1f} s into the burst, down {down_after:.1f} s after it\n{text}")
