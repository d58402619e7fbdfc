"""A pool's vLLM engine keeps plain vLLM's process layout: one GPU worker runs in the engine core."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from core.config import CONFIG_DIR, TrilemmaConfig
from engine import pool_engine
from engine.pool_engine import PoolEngine, runs_worker_in_engine_core, unloaded_compile_cache_plugin
from engine.process_lifetime import BoundForkContext, BoundSpawnContext
from pool.deployment import llm_config_for_pool


@pytest.mark.parametrize(("backend", "world_size", "on_cpu", "expected"), [
    ("mp", 1, False, True),   # one GPU worker: in the engine core, as plain vLLM has it
    ("mp", 1, True, False),   # vLLM's CPU worker needs a process of its own
    ("mp", 2, False, False),  # tensor, pipeline or data parallel: a process per worker
    ("ray", 1, False, False),  # the Ray layout (engine_process: ray_worker) keeps Ray's executor
])
def test_which_engines_run_their_worker_in_the_engine_core(backend, world_size, on_cpu, expected):
    parallel = SimpleNamespace(distributed_executor_backend=backend, world_size_across_dp=world_size)
    assert runs_worker_in_engine_core(parallel, on_cpu=on_cpu) is expected


@pytest.fixture(scope="module")
def engine(embedded_model_dir) -> PoolEngine:
    """The engine of a pool under its replica, with a real vLLM config built here (on the CPU)."""
    config = TrilemmaConfig.from_yaml(CONFIG_DIR / "local-cpu.yaml")
    return PoolEngine(llm_config_for_pool("short", config.pools["short"], config.model, str(embedded_model_dir)))


def test_a_single_gpu_engine_gets_vllms_in_process_executor(engine, monkeypatch):
    from vllm.v1.executor.abstract import Executor
    from vllm.v1.executor.uniproc_executor import UniProcExecutor

    monkeypatch.setattr(pool_engine, "_on_cpu", lambda: False)
    engine_args, _, vllm_config = engine._prepare_engine_config(callback_ctx=None)
    assert vllm_config.parallel_config.distributed_executor_backend == "uni"
    assert engine_args.distributed_executor_backend == "uni"
    assert Executor.get_class(vllm_config) is UniProcExecutor


def test_a_cpu_engine_keeps_the_multiprocess_executor_its_worker_needs(engine):
    from vllm.v1.executor.abstract import Executor
    from vllm.v1.executor.multiproc_executor import MultiprocExecutor

    _, _, vllm_config = engine._prepare_engine_config(callback_ctx=None)
    assert vllm_config.parallel_config.distributed_executor_backend == "mp"
    assert Executor.get_class(vllm_config) is MultiprocExecutor


def test_a_cpu_engine_says_so_where_its_compile_cache_will_not_load(engine, monkeypatch, caplog):
    on = {"VLLM_USE_AOT_COMPILE": "1"}
    assert unloaded_compile_cache_plugin(on, on_cpu=True, loads=True) is None
    assert unloaded_compile_cache_plugin(on, on_cpu=False, loads=False) is None  # vLLM's own backend loads it
    assert unloaded_compile_cache_plugin({"VLLM_USE_AOT_COMPILE": "0"}, on_cpu=True, loads=False) is None
    warning = unloaded_compile_cache_plugin(on, on_cpu=True, loads=False)
    assert "trilemma_compile_cache" in warning and 'VLLM_USE_AOT_COMPILE: "0"' in warning
    # In the replica, where the engine's config is prepared on the engine's node.
    monkeypatch.setenv("VLLM_USE_AOT_COMPILE", "1")
    monkeypatch.setenv("VLLM_PLUGINS", "lora_filesystem_resolver")
    engine._prepare_engine_config(callback_ctx=None)
    assert any("will not load the plugin trilemma_compile_cache" in r.getMessage() for r in caplog.records)


def test_while_the_engine_starts_vllm_takes_its_process_context_from_the_forkserver(monkeypatch):
    from vllm.v1.engine import utils as engine_utils

    preloaded = object()
    vllms_context = engine_utils.get_mp_context
    monkeypatch.setattr(pool_engine, "preloaded_context", lambda: preloaded)
    with pool_engine.engine_core_of_this_replica():
        assert engine_utils.get_mp_context() is preloaded
    assert engine_utils.get_mp_context is vllms_context


def test_without_a_forkserver_the_engine_core_starts_as_vllm_would_but_bound_to_the_replica(monkeypatch):
    from vllm.v1.engine import utils as engine_utils

    vllms_context = engine_utils.get_mp_context
    monkeypatch.setattr(pool_engine, "preloaded_context", lambda: None)
    with pool_engine.engine_core_of_this_replica():
        context = engine_utils.get_mp_context()
        assert isinstance(context, (BoundSpawnContext, BoundForkContext))
        assert context.get_start_method() == vllms_context().get_start_method()
    assert engine_utils.get_mp_context is vllms_context


def test_the_names_the_engine_start_relies_on_are_where_vllm_and_ray_use_them():
    # A rename upstream would quietly undo what PoolEngine changes; this fails instead.
    from vllm.v1.engine import utils as engine_utils
    from vllm.v1.engine.utils import CoreEngineProcManager

    starts_engine_core = CoreEngineProcManager.__init__
    assert "get_mp_context" in starts_engine_core.__code__.co_names
    assert starts_engine_core.__globals__ is vars(engine_utils)
    from core.upstream import VLLMEngine

    assert {"_prepare_engine_config", "_start_async_llm_engine"} <= set(VLLMEngine.start.__code__.co_names)


def test_the_tokenizer_endpoints_are_found_under_vllms_name_for_them(engine, monkeypatch):
    """Ray looks for them under the name before vLLM 0.29; /tokenize then said "not supported"."""
    import asyncio

    from core.upstream import VLLMEngine

    tokenization = object()

    async def started(self) -> None:
        self._app_state = SimpleNamespace(serving_tokenization=tokenization)
        self._oai_serving_tokenization = None

    monkeypatch.setattr(VLLMEngine, "start", started)
    asyncio.run(engine.start())
    assert engine._oai_serving_tokenization is tokenization
