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
