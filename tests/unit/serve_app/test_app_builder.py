"""The app builder turns each shipped config into Ray Serve LLM deployments, without starting them."""

from __future__ import annotations

import pytest

from core.config import CONFIG_DIR, ConfigError, TrilemmaConfig
from core.wire import deployment_name
from engine import vllm_compile_cache
from engine.preload import PRELOAD_ENV
from pool.deployment import llm_config_for_pool
from pool.replica import PoolServer, choose_engine_dtype
from serve_app.app import app_builder, build_app
from tests.fake_engine import FakeEngine


def test_cpu_pool_is_one_cpu_bundle_with_its_own_core():
    config = TrilemmaConfig.from_yaml(CONFIG_DIR / "local-cpu.yaml")
    llm = llm_config_for_pool("short", config.pools["short"], config.model, "/models/smol")
    assert llm.model_id == "SmolLM2-135M-Instruct"
    assert llm.engine_kwargs["max_model_len"] == 2048 and llm.engine_kwargs["max_num_seqs"] == 8
    assert llm.placement_group_config == {"bundles": [{"CPU": 1.0}]}
    assert llm.runtime_env["env_vars"]["VLLM_CPU_OMP_THREADS_BIND"] == "0"
    assert llm.deployment_config["ray_actor_options"] == {"num_cpus": 0}


def test_cpu_engines_load_the_aot_compile_cache_where_the_plugin_that_fixes_its_load_is_installed(monkeypatch):
    config = TrilemmaConfig.from_yaml(CONFIG_DIR / "local-cpu.yaml")

    def aot_env(config: TrilemmaConfig, pool: str = "short") -> dict[str, str]:
        return llm_config_for_pool(pool, config.pools[pool], config.model, "/m").runtime_env["env_vars"]

    assert vllm_compile_cache.registered(), "no entry point: reinstall the package (make setup)"
    assert aot_env(config)["VLLM_USE_AOT_COMPILE"] == "1"
    # A pool whose env leaves the plugin out of those vLLM loads.
    only_lora = config.with_overrides({"pools.short.env.VLLM_PLUGINS": "lora_filesystem_resolver"})
    assert aot_env(only_lora)["VLLM_USE_AOT_COMPILE"] == "0"
    monkeypatch.setattr(vllm_compile_cache, "registered", lambda environ: False)  # not installed
    assert aot_env(config)["VLLM_USE_AOT_COMPILE"] == "0"
    pinned = config.with_overrides({"pools.short.env.VLLM_USE_AOT_COMPILE": "1"})
    assert aot_env(pinned)["VLLM_USE_AOT_COMPILE"] == "1"
    gpu = TrilemmaConfig.from_yaml(CONFIG_DIR / "gpu.yaml")
    assert "VLLM_USE_AOT_COMPILE" not in aot_env(gpu, "long")


def test_gpu_pool_names_its_accelerator():
    config = TrilemmaConfig.from_yaml(CONFIG_DIR / "gpu.yaml")
    llm = llm_config_for_pool("long", config.pools["long"], config.model, config.model.source)
    assert llm.placement_group_config == {"bundles": [{"accelerator_type:H100": 0.001}]}
    assert llm.engine_kwargs["max_model_len"] == 32768
    assert llm.engine_kwargs["enable_chunked_prefill"] is True


def test_a_single_gpu_engine_runs_under_its_replica_which_holds_the_gpu():
    config = TrilemmaConfig.from_yaml(CONFIG_DIR / "gpu.yaml")
    pool = config.pools["long"]
    llm = llm_config_for_pool("long", pool, config.model, "/m")
    # Ray Serve LLM's local layout: the config built in the replica. Ray names vLLM's multiprocess
    # executor; PoolEngine runs one GPU's worker in the engine core instead (test_pool_engine).
    assert llm.accelerator_config.kind == "cpu" and llm.accelerator_type is None
    options = PoolServer.get_deployment_options(llm)
    assert options["ray_actor_options"]["num_gpus"] == 1
    assert options["placement_group_bundles"] == [{"accelerator_type:H100": 0.001, "CPU": 0, "GPU": 1}]
    assert llm.get_engine_config().get_initialization_kwargs()["distributed_executor_backend"] == "mp"


def _pool_env(config: TrilemmaConfig, name: str, **build: object) -> dict:
    pools = build_app(config, model_source="/models/any", **build)._bound_deployment.init_kwargs["pools"]
    return pools[name]._bound_deployment.init_kwargs["llm_config"].runtime_env["env_vars"]


