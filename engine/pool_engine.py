"""The vLLM engine of a pool replica: Ray Serve LLM's, with plain vLLM's process layout for an
engine on one GPU, and its engine core bound to the replica (forked from a process that has
imported vLLM where one runs)."""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator, Mapping

from core.upstream import VLLMEngine, get_logger
from core.vllm_plugins import PLUGINS_ENV
from engine import vllm_compile_cache
from engine.cpu_engine import AOT_COMPILE_ENV
from engine.preload import preloaded_context
from engine.process_lifetime import bound_to_parent

logger = get_logger(__name__)

# vLLM's executors: the model worker in the engine core process, or in processes of its own.
IN_ENGINE_CORE = "uni"
WORKER_PROCESSES = "mp"


class PoolEngine(VLLMEngine):
    """Ray Serve LLM's vLLM engine, whose model runs in the engine core process when the engine
    has one worker on a GPU, as under plain `vllm serve`.

    An engine under its replica (`engine_process: replica`) takes Ray Serve LLM's local layout,
    and Ray names vLLM's multiprocess executor for every engine of that layout because its CPU
    backend needs one (vLLM's CPU worker sets its OpenMP threads up in a process of its own). On
    a GPU that executor adds one process between the engine core and the model, which imports
    vLLM again before the model loads: 18 s of an H200's start
    (bench/results/gpu-h200/start-8b-replica-phases.txt). Plain vLLM uses its in-process
    executor there; so does this engine. Tensor or pipeline parallel engines, and CPU engines,
    keep the executor they were given.
    """

    def _prepare_engine_config(self, callback_ctx: Any) -> tuple[Any, Any, Any]:
        engine_args, frontend_args, vllm_config = super()._prepare_engine_config(callback_ctx)
        on_cpu = _on_cpu()
        warning = unloaded_compile_cache_plugin(os.environ, on_cpu=on_cpu, loads=vllm_compile_cache.registered())
        if warning:
            logger.warning(warning)
        if runs_worker_in_engine_core(vllm_config.parallel_config, on_cpu=on_cpu):
            # Set before the executor class is chosen from it (AsyncLLM) and the engine core
            # process starts; the arguments carry it too, as vLLM's own would.
            vllm_config.parallel_config.distributed_executor_backend = IN_ENGINE_CORE
            engine_args.distributed_executor_backend = IN_ENGINE_CORE
        return engine_args, frontend_args, vllm_config

    async def start(self) -> None:
        await super().start()
        # Ray 2.60 looks for vLLM's tokenizer endpoints under their name before vLLM 0.29
        # (`openai_serving_tokenization`), so /tokenize and /detokenize answered "not supported".
        if self._oai_serving_tokenization is None:
            self._oai_serving_tokenization = getattr(self._app_state, "serving_tokenization", None)

    async def load_adapter(self, name: str, folder: str) -> None:
        """Registers the LoRA adapter in `folder` as the model `name` and loads it into the engine
        (vLLM's own dynamic loading, as its /v1/load_lora_adapter does); a no-op if registered."""
        from vllm.entrypoints.serve.lora.protocol import LoadLoRAAdapterRequest

        if name in self._oai_models.lora_requests:
            return
        answer = await self._oai_models.load_lora_adapter(LoadLoRAAdapterRequest(lora_name=name, lora_path=folder))
        error = getattr(answer, "error", None)
        if error is not None:
            raise RuntimeError(error.message)

    async def unload_adapter(self, name: str) -> None:
        """Unregisters the adapter and drops it from the engine's caches. vLLM's own unload only
        unregisters the name, leaving the weights in the engine's CPU and GPU caches."""
        from vllm.entrypoints.serve.lora.protocol import UnloadLoRAAdapterRequest

        registered = self._oai_models.lora_requests.get(name)
        if registered is None:
            return
        await self._oai_models.unload_lora_adapter(UnloadLoRAAdapterRequest(lora_name=name))
        await self._engine_client.remove_lora(registered.lora_int_id)

    def _start_async_llm_engine(self, engine_args: Any, vllm_config: Any, placement_group: Any) -> Any:
        # The engine core's process starts in here: bound to the replica, and forked where the
        # replica runs a forkserver (engine.preload says why). vLLM's NUMA binding wraps
        # the command of a spawned engine core, so it keeps vLLM's own start.
        if vllm_config.parallel_config.numa_bind:
            return super()._start_async_llm_engine(engine_args, vllm_config, placement_group)
        with engine_core_of_this_replica():
            return super()._start_async_llm_engine(engine_args, vllm_config, placement_group)


@contextlib.contextmanager
def engine_core_of_this_replica() -> Iterator[None]:
    """While the block runs, vLLM starts its engine core as a process that ends with the
    replica however the replica ends (engine.process_lifetime): forked from the replica's
    forkserver where one runs, else started as vLLM would, with a parent-death signal.

    vLLM's engine start takes its process context from `vllm.v1.engine.utils.get_mp_context`;
    that name is swapped for the block. A replica starts one engine, once, on its event loop's
    thread, so nothing else calls it meanwhile, and the thread outlives the engine core.
    """
    from vllm.v1.engine import utils as engine_utils

    vllms_context = engine_utils.get_mp_context
    preloaded = preloaded_context()

    def of_this_replica() -> Any:
        context = vllms_context()  # also for the environment it sets, which the engine core's children need
        return preloaded if preloaded is not None else bound_to_parent(context)

    engine_utils.get_mp_context = of_this_replica
    if preloaded is not None:
        logger.info("vLLM's engine core is forked from the replica's forkserver, which has imported vLLM")
    try:
        yield
    finally:
        engine_utils.get_mp_context = vllms_context


def unloaded_compile_cache_plugin(environ: Mapping[str, str], *, on_cpu: bool, loads: bool) -> str | None:
    """What to warn of where a CPU engine is to load its compiled model but, on this node, vLLM
    will not load the plugin that makes that load work (the driver decided for its own node)."""
    if not on_cpu or environ.get(AOT_COMPILE_ENV) != "1" or loads:
        return None
    return (f"{AOT_COMPILE_ENV}=1, but vLLM will not load the plugin {vllm_compile_cache.PLUGIN_NAME} on this node "
            f"(the package is not installed with its entry points, or {PLUGINS_ENV} leaves it "
            f"out): vLLM 0.29 cannot load its compile cache on a CPU, so every start of this engine compiles the "
            f"model again; install the package here, or set {AOT_COMPILE_ENV}: \"0\" in the pool's env")


def runs_worker_in_engine_core(parallel_config: Any, *, on_cpu: bool) -> bool:
    """Whether an engine given the multiprocess executor should run its worker in the engine
    core instead: one worker (no tensor, pipeline or data parallelism), not on a CPU."""
    return (not on_cpu
            and parallel_config.distributed_executor_backend == WORKER_PROCESSES
            and parallel_config.world_size_across_dp == 1)


def _on_cpu() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()
