"""How a configured pool becomes a Ray Serve LLM deployment of `PoolServer`: its engine
arguments, placement, environment and deployment options."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray.serve.deployment import Application
from ray.serve.llm import LLMConfig, build_llm_deployment

from cluster.node_types import accelerator_resource
from core.config import REPLICA_ROUTERS, AdapterConfig, ConfigError, ModelSpec, PoolConfig
from core.int8_checkpoint import VLLM_METHOD, W8A8_INT8, prepare_w8a8_int8
from core.model_store import default_cache_dir
from core.pool_config import GIB
from core.price_catalog import ReplicaRate
from core.wire import deployment_name
from engine import vllm_compile_cache
from engine.model_files import DownloadOnlyRemoteModels
from engine.ports import DP_MASTER_PORT_ENV, dp_master_port
from engine.preload import PRELOAD_ENV
from pool.replica import PoolServer


def int8_source(pool_name: str, model_source: str) -> Path:
    folder = Path(model_source)
    if not (folder / "config.json").is_file():
        raise ConfigError(
            f"pools.{pool_name}.quantization {W8A8_INT8} is derived from a local checkpoint folder; "
            f"the model's source {model_source!r} is not one (set model.source to a folder, or name a "
            "quantized checkpoint's own method)"
        )
    return prepare_w8a8_int8(folder, default_cache_dir())


def llm_config_for_pool(
    pool_name: str, pool: PoolConfig, model: ModelSpec, model_source: str,
    autoscaling_config: dict[str, Any] | None = None, ongoing_limit: int | None = None, pool_slot: int = 0,
) -> LLMConfig:
    """`autoscaling_config` (Ray Serve's) replaces the pool's fixed replica count;
    `ongoing_limit` the pool's own max_ongoing_requests (TrilemmaConfig.ongoing_limit);
    `pool_slot`, the pool's place in the app, gives its engines ports of their own."""
    engine_kwargs: dict[str, Any] = {
        "max_model_len": pool.max_model_len,
        "max_num_seqs": pool.max_num_seqs,
        **pool.engine_kwargs,
    }
    if pool.quantization == W8A8_INT8:  # derived here from the model's own checkpoint
        model_source = str(int8_source(pool_name, model_source))
        engine_kwargs["quantization"] = VLLM_METHOD
    elif pool.quantization:
        engine_kwargs["quantization"] = pool.quantization
    if pool.sleep_when_idle.after_s is not None:
        engine_kwargs["enable_sleep_mode"] = True
    if pool.kv_cache_gib is not None:
        engine_kwargs["kv_cache_memory_bytes"] = int(pool.kv_cache_gib * GIB)
    if pool.lora is not None:
        engine_kwargs.update(pool.lora.engine_kwargs())
    placement: dict[str, Any]
    replica_gpus = 0.0
    env = dict(pool.env)
    env.setdefault(DP_MASTER_PORT_ENV, str(dp_master_port(pool_slot)))
    if pool.is_cpu:
        env = vllm_compile_cache.with_cpu_engine_env(env)
        placement = {
            "accelerator_config": {"kind": "cpu"},
            "placement_group_config": {"bundles": [dict(pool.resources)]},
        }
    elif pool.engine_in_replica:
        # Ray Serve LLM's local layout, the one its CPU backend has: the replica builds the engine
        # config and starts the engine core (engine.pool_engine), which runs the model itself.
        # The replica holds the GPU share, so Ray shows that GPU to it and with it to the engine.
        replica_gpus = pool.units
        placement = {
            "accelerator_config": {"kind": "cpu"},
            "placement_group_config": {"bundles": [{accelerator_resource(pool.accelerator): 0.001}]},
        }
    elif pool.gpu_fraction is not None:
        # Pools sharing a GPU: Ray schedules the fraction, and vLLM's Ray executor must ask for
        # the same fraction for its worker or it waits for a whole GPU that is not free.
        placement = {
            "accelerator_type": pool.accelerator,
            "placement_group_config": {"bundles": [{"GPU": pool.gpu_fraction}]},
        }
        env.setdefault("VLLM_RAY_PER_WORKER_GPUS", str(pool.gpu_fraction))
    else:
        placement = {"accelerator_type": pool.accelerator}
    return LLMConfig(
        model_loading_config={"model_id": model.name, "model_source": model_source},
        engine_kwargs=engine_kwargs,
        callback_config={"callback_class": DownloadOnlyRemoteModels},
        runtime_env={"env_vars": env} if env else None,
        deployment_config={
            **({"autoscaling_config": autoscaling_config} if autoscaling_config else {"num_replicas": pool.replicas}),
            "max_ongoing_requests": ongoing_limit or pool.ongoing_limit,
            "health_check_period_s": pool.health_check_period_s,
            "graceful_shutdown_timeout_s": pool.drain_timeout_s,
            # The engine's bundle holds what it runs on (a CPU pool's CPUs); the replica actor
            # takes no CPU, and on a GPU holds the share whose engine runs under it.
            "ray_actor_options": {"num_cpus": 0, **({"num_gpus": replica_gpus} if replica_gpus else {})},
        },
        **placement,
    )


def build_pool_deployment(
    pool_name: str, pool: PoolConfig, llm_config: LLMConfig, rate: ReplicaRate,
    engine_cls: type | None = None, max_in_engine_ceiling: int | None = None,
    adapters: dict[str, AdapterConfig] | None = None, adapter_only: str | None = None,
) -> Application:
    """`engine_cls` swaps the vLLM engine for another LLMEngine (tests use a fake one);
    `max_in_engine_ceiling` lets the autoscaler raise the engine concurrency up to it;
    `adapters` are the LoRA adapters its replicas may load (TrilemmaConfig.adapters_of_pool);
    `adapter_only`, where set, why its engines take no request without an adapter
    (core.lora_isolation)."""
    if pool.sleep_when_idle.after_s is not None and pool.is_cpu and engine_cls is None:
        raise ConfigError(
            f"pools.{pool_name}.sleep_when_idle: vLLM's sleep mode needs a GPU and this pool's "
            "accelerator is cpu; set after_s to null"
        )
    bind_kwargs: dict[str, Any] = {
        "pool_name": pool_name, "replica_rate": rate.model_dump(),
        "admission": pool.admission.model_dump(), "max_in_engine": pool.max_in_engine,
        "max_in_engine_ceiling": max_in_engine_ceiling or pool.max_in_engine,
        "cpu_niceness": pool.cpu_niceness, "cpu_engine": pool.is_cpu,
        "stream_batching": pool.stream_batching.model_dump(),
        "sleep_when_idle": pool.sleep_when_idle.model_dump(),
        "lora": pool.lora.model_dump() if pool.lora is not None else None,
        "adapters": {name: adapter.model_dump() for name, adapter in (adapters or {}).items()},
        "adapter_only": adapter_only,
    }
    if engine_cls is not None:
        bind_kwargs["engine_cls"] = engine_cls
    elif pool.engine_in_replica and not pool.is_cpu:
        # The engine core forked from a server that imports vLLM beside the replica
        # (engine.preload); the pool's env may say otherwise, as a CPU pool's may ask for it.
        runtime_env = dict(llm_config.runtime_env or {})
        runtime_env["env_vars"] = {PRELOAD_ENV: "1", **runtime_env.get("env_vars", {})}
        llm_config = llm_config.model_copy(update={"runtime_env": runtime_env})
    return build_llm_deployment(
        llm_config,
        bind_kwargs=bind_kwargs,
        override_serve_options={
            "name": deployment_name(pool_name),
            "request_router_config": {
                "request_router_class": REPLICA_ROUTERS[pool.replica_router],
                "request_router_kwargs": dict(pool.replica_router_kwargs),
            },
        },
        deployment_cls=PoolServer,
    )