def test_a_gpu_replicas_engine_core_is_forked_from_its_forkserver_a_cpu_replicas_spawned():
    gpu = TrilemmaConfig.from_yaml(CONFIG_DIR / "gpu.yaml")
    assert _pool_env(gpu, "long")[PRELOAD_ENV] == "1"
    assert PRELOAD_ENV not in _pool_env(TrilemmaConfig.from_yaml(CONFIG_DIR / "local-cpu.yaml"), "long")
    # A fake engine starts no vLLM, so no server imports it; the pool's env has the last word.
    assert PRELOAD_ENV not in _pool_env(gpu, "long", engine_cls=FakeEngine)
    spawned = gpu.with_overrides({f"pools.long.env.{PRELOAD_ENV}": "0"})
    assert _pool_env(spawned, "long")[PRELOAD_ENV] == "0"
    ray_layout = gpu.with_overrides({"pools.long.engine_process": "ray_worker"})
    assert PRELOAD_ENV not in _pool_env(ray_layout, "long")


def test_a_tensor_parallel_engine_runs_in_rays_workers_as_ray_serve_llm_lays_it_out():
    raw = TrilemmaConfig.from_yaml(CONFIG_DIR / "gpu.yaml").model_dump(mode="json")
    raw["pools"]["long"]["engine_kwargs"]["tensor_parallel_size"] = 2
    config = TrilemmaConfig.from_dict(raw)
    llm = llm_config_for_pool("long", config.pools["long"], config.model, "/m")
    assert llm.accelerator_type == "H100" and llm.accelerator_config.kind == "gpu"
    assert "num_gpus" not in PoolServer.get_deployment_options(llm)["ray_actor_options"]
    raw["pools"]["long"]["engine_process"] = "replica"
    with pytest.raises(ConfigError, match="engine_process replica runs an engine on one GPU; this one is tensor x pipeline parallel 2"):
        TrilemmaConfig.from_dict(raw)


def test_a_pool_can_keep_ray_serve_llms_own_layout_on_one_gpu():
    raw = TrilemmaConfig.from_yaml(CONFIG_DIR / "gpu-h200.yaml").model_dump(mode="json")
    raw["pools"]["short"]["engine_process"] = "ray_worker"
    config = TrilemmaConfig.from_dict(raw)
    llm = llm_config_for_pool("short", config.pools["short"], config.model, "/m")
    assert llm.accelerator_type == "H200"
    assert llm.placement_group_config == {"bundles": [{"GPU": 0.45}]}
    assert llm.runtime_env["env_vars"]["VLLM_RAY_PER_WORKER_GPUS"] == "0.45"


def test_a_gpu_pool_that_sleeps_when_idle_starts_its_engine_with_sleep_mode():
    raw = TrilemmaConfig.from_yaml(CONFIG_DIR / "gpu-h200.yaml").model_dump(mode="json")
    raw["pools"]["long"]["sleep_when_idle"] = {"after_s": 300}
    config = TrilemmaConfig.from_dict(raw)
    assert llm_config_for_pool("long", config.pools["long"], config.model, "/m").engine_kwargs["enable_sleep_mode"]
    assert "enable_sleep_mode" not in llm_config_for_pool("short", config.pools["short"], config.model, "/m").engine_kwargs


def test_pools_sharing_a_gpu_start_with_a_fixed_kv_cache_instead_of_a_memory_profile():
    config = TrilemmaConfig.from_yaml(CONFIG_DIR / "gpu-h200.yaml")
    kv_bytes = {name: llm_config_for_pool(name, pool, config.model, "/m").engine_kwargs["kv_cache_memory_bytes"]
                for name, pool in config.pools.items()}
    assert kv_bytes == {"short": 40 << 30, "long": 36 << 30}
    # One truth: the engine argument is the pool's field, never both.
    raw = config.model_dump(mode="json")
    raw["pools"]["short"]["engine_kwargs"]["kv_cache_memory_bytes"] = 1 << 30
    with pytest.raises(ConfigError, match="kv_cache_memory_bytes"):
        TrilemmaConfig.from_dict(raw)


def test_a_cpu_pool_cannot_sleep_with_vllm_and_the_error_says_why():
    raw = TrilemmaConfig.from_yaml(CONFIG_DIR / "local-cpu.yaml").model_dump(mode="json")
    raw["pools"]["long"]["sleep_when_idle"] = {"after_s": 300}
    with pytest.raises(ConfigError, match=r"pools.long.sleep_when_idle: vLLM's sleep mode needs a GPU"):
        build_app(TrilemmaConfig.from_dict(raw), model_source="/m")
    raw["pools"]["long"]["engine_kwargs"]["enable_sleep_mode"] = True
    with pytest.raises(ConfigError, match="enable_sleep_mode"):
        TrilemmaConfig.from_dict(raw)


