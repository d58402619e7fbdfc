"""Autoscaling on Ray Serve with a fake engine whose TTFT grows with the requests in flight:
a burst scales the short pool up, quiet scales it back down, and each step is explained."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from ray import serve

from deployments.fake_engine import FakeEngine
from serve_app.autoscale_cli import format_decisions, read_decisions
from serve_app.launcher import deployed
from tests.support import config_for_tests

pytestmark = pytest.mark.integration

APP = "trilemma-autoscale"
MODEL = "SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def autoscaled(ray_cluster, embedded_model_dir):
    raw = config_for_tests().model_dump(mode="json")
    raw["app_name"] = APP
    raw["scenarios"]["chat"]["slo_ttft_ms"] = 300
    raw["autoscaling"] = {
        "enabled": True, "period_s": 1.0, "up_after_periods": 1, "down_after_periods": 3,
        "up_cooldown_s": 0, "down_cooldown_s": 5, "pools": {"short": {"min_replicas": 1, "max_replicas": 2}},
    }
    raw["pools"]["short"].update(resources={"CPU": 0.1}, env={
        "TRILEMMA_FAKE_TTFT_S": "0.05", "TRILEMMA_FAKE_TTFT_PER_REQUEST_S": "0.1",
        # Replicas report their stats every second instead of every ten.
        "RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S": "1",
    })
    raw["pools"]["long"].update(resources={"CPU": 0.1})
    config = type(config_for_tests()).from_dict(raw)
    with deployed(config, engine_cls=FakeEngine, model_source=str(embedded_model_dir),
                  route_prefix="/autoscale") as url:
        yield url, config


def _replicas() -> int:
    status = serve.status().applications[APP].deployments["pool-short"]
    return sum(count for state, count in status.replica_states.items() if str(state).endswith("RUNNING"))


async def _burst(url: str, seconds: float, in_flight: int) -> int:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True}
    failures = 0
    deadline = time.monotonic() + seconds
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        async def worker() -> None:
            nonlocal failures
            while time.monotonic() < deadline:
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


async def test_a_burst_scales_up_quiet_scales_down_and_every_step_is_explained(autoscaled):
    url, config = autoscaled
    assert _replicas() == 1
    # 8 in flight: TTFT about 0.05 + 7 x 0.1 s, well past 80% of the 300 ms SLO.
    burst = asyncio.create_task(_burst(url, 40.0, 8))
    up_after = await asyncio.to_thread(_wait_for, 2, 40.0)
    assert await burst == 0  # no request failed while the pool grew
    down_after = await asyncio.to_thread(_wait_for, 1, 60.0)
    decisions = read_decisions(APP, ["short"])["short"]
    text = format_decisions({"short": decisions}, last=20)
    assert any(d["direction"] == "up" and d["policy"] == "latency" for d in decisions), text
    assert any(d["direction"] == "down" and d["policy"] == "utilization" for d in decisions), text
    assert "TTFT p99" in text and "under the 20% floor" in text
    print(f"scaled up {up_after:.1f} s into the burst, down {down_after:.1f} s after it\n{text}")
