"""A process that drives Ray still learns how its children ended (serve_app/ray_driver.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from serve_app.ray_driver import RAY_SUBREAPER_ENV

pytestmark = pytest.mark.integration


def test_a_child_exit_status_survives_joining_ray(ray_cluster):
    # The test session is itself a driver of a Ray started with the subreaper on, as the app's is.
    assert os.environ.get(RAY_SUBREAPER_ENV) == "true"
    assert subprocess.run([sys.executable, "-c", "raise SystemExit(130)"]).returncode == 130


def test_a_driver_started_under_the_subreaper_learns_its_children_exit_status(ray_cluster):
    """What the batch job and the benchmarks do: join a running cluster from a process of their own."""
    import ray

    script = ("import subprocess, sys; from serve_app.ray_driver import init_ray; init_ray(); "
              "print(subprocess.run([sys.executable, '-c', 'raise SystemExit(3)']).returncode)")
    env = {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address}
    printed = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert printed.stdout.split()[-1:] == ["3"], printed.stderr[-2000:]


ADOPT_AND_REAP = """
import ctypes, os, time
from serve_app.ray_driver import reap_adopted

PR_SET_NAME, PR_SET_CHILD_SUBREAPER = 15, 36
libc = ctypes.CDLL(None)
libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # as Ray makes a driver
if os.fork() == 0:  # a replica
    if os.fork() == 0:  # its engine, which outlives it briefly
        libc.prctl(PR_SET_NAME, b"VLLM::EngineCore", 0, 0, 0)
        time.sleep(0.5)
        os._exit(0)
    os._exit(0)
os.wait()  # the replica ends; its engine is handed to this process
time.sleep(1.5)  # and ends too: a zombie of this process
print(len(reap_adopted()), len(reap_adopted()))
"""


def test_a_driver_reaps_the_engines_it_adopts():
    printed = subprocess.run([sys.executable, "-c", ADOPT_AND_REAP], capture_output=True, text=True, timeout=60)
    assert printed.stdout.split() == ["1", "0"], printed.stderr[-2000:]
