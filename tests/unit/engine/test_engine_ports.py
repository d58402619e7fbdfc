"""Each pool's engines search for their torch.distributed port in a range of their own, set in
the pool's runtime environment (where Ray Serve LLM's engine-config task reads it on a GPU),
not from vLLM's default of port 100, where two engines that start together collide."""

from __future__ import annotations

from core.config import CONFIG_DIR, TrilemmaConfig
from engine.ports import DP_MASTER_PORT_ENV, PORTS_PER_POOL, TCPSTORE_PORT_OFFSET
from serve_app.app import build_app


def test_each_pool_of_the_app_gets_its_own_port_range():
    from pool.deployment import llm_config_for_pool

    config = TrilemmaConfig.from_yaml(CONFIG_DIR / "gpu-h200.yaml")
    starts = [int(llm_config_for_pool(name, pool, config.model, "/m", pool_slot=slot)
                  .runtime_env["env_vars"][DP_MASTER_PORT_ENV]) + TCPSTORE_PORT_OFFSET
              for slot, (name, pool) in enumerate(config.pools.items())]
    assert len(set(starts)) == len(starts) and min(starts) > 1024  # vLLM's own default: 100 for all
    assert abs(starts[0] - starts[1]) >= PORTS_PER_POOL
    # Clear of the ranges the config gives vLLM's other ports (VLLM_PORT 29500 and 29600).
    assert min(starts) > 29600 + 100


def test_the_built_app_carries_each_pools_range_in_its_runtime_environment():
    config = TrilemmaConfig.from_yaml(CONFIG_DIR / "local-cpu.yaml")
    pools = build_app(config, model_source="/m")._bound_deployment.init_kwargs["pools"]
    ports = {pool._bound_deployment.init_kwargs["llm_config"].runtime_env["env_vars"][DP_MASTER_PORT_ENV]
             for pool in pools.values()}
    assert len(ports) == len(config.pools)


def test_an_operators_own_port_is_kept():
    from pool.deployment import llm_config_for_pool

    raw = TrilemmaConfig.from_yaml(CONFIG_DIR / "gpu-h200.yaml").model_dump(mode="json")
    raw["pools"]["short"]["env"][DP_MASTER_PORT_ENV] = "40000"
    config = TrilemmaConfig.from_dict(raw)
    llm = llm_config_for_pool("short", config.pools["short"], config.model, "/m", pool_slot=1)
    assert llm.runtime_env["env_vars"][DP_MASTER_PORT_ENV] == "40000"

