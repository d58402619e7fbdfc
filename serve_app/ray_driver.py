"""What every process that drives Ray (the app's launcher, the batch job, the benchmarks, the
tests) does to join or start a cluster: `init_ray`."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import psutil
import ray

# A replica killed outright (SIGKILL, the OOM killer) leaves its vLLM engine process behind,
# holding its memory and cores. With this set for the raylet, it adopts such orphans and kills
# them within 10 s (Linux). A cluster started by `ray start` needs it in that environment.
RAY_SUBREAPER_ENV = "RAY_kill_child_processes_on_worker_exit_with_raylet_subreaper"
# What a driver may adopt and never spawns itself: Ray's workers and vLLM's engines.
ADOPTED_PREFIXES = ("ray::", "VLLM::")
REAP_INTERVAL_S = 5.0
_reaper_started = threading.Event()


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
        _start_reaper()


def reap_adopted() -> list[int]:
    """Reaps the ended children this process adopted, and returns their pids.

    With RAY_SUBREAPER_ENV set, Ray makes the driver a subreaper too: the engine of a replica
    that died is handed to the driver. Ray counted on SIGCHLD being ignored to reap them; with
    SIGCHLD at its default (`init_ray`) they would stay zombies until the driver ends. Only
    Ray's workers and vLLM's engines are reaped: the driver never spawns those itself, so no
    exit status that its own code waits for is taken.
    """
    reaped = []
    for child in psutil.Process().children():
        try:
            if child.status() == psutil.STATUS_ZOMBIE and child.name().startswith(ADOPTED_PREFIXES):
                os.waitpid(child.pid, os.WNOHANG)
                reaped.append(child.pid)
        except (psutil.Error, ChildProcessError):
            continue
    return reaped


def _start_reaper() -> None:
    if _reaper_started.is_set():
        return
    _reaper_started.set()

    def reap_forever() -> None:
        while True:
            reap_adopted()
            time.sleep(REAP_INTERVAL_S)

    threading.Thread(target=reap_forever, name="reap-adopted", daemon=True).start()
