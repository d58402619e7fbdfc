"""A start ends the engines and HAProxy an ended Ray left, touches nothing of a Ray that runs,
and names the process that holds its port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from serve_app.leftovers import PortInUse, check_port_free, end_leftovers, left_by_ended_rays

# Named as vLLM names its engines (the kernel's name: setproctitle would move the environment
# here, which vLLM's engine processes keep readable).
TITLED = ("import ctypes, sys, time; ctypes.CDLL(None).prctl(15, sys.argv[1].encode()); print(flush=True); "
          "time.sleep(60)")


def _ended_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


@pytest.fixture
def titled():
    """Starts sleeping processes titled as vLLM titles its engines, under a given raylet pid."""
    started = []

    def start(title: str, raylet_pid: int | None) -> subprocess.Popen:
        env = {k: v for k, v in os.environ.items() if k != "RAY_RAYLET_PID"}
        if raylet_pid is not None:
            env["RAY_RAYLET_PID"] = str(raylet_pid)
        process = subprocess.Popen([sys.executable, "-c", TITLED, title], env=env, stdout=subprocess.PIPE)
        process.stdout.readline()  # titled by now
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()
        process.wait()
        process.stdout.close()


def test_only_engines_of_an_ended_ray_are_leftovers_and_they_are_ended(titled):
    orphan = titled("VLLM::EngineCore", _ended_pid())
    running_rays = titled("VLLM::EngineCore", os.getpid())  # its raylet still runs
    someone_elses = titled("VLLM::EngineCore", None)          # a `vllm serve`, say
    not_an_engine = titled("python-worker", _ended_pid())
    found = {p.pid for p in left_by_ended_rays()}
    assert orphan.pid in found
    assert not found & {running_rays.pid, someone_elses.pid, not_an_engine.pid}
    assert f"VLLM::EngineCor ({orphan.pid})" in end_leftovers()  # the kernel keeps 15 characters
    assert orphan.wait(10) == -9
    assert running_rays.poll() is None and someone_elses.poll() is None


def test_a_held_port_is_refused_with_the_process_that_holds_it():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(PortInUse, match=rf"port {port} \(http.port\) is held by pid {os.getpid()} \("):
            check_port_free("127.0.0.1", port)
    check_port_free("127.0.0.1", port)  # free once closed
