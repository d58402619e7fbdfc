"""Draining instead of cutting: SIGTERM to the serving process (as `docker stop`, Kubernetes
and systemd send it) refuses new requests, finishes every stream in flight and exits 0; a
replica removed while it streams (scale-down, redeploy) finishes its streams first."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest
import ray

pytestmark = pytest.mark.integration

MODEL = "SmolLM2-135M-Instruct"
STREAMS = 4
TOKENS = 16
TPOT_S = 0.25  # each stream takes about 4 s: the signal lands while all are mid-way
READY_WITHIN_S = 180
# Streams of 16 x 1.75 s: past Serve's own 20 s grace, so only the pool's drain_timeout_s
# lets them finish.
SLOW_TPOT_S = 1.75


def _stream(url: str, events: list[str], first_chunk: threading.Event) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": TOKENS, "stream": True}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=120) as response:
        events.append(f"status {response.status_code}")
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(line.removeprefix("data: "))
                first_chunk.set()


@pytest.fixture
def serving_process(ray_cluster, embedded_model_dir):
    env = {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address}
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.serve_fake_app", "--app", "trilemma-drain", "--prefix", "/drain",
         "--tpot-s", str(TPOT_S)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )
    output: list[str] = []
    threading.Thread(target=lambda: output.extend(process.stdout), daemon=True).start()
    deadline = time.monotonic() + READY_WITHIN_S
    while not any(line.startswith("serving ") for line in output):
        assert process.poll() is None and time.monotonic() < deadline, "".join(output[-40:])
        time.sleep(0.5)
    url = next(line for line in output if line.startswith("serving ")).split()[1]
    yield process, url, output
    if process.poll() is None:
        process.kill()


def test_sigterm_finishes_streams_in_flight_refuses_new_ones_and_exits_0(serving_process):
    process, url, output = serving_process
    streams = [([], threading.Event()) for _ in range(STREAMS)]
    threads = [threading.Thread(target=_stream, args=(url, events, first)) for events, first in streams]
    for thread in threads:
        thread.start()
    for _, first in streams:
        assert first.wait(30), "a stream never started"

    process.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    refused = None
    while time.monotonic() - signalled < 10:
        answer = httpx.post(f"{url}/v1/chat/completions", timeout=10, json={
            "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        if answer.status_code != 200:
            refused = answer.status_code
            break
        time.sleep(0.2)
    for thread in threads:
        thread.join(60)

    assert refused is not None, "new requests were still served 10 s after SIGTERM"
    for events, _ in streams:
        assert events[0] == "status 200"
        assert events[-1] == "[DONE]", events[-3:]
        assert not any('"error"' in event for event in events), events
        assert sum('"content"' in event for event in events) >= TOKENS  # the whole answer
    assert process.wait(60) == 0, "".join(output[-40:])
    assert any(line.strip() == "stopped" for line in output)


def test_a_replica_removed_while_it_streams_finishes_its_streams(ray_cluster, embedded_model_dir):
    """What the autoscaler's scale-down and a redeploy do to a replica: Serve stops it, and it
    drains first."""
    from ray import serve

    from core.config import TrilemmaConfig
    from serve_app.launcher import deployed
    from tests.fake_engine import FakeEngine
    from tests.support import config_for_tests

    def config(short_replicas: int) -> TrilemmaConfig:
        raw = config_for_tests().model_dump(mode="json")
        raw["app_name"] = "trilemma-scale-down"
        for name, pool in raw["pools"].items():
            pool.update(resources={"CPU": 0.1}, drain_timeout_s=60,
                        env={"TRILEMMA_FAKE_TPOT_S": str(SLOW_TPOT_S)},
                        replicas=short_replicas if name == "short" else 1)
        return TrilemmaConfig.from_dict(raw)

    with deployed(config(2), engine_cls=FakeEngine, model_source=str(embedded_model_dir),
                  route_prefix="/scale-down") as url:
        streams = [([], threading.Event()) for _ in range(2 * STREAMS)]
        threads = [threading.Thread(target=_stream, args=(url, events, first)) for events, first in streams]
        for thread in threads:
            thread.start()
        for _, first in streams:
            assert first.wait(30), "a stream never started"
        served_by = {json.loads(events[1])["choices"][0]["delta"]["content"].split()[0] for events, _ in streams}
        assert len({stamp for stamp in served_by if "pool-short" in stamp}) == 2  # both replicas stream

        from serve_app.app import build_app
        serve.run(build_app(config(1), engine_cls=FakeEngine, model_source=str(embedded_model_dir)),
                  name="trilemma-scale-down", route_prefix="/scale-down")
        for thread in threads:
            thread.join(90)
        for events, _ in streams:
            assert events[-1] == "[DONE]", events[-3:]
            assert not any('"error"' in event for event in events), events
            assert sum('"content"' in event for event in events) >= TOKENS


def test_sigterm_while_the_app_starts_removes_what_was_deployed_and_exits_0(ray_cluster, embedded_model_dir):
    """A process stopped while its pools start (a rollout cancelled, `docker stop` at the wrong
    moment) leaves no app and no replica behind, and says so."""
    from ray import serve

    env = {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address}
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.serve_fake_app", "--app", "trilemma-cancelled", "--prefix", "/cancelled",
         "--start-s", "120"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )
    output: list[str] = []
    threading.Thread(target=lambda: output.extend(process.stdout), daemon=True).start()
    deadline = time.monotonic() + READY_WITHIN_S
    while "trilemma-cancelled" not in serve.status().applications:  # deploying: its engines take 120 s
        assert process.poll() is None and time.monotonic() < deadline, "".join(output[-40:])
        time.sleep(0.5)
    process.send_signal(signal.SIGTERM)
    assert process.wait(90) == 0, "".join(output[-40:])
    assert any(line.strip() == "stopped while starting" for line in output), "".join(output[-40:])
    assert "trilemma-cancelled" not in serve.status().applications
