"""What every process that drives Ray (the app's launcher, the batch job, the benchmarks, the
tests) does to join or start a cluster: `init_ray`."""

from __future__ import annotations

import signal
import threading
from typing import Any

import ray

# A replica killed outright (SIGKILL, the OOM killer) leaves its vLLM engine process behind,
# holding its memory and cores. With this set for the raylet, it adopts such orphans and kills
# them within 10 s (Linux). A cluster started by `ray start` needs it in that environment.
RAY_SUBREAPER_ENV = "RAY_kill_child_processes_on_worker_exit_with_raylet_subreaper"


def init_ray(**options: Any) -> None:
    """`ray.init(**options)`, then SIGCHLD back to its default.

    With RAY_SUBREAPER_ENV set (the local Ray sets it, and every child process inherits it),
    Ray's core worker ignores SIGCHLD in each process it starts in, drivers included, so that
    the kernel reaps their children. A process that ignores SIGCHLD cannot learn how its
    children ended: `subprocess` reports 0 for a child that exited 130 or 1, so a driver would
    take every failed command for a success. A driver waits for its own children.
    """
    ray.init(**options)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
