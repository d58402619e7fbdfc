"""The job's Ray: join the cluster or start one (SIGTERM, as `ray job stop` sends it, then stops
the job as Ctrl-C does: serve_app.ray_driver), keep Ray Data quiet beside the progress bar, and
shut down what the job started."""

from __future__ import annotations

import logging
import os

import ray

from serve_app.ray_driver import init_ray

# A job that starts its own Ray on a small machine advertises at least this many CPUs, as the
# app does (core.config.LocalRayConfig): stages reserve fractions, engines whole CPUs.
LOCAL_RAY_MIN_CPUS = 4


def ensure_ray() -> bool:
    """Joins the cluster `ray job submit` (or RAY_ADDRESS) names, else starts a local one;
    True when it started one, for the caller to shut down (`release_ray`)."""
    quiet_ray_data()
    if ray.is_initialized():
        return False
    if os.environ.get("RAY_ADDRESS"):
        init_ray(log_to_driver=False)
    else:
        init_ray(num_cpus=max(LOCAL_RAY_MIN_CPUS, os.cpu_count() or 1), include_dashboard=False,
                 log_to_driver=False)
    return not os.environ.get("RAY_ADDRESS")


def quiet_ray_data() -> None:
    """The job draws its own progress bar; Ray Data's bars and per-run logs would garble it."""
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.print_on_execution_start = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)


def release_ray(started: bool) -> None:
    """Shuts down a Ray the job started, with the vLLM engine processes it leaves behind (they
    outlive the actors Ray stops: serve_app.launcher reaps them)."""
    if started:
        from serve_app.launcher import shutdown_local_ray

        shutdown_local_ray()
