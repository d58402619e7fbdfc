"""A pool replica's engine core, forked from a process that imported vLLM while the replica
started, as plain `vllm serve` forks its own from a process that has imported vLLM.

vLLM spawns its engine core from a Ray actor (forked children of Ray workers hung), and the
spawned process imports vLLM again before the engine starts: 16 s of an H200 start, after the
replica's own import (bench/results/gpu-h200/start-8b-replica-phases.txt). Python's forkserver
removes that wait without forking a Ray worker: a fresh process, started as the replica begins
to import vLLM, imports what plain vLLM's front process holds when it forks (both imports run
at once), and each engine core is forked from it.

A replica whose forkserver did not start spawns its engine core as before.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing.context
import multiprocessing.forkserver
import os
from typing import Callable, Iterator

logger = logging.getLogger(__name__)

# Set in a pool's runtime environment when its replicas run vLLM engines (pool_deployment).
PRELOAD_ENV = "TRILEMMA_ENGINE_PRELOAD"
# What plain `vllm serve` has imported when it forks its engine core: the engine core and the
# executors it may run; nothing that initializes CUDA, which a fork must not inherit.
PRELOADED_MODULES = (
    "vllm.v1.engine.core",
    "vllm.v1.executor.uniproc_executor",
    "vllm.v1.executor.multiproc_executor",
)

_context: multiprocessing.context.BaseContext | None = None


class EngineCoreProcess(multiprocessing.context.ForkServerProcess):
    """A process forked from the forkserver, with the environment its parent has when it
    starts it: the server was started before Ray and vLLM set the replica's (the GPUs it holds,
    the start method vLLM chose for the engine's own children), and a spawned process would
    have the parent's."""

    def start(self) -> None:
        self._parent_environ = dict(os.environ)
        super().start()

    def run(self) -> None:
        os.environ.clear()
        os.environ.update(self._parent_environ)
        super().run()


class PreloadedContext(multiprocessing.context.ForkServerContext):
    Process = EngineCoreProcess


def begin_if_pool_replica() -> None:
    """Starts the forkserver, in a pool replica's process only; before it imports vLLM itself.

    Never raises: a replica without it spawns its engine core as vLLM does.
    """
    global _context
    if _context is not None or os.environ.get(PRELOAD_ENV) != "1":
        return
    try:
        context = PreloadedContext()
        context.set_forkserver_preload(list(PRELOADED_MODULES))
        multiprocessing.forkserver.ensure_running()
        _context = context
    except Exception:  # noqa: BLE001 - the engine then starts as it would without this
        logger.exception("the engine core's forkserver did not start; the engine core will be spawned")


@contextlib.contextmanager
def forked_engine_core() -> Iterator[None]:
    """While the block runs, vLLM starts engine cores from the forkserver (when it runs)."""
    if _context is None:
        yield
        return
    from vllm.v1.engine import utils as engine_utils

    spawn_context: Callable[[], multiprocessing.context.BaseContext] = engine_utils.get_mp_context

    def preloaded() -> multiprocessing.context.BaseContext:
        spawn_context()  # for the environment it sets, which the engine core's own children need
        return _context

    engine_utils.get_mp_context = preloaded
    try:
        yield
    finally:
        engine_utils.get_mp_context = spawn_context

