"""Which pools' engines may batch a request without an adapter beside adapter requests, and the
configs refused because a scenario's base-model requests would have no other pool."""

from __future__ import annotations

from typing import Any

import pytest

from core.config import ConfigError, TrilemmaConfig
from core.lora_isolation import (
    LORA_ISOLATION_PLUGIN,
    adapter_only_pools,
    batch_isolation,
)
from core.pool_config import PoolConfig

NO_PLUGIN = {"VLLM_PLUGINS": "trilemma_compile_cache"}


def pool(**extra: Any) -> PoolConfig:
    return PoolConfig(role="short", max_model_len=2048, max_num_seqs=4, lora={}, **extra)


@pytest.mark.parametrize(("config", "environ", "proven", "why"), [
    ({}, {}, True, f"mended by the plugin {LORA_ISOLATION_PLUGIN}"),
    ({}, NO_PLUGIN, False, f"vLLM will not load the plugin {LORA_ISOLATION_PLUGIN}"),
    ({"env": NO_PLUGIN}, {}, False, "VLLM_PLUGINS leaves it out"),  # the pool's env wins
    ({"env": {"VLLM_PLUGINS": f"x,{LORA_ISOLATION_PLUGIN}"}}, NO_PLUGIN, True, "mended"),
    ({"accelerator": "H100"}, NO_PLUGIN, True, "Triton LoRA kernels skip a token without an adapter"),
    ({"accelerator": "a100-80g"}, {}, True, "Triton"),
    ({"accelerator": "MI300X"}, {}, False, "accelerator 'MI300X' have not been checked"),
], ids=["cpu", "cpu-plugin-left-out", "cpu-pool-env-leaves-it-out", "cpu-pool-env-names-it", "nvidia",
        "nvidia-any-case", "other-gpu"])
def test_which_engines_are_proven_to_isolate(config, environ, proven, why):
    isolation = batch_isolation(pool(**config), environ)
    assert isolation.proven is proven and why in isolation.why


def config_of(accelerator: str, twin: bool) -> TrilemmaConfig:
    """`lora` pool (short, serving adapters) on `accelerator`, and, with `twin`, `plain` beside it."""
    pools: dict[str, Any] = {"lora": {"role": "short", "max_model_len": 2048, "max_num_seqs": 4, "lora": {},
                                      "accelerator": accelerator}}
    if twin:
        pools["plain"] = {"role": "short", "max_model_len": 2048, "max_num_seqs": 4, "accelerator": accelerator}
    return TrilemmaConfig.from_dict({
        "model": {"name": "m", "source": "/models/m"}, "pools": pools,
        "adapters": {"a": {"base": "m", "source": "/adapters/a"}},
        "scenarios": {"chat": {"priority": 0}}, "routing": {"default_scenario": "chat"},
    })


def test_base_requests_need_a_pool_without_lora_where_isolation_is_not_proven():
    with pytest.raises(ConfigError) as caught:
        adapter_only_pools(config_of("MI300X", twin=False), {})
    assert str(caught.value).startswith(
        "scenarios.chat: requests for model 'm' without an adapter have only pools ['lora'], which serve adapters "
        "on engines not proven to keep such a request off the adapters in its batch (lora: vLLM's LoRA kernels")
    assert str(caught.value).endswith("give the scenario a pool of 'm' without `lora`")
    assert adapter_only_pools(config_of("MI300X", twin=True), {}).keys() == {"lora"}
    with pytest.raises(ConfigError, match="without an adapter have only pools"):
        adapter_only_pools(config_of("cpu", twin=False), NO_PLUGIN)


def test_proven_engines_take_base_and_adapter_requests_alike():
    for accelerator, environ in (("cpu", {}), ("H200", NO_PLUGIN)):
        assert adapter_only_pools(config_of(accelerator, twin=False), environ) == {}