@pytest.mark.parametrize("name", ["local-cpu.yaml", "gpu.yaml", "models-h200.yaml"])
def test_build_app_binds_router_and_pools(name):
    config = TrilemmaConfig.from_yaml(CONFIG_DIR / name)
    app = build_app(config, model_source="/models/any")
    bound = app._bound_deployment
    assert bound.name == "router"
    pools = bound.init_kwargs["pools"]
    assert {p._bound_deployment.name for p in pools.values()} == {deployment_name(n) for n in config.pools}
    # A CPU pool's replica picks its engine dtype from the CPU of the node it lands on.
    for name, pool in pools.items():
        assert pool._bound_deployment.init_kwargs["cpu_engine"] is config.pools[name].is_cpu
        assert "dtype" not in pool._bound_deployment.init_kwargs["llm_config"].engine_kwargs


def test_the_seed_tables_scenarios_each_get_their_own_model_and_precision():
    config = TrilemmaConfig.from_yaml(CONFIG_DIR / "models-h200.yaml")
    app = build_app(config, model_source="/models/any")
    bound = app._bound_deployment.init_kwargs
    assert sorted(bound["model_cards"]) == ["llama-8b-shape", "smollm2-135m-shape"]
    pools = {name: deployment._bound_deployment.init_kwargs["llm_config"] for name, deployment in bound["pools"].items()}
    assert {name: llm.model_id for name, llm in pools.items()} == {
        "chat": "smollm2-135m-shape", "batch": "llama-8b-shape", "cost": "llama-8b-shape"}
    assert pools["cost"].engine_kwargs["quantization"] == "fp8" and "quantization" not in pools["batch"].engine_kwargs
    serving = {name: config.pools_serving(scenario.models[0], scenario) for name, scenario in config.scenarios.items()}
    assert serving == {"chat": ["chat"], "quality": ["batch"], "cost": ["batch", "cost"], "batch": ["batch", "cost"]}
    # Every pool shares the one card, with a KV cache of its own and no memory profile to collide.
    assert sum(pool.gpu_fraction for pool in config.pools.values()) <= 1
    assert all(pool.kv_cache_gib for pool in config.pools.values())


def test_app_builder_rejects_unknown_arguments():
    with pytest.raises(ValueError, match="unknown arguments \\['port'\\]"):
        app_builder({"port": "9000"})


@pytest.mark.parametrize(
    ("replica_router", "router_class"),
    [
        ("least_loaded", "router.replica_router:LeastLoadedRouter"),
        ("prefix_cache_affinity", "ray.serve.llm.request_router:PrefixCacheAffinityRouter"),
    ],
)
def test_pools_use_the_configured_replica_router_and_the_admission_limits(replica_router, router_class):
    raw = TrilemmaConfig.from_yaml(CONFIG_DIR / "local-cpu.yaml").model_dump()
    raw["pools"]["short"].update(replica_router=replica_router, replica_router_kwargs={"imbalanced_threshold": 4})
    config = TrilemmaConfig.from_dict(raw)
    pools = build_app(config, model_source="/models/any")._bound_deployment.init_kwargs["pools"]
    short = pools["short"]._bound_deployment
    router_config = short._deployment_config.request_router_config
    assert router_config.request_router_class == router_class
    assert router_config.request_router_kwargs == {"imbalanced_threshold": 4}
    # The replica accepts its engine's share and its whole queue, so Ray never queues ahead of it.
    assert short._deployment_config.max_ongoing_requests == 8 * 2 + 32 + 32
    assert short.init_kwargs["max_in_engine"] == 16 and short.init_kwargs["admission"]["max_queued"] == 32


def test_the_proxy_sheds_a_flood_with_429_before_the_routers():
    config = TrilemmaConfig.from_yaml(CONFIG_DIR / "local-cpu.yaml")
    router = build_app(config, model_source="/models/any")._bound_deployment
    assert router._deployment_config.max_queued_requests == config.router.max_queued_requests
    assert router._deployment_config.backpressure_config.status_code == 429


