"""Ray's own autoscaler, on this machine, with the worker types `trilemma cluster plan` chose:
pool replicas asking for an accelerator type bring up nodes of the planned type, as many as
the plan counted at peak, and the nodes go after the idle timeout once the replicas are gone.

The scenario runs as `python -m bench.cluster_timeline` in a process of its own (it connects to
a fake cluster, not to this session's Ray), which stops its cluster when done or told to stop.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bench.cluster_timeline import make_plan, peak_config, planned_worker_types
from core.config import CONFIG_DIR, TrilemmaConfig

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PEAK = {"short": 2, "long": 2}
IDLE_TIMEOUT_MIN = 0.25
TIMEOUT_S = 420


@pytest.fixture(scope="module")
def timeline(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("timeline")
    command = [sys.executable, "-m", "bench.cluster_timeline", "--out", str(out),
               "--peak", ",".join(f"{pool}={n}" for pool, n in PEAK.items()), "--idle-timeout-min", str(IDLE_TIMEOUT_MIN)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = process.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        # SIGTERM lets the script stop the fake cluster it started; only then kill it.
        process.send_signal(signal.SIGTERM)
        try:
            output, _ = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
        pytest.fail(f"the timeline ran past {TIMEOUT_S} s:\n{output[-4000:]}")
    assert process.returncode == 0, output[-4000:]
    result = json.loads((out / "cluster-fake-autoscaler.json").read_text())
    assert (out / "cluster-fake-autoscaler.png").stat().st_size > 0
    return result


def test_the_fake_cluster_offers_what_cluster_plan_chose_for_the_same_needs(timeline):
    plan = make_plan(peak_config(TrilemmaConfig.from_yaml(CONFIG_DIR / "gpu-cluster.yaml"), PEAK))
    assert plan.max_workers() == {"ray.worker.l4.spot": 2, "ray.worker.a100-80g.on-demand": 1}
    assert timeline["plan"]["worker_types"] == planned_worker_types(plan)


def test_replicas_ask_ray_for_their_pools_accelerator_as_ray_serve_llm_does(timeline):
    assert timeline["replica_bundles"] == {
        "short": [{"GPU": 1, "CPU": 0, "accelerator_type:L4": 0.001}],
        "long": [{"GPU": 1, "CPU": 0, "accelerator_type:A100-80G": 0.001}],
    }


def test_demand_brings_up_nodes_of_the_planned_types_as_many_as_planned(timeline):
    samples = timeline["samples"]
    assert not any(samples[0]["nodes"].values())   # the head alone before any replica
    launched = {t for s in samples for t, n in {**s["nodes"], **s["pending"]}.items() if n}
    assert launched == set(timeline["plan"]["worker_types"])
    at_peak = [s for s in samples if s["running"] == PEAK]
    assert at_peak, "the peak's replicas never all ran"
    assert at_peak[-1]["nodes"] == {"ray.worker.l4.spot": 2, "ray.worker.a100-80g.on-demand": 1}
    # Never more nodes than the plan's max_workers.
    assert max(s["nodes"].get("ray.worker.l4.spot", 0) for s in samples) == 2
    assert max(s["nodes"].get("ray.worker.a100-80g.on-demand", 0) for s in samples) == 1


def test_nodes_go_after_the_idle_timeout_once_their_replicas_are_gone(timeline):
    idle_s = IDLE_TIMEOUT_MIN * 60
    for node_type, event in timeline["events"].items():
        # The autoscaler counts idleness from its own view, sampled every second or so.
        assert idle_s - 2 <= event["gone_after_replicas_s"] <= idle_s + 45, (node_type, event)
    assert not any(timeline["samples"][-1]["nodes"].values())
