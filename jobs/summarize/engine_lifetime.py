"""The job's vLLM engines end with the Ray Data actors that run them.

In engine mode each Ray Data actor starts a vLLM engine core as a process of its own. `ray job
stop`, a driver that is killed, or Ray ending the job's actors leaves that process running with
the model and its KV cache in memory (vLLM's engine core does not watch its parent). Ray runs
this module's hook in each of the job's engine workers before the actor starts: the engine core
it starts then dies with it (engine.process_lifetime), as a pool replica's does.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from engine.process_lifetime import bound_to_parent

logger = logging.getLogger(__name__)

# Ray's runtime_env key for a function that runs in each worker before its first task.
SETUP_HOOK = "jobs.summarize.engine_lifetime.bind_engine_cores_to_this_worker"


def bind_engine_cores_to_this_worker() -> None:
    """vLLM takes the engine core's process context from `vllm.v1.engine.utils.get_mp_context`;
    from now on, in this worker, that context's children die with the worker."""
    from vllm.v1.engine import utils as engine_utils

    vllms_context = engine_utils.get_mp_context

    def of_this_worker() -> Any:
        context = vllms_context()  # also for the environment it sets, which the engine core's children need
        # The parent-death signal follows the starting thread: only the main thread is sure to
        # live as long as the worker (Ray builds an actor, and with it the engine, on that one).
        if threading.current_thread() is not threading.main_thread():
            logger.warning("vLLM's engine core starts from thread %s: left unbound, it may outlive its worker",
                           threading.current_thread().name)
            return context
        return bound_to_parent(context)

    engine_utils.get_mp_context = of_this_worker