def test_pools_sharing_a_gpu_hold_their_share_in_the_replica():
    config = TrilemmaConfig.from_yaml(CONFIG_DIR / "gpu-h200.yaml")
    llm = llm_config_for_pool("short", config.pools["short"], config.model, "/models/any")
    options = PoolServer.get_deployment_options(llm)
    assert options["ray_actor_options"]["num_gpus"] == 0.45
    assert options["placement_group_bundles"] == [{"accelerator_type:H200": 0.001, "CPU": 0, "GPU": 0.45}]
    assert "VLLM_RAY_PER_WORKER_GPUS" not in llm.runtime_env["env_vars"]  # no Ray worker to size
    assert llm.engine_kwargs["load_format"] == "dummy"
    # Each pool's engine gets its own port range: two starting at once collide otherwise.
    ports = {llm_config_for_pool(name, pool, config.model, "/m").runtime_env["env_vars"]["VLLM_PORT"]
             for name, pool in config.pools.items()}
    assert len(ports) == len(config.pools)
    # Its price is its share of the card.
    assert config.pools["short"].units == 0.45


@pytest.mark.parametrize(("flags", "dtype"), [(frozenset({"avx2"}), "float32"), (frozenset({"avx2", "amx_bf16"}), "float32")])
def test_the_dtype_a_replica_chooses_reaches_the_engine(flags, dtype):
    config = TrilemmaConfig.from_yaml(CONFIG_DIR / "local-cpu.yaml")
    llm = llm_config_for_pool("short", config.pools["short"], config.model, "/models/smol")
    llm.get_engine_config()  # building the app made the engine's copy of its arguments already
    assert choose_engine_dtype(llm, flags).dtype == dtype
    assert llm.get_engine_config().get_initialization_kwargs()["dtype"] == dtype


def _versions(config: TrilemmaConfig) -> dict[str, str]:
    router = build_app(config, model_source="/models/any")._bound_deployment
    versions = {"router": router.version}
    versions.update({name: pool._bound_deployment.version for name, pool in router.init_kwargs["pools"].items()})
    return versions


def test_a_redeploy_restarts_only_the_deployments_whose_part_of_the_config_changed():
    """Serve keeps replicas whose deployment version is unchanged; a random version (Serve's
    default from Python) restarted every engine on every deploy."""
    config = TrilemmaConfig.from_yaml(CONFIG_DIR / "local-cpu.yaml")
    before = _versions(config)
    assert all(before.values()) and before == _versions(config)
    scaled = config.with_overrides({"pools.short.replicas": 2, "router.replicas": 3}, source="test")
    assert _versions(scaled) == before, "a replica count is scaling, not a new version"
    changed = _versions(config.with_overrides({"pools.long.max_num_seqs": 2}, source="test"))
    assert changed["short"] == before["short"]
    assert changed["long"] != before["long"] and changed["router"] != before["router"]


def test_an_int8_pool_loads_the_checkpoint_derived_from_the_models_folder(tmp_path, monkeypatch):
    from transformers import LlamaConfig, LlamaForCausalLM

    source = tmp_path / "tiny"
    LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                 num_key_value_heads=1, vocab_size=64)).save_pretrained(source)
    monkeypatch.setenv("TRILEMMA_CACHE_DIR", str(tmp_path / "cache"))
    raw = TrilemmaConfig.from_yaml(CONFIG_DIR / "local-cpu.yaml").model_dump(mode="json")
    raw["pools"]["long"]["quantization"] = "w8a8-int8"
    config = TrilemmaConfig.from_dict(raw)
    llm = llm_config_for_pool("long", config.pools["long"], config.model, str(source))
    derived = llm.model_loading_config.model_source
    assert derived.startswith(str(tmp_path / "cache" / "models" / "tiny-w8a8-int8-"))
    assert llm.engine_kwargs["quantization"] == "compressed-tensors"
    assert llm_config_for_pool("short", config.pools["short"], config.model, str(source)).model_loading_config \
        .model_source == str(source)
    with pytest.raises(ConfigError, match="pools.long.quantization w8a8-int8 is derived from a local checkpoint"):
        llm_config_for_pool("long", config.pools["long"], config.model, "HuggingFaceTB/SmolLM2-135M-Instruct")


def test_the_executor_is_the_pools_engine_process_not_an_engine_argument():
    raw = TrilemmaConfig.from_yaml(CONFIG_DIR / "gpu.yaml").model_dump(mode="json")
    raw["pools"]["long"]["engine_kwargs"]["distributed_executor_backend"] = "ray"
    with pytest.raises(ConfigError, match=r"engine_kwargs must not set \['distributed_executor_backend'\]"):
        TrilemmaConfig.from_dict(raw)


def test_a_cpu_pool_has_no_ray_worker_layout():
    raw = TrilemmaConfig.from_yaml(CONFIG_DIR / "local-cpu.yaml").model_dump(mode="json")
    raw["pools"]["long"]["engine_process"] = "ray_worker"
    with pytest.raises(ConfigError, match="engine_process ray_worker is for GPU pools"):
        TrilemmaConfig.from_dict(raw)
