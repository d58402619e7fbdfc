"""What every process that drives Ray (the app's launcher, the batch job, the benchmarks, the
tests) does to join or start a cluster: `init_ray`."""

from __future__ import annotations

import os
import signal
import socket
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
GCS_PROBE_TIMEOUT_S = 2.0
_reaper_started = threading.Event()


def init_ray(**options: Any) -> None:
    """`ray.init(**options)`, then SIGCHLD back to its default, and SIGTERM stops the driver as
    Ctrl-C does.

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
        interrupt_on_sigterm()


def interrupt_on_sigterm() -> None:
    """SIGTERM (`kill`, `docker stop`, `ray job stop`) raises KeyboardInterrupt in the main
    thread, so a driver's finally blocks end what it started (its app, its Ray) and a job
    records what finished. Ray's own handler, which every ray.init() puts in, aborts the process
    with nothing cleaned up. Call it again after anything that calls ray.init() itself."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, interrupt)


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


def local_cluster_ended() -> bool:
    """Whether the Ray this process started has lost its raylet or its GCS: `ray stop`, or a
    signal to the whole process group that Ray's daemons got too. Nothing of the app can be
    reached then, and a drain would wait for a GCS that is gone. Always False for a cluster this
    process joined: its daemons are not this process's to watch.

    A GCS given SIGTERM stops listening at once but its process can linger in its own shutdown
    (Ray 2.58, 30 s and more on a 2-core machine), so a refused connection counts as its end;
    a slow answer does not, since a busy GCS is still there.
    """
    from ray._private import ray_constants, worker

    node = getattr(worker, "_global_node", None)
    if node is None or not node.head:
        return False
    daemons = [info.process for kind in (ray_constants.PROCESS_TYPE_GCS_SERVER, ray_constants.PROCESS_TYPE_RAYLET)
               for info in node.all_processes.get(kind, [])]
    if any(daemon.poll() is not None for daemon in daemons):
        return True
    host, port = node.gcs_address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=GCS_PROBE_TIMEOUT_S).close()
    except ConnectionRefusedError:
        return True
    except OSError:  # slow or unreachable for a moment: not proof of its end
        return False
    return False
