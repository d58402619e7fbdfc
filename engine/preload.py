"""A pool replica's engine core, forked from a process that imported vLLM while the replica
started, as plain `vllm serve` forks its own from a process that has imported vLLM.

vLLM spawns its engine core from a Ray actor (forked children of Ray workers hung), and the
spawned process imports vLLM again before the engine starts: 16 s of an H200 start, after the
replica's own import (bench/results/gpu-h200/start-8b-replica-phases.txt). Python's forkserver
takes that import off the engine start's path without forking a Ray worker: a fresh process,
started as the replica begins to import vLLM, imports what plain vLLM's front process holds when
it forks, beside the replica's own import, and each engine core is forked from it. On 2 CPU
cores the two imports only share the cores (bench/results/start-cpu-fork-ab), so it is the
default where an engine has a GPU (pool/deployment.py); PRELOAD_ENV in a pool's env
chooses either way.

A replica whose forkserver did not start, or died, spawns its engine core as vLLM does. The
forkserver lives as long as the engine core: vLLM learns of the engine core's exit through it.
"""

from __future__ import annotations

import logging
import multiprocessing.context
import multiprocessing.forkserver
import os

import psutil

from engine.process_lifetime import die_with_parent

logger = logging.getLogger(__name__)

# "1" in a pool replica's environment starts the forkserver (pool/deployment.py sets it).
PRELOAD_ENV = "TRILEMMA_ENGINE_PRELOAD"
# What plain `vllm serve` has imported when it forks its engine core: the engine core and the
# executors it may run; nothing that initializes CUDA, which a fork must not inherit.
PRELOADED_MODULES = (
    "vllm.v1.engine.core",
    "vllm.v1.executor.uniproc_executor",
    "vllm.v1.executor.multiproc_executor",
)

_context: PreloadedContext | None = None
_server_pid: int | None = None


class EngineCoreProcess(multiprocessing.context.ForkServerProcess):
    """A process forked from the forkserver that runs as a child of the thread starting it would.

    It takes that thread's environment and nice value as they are at `start`: the server was
    started before vLLM set the environment its engine core's own children need, and before the
    replica raised its nice value for a CPU engine (`cpu_niceness`). It dies with the server, as
    Ray ends a replica's children with the replica: the server is the replica's child.
    """

    def start(self) -> None:
        self._parent_environ = dict(os.environ)
        self._parent_niceness = os.getpriority(os.PRIO_PROCESS, 0)  # this thread's, on Linux
        self._server_pid = _server_pid
        super().start()

    def run(self) -> None:
        die_with_parent(self._server_pid)
        _take_environment(self._parent_environ)
        if self._parent_niceness > os.getpriority(os.PRIO_PROCESS, 0):
            # Only ever raised: the server starts at the replica's value, before it is raised.
            os.setpriority(os.PRIO_PROCESS, 0, self._parent_niceness)
        super().run()


class PreloadedContext(multiprocessing.context.ForkServerContext):
    Process = EngineCoreProcess


def begin_if_pool_replica() -> None:
    """Starts the forkserver, in a pool replica's process only; before it imports vLLM itself.

    Never raises: a replica without it spawns its engine core as vLLM does.
    """
    global _context, _server_pid
    if _context is not None or os.environ.get(PRELOAD_ENV) != "1":
        return
    try:
        context = PreloadedContext()
        context.set_forkserver_preload(list(PRELOADED_MODULES))
        multiprocessing.forkserver.ensure_running()
        # The standard library keeps the server's pid to itself; it is read once, here.
        _server_pid = multiprocessing.forkserver._forkserver._forkserver_pid
        _context = context
    except Exception:  # noqa: BLE001 - the engine then starts as it would without this
        logger.exception("the engine core's forkserver did not start; the engine core will be spawned")


def preloaded_context() -> PreloadedContext | None:
    """The context to start an engine core from, or None to let vLLM spawn it: outside a pool
    replica, or when the server died (an import it preloads raised, say)."""
    if _context is None:
        return None
    try:
        alive = psutil.Process(_server_pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        alive = False
    if not alive:
        logger.warning("the engine core's forkserver (pid %s) has ended; the engine core will be spawned",
                       _server_pid)
        return None
    return _context


def _take_environment(environ: dict[str, str]) -> None:
    """Makes this process's environment `environ`, changing only the variables that differ:
    emptied and refilled, it would no longer follow the command line in memory, where
    setproctitle needs it to retitle the process (`VLLM::EngineCore`)."""
    for name in [name for name in os.environ if name not in environ]:
        del os.environ[name]
    for name, value in environ.items():
        if os.environ.get(name) != value:
            os.environ[name] = value
