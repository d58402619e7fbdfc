"""The batch job in engine mode (its own vLLM engines in Ray Data's actors) stopped by `ray job
stop` on a real Ray cluster: the job ends, and no engine of it is left holding its memory.

Ray ends a stopped job's actors; the engine core each actor started dies with it
(jobs/summarize/engine_lifetime.py), where before it lived on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.stops

RAY = str(Path(sys.executable).parent / "ray")
# A cluster of this test's own: Ray 2.60 turns token authentication on wherever a token file
# exists (~/.ray/auth_token), and its job CLI would then need that token too.
ENV = {**os.environ, "RAY_AUTH_MODE": "disabled"}
DASHBOARD = "http://127.0.0.1:8265"
ENGINE_UP_WITHIN_S = 600.0
SETTLE_S = 60.0


def engines() -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["name", "cmdline"]):
        try:
            if process.info["name"].startswith("VLLM::") or " ".join(process.info["cmdline"] or []).startswith("VLLM::"):
                found.append(process)
        except (psutil.Error, AttributeError):
            continue
    return found


@pytest.fixture
def ray_head():
    subprocess.run([RAY, "start", "--head", "--num-cpus", "4", "--include-dashboard", "true",
                    "--dashboard-port", "8265", "--disable-usage-stats"], check=True, capture_output=True, timeout=120,
                   env=ENV)
    yield
    subprocess.run([RAY, "stop", "--force"], capture_output=True, timeout=120, env=ENV)


def ray_job(*args: str, timeout_s: float = 120) -> str:
    command, *rest = args  # the address before `--` and the job's own command
    done = subprocess.run([RAY, "job", command, "--address", DASHBOARD, *rest], capture_output=True, text=True,
                          timeout=timeout_s, env=ENV)
    assert done.returncode == 0, f"ray job {' '.join(args)}: {done.stdout}{done.stderr}"
    return done.stdout + done.stderr


def test_ray_job_stop_leaves_no_engine_of_the_job(ray_head, tmp_path):
    assert not engines(), "vLLM engines already run on this machine"
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"doc-{i}", "text": f"Document {i} is about topic {i}. " * 40}) + "\n"
                              for i in range(40)))
    ray_job("submit", "--no-wait", "--submission-id", "summarize-stop", "--", sys.executable, "-m", "jobs.summarize",
            "--mode", "engine", "--input", str(corpus), "--output", str(tmp_path / "out.jsonl"),
            "--context-tokens", "512", "--max-tokens", "64", "--no-progress")
    deadline = time.monotonic() + ENGINE_UP_WITHIN_S
    while not engines():
        status = ray_job("status", "summarize-stop")
        assert "failed" not in status.lower() and "succeeded" not in status.lower(), \
            status + ray_job("logs", "summarize-stop")
        assert time.monotonic() < deadline, f"no engine within {ENGINE_UP_WITHIN_S:g} s\n" + ray_job("logs", "summarize-stop")
        time.sleep(2)
    time.sleep(5)  # the engine serving its first batch
    ray_job("stop", "summarize-stop", timeout_s=180)
    assert "was stopped" in ray_job("status", "summarize-stop")
    deadline = time.monotonic() + SETTLE_S
    while engines() and time.monotonic() < deadline:
        time.sleep(1)
    left = [f"{process.name()} ({process.pid})" for process in engines()]
    assert not left, f"engines left after `ray job stop`: {left}\n" + ray_job("logs", "summarize-stop")
