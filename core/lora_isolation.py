"""Whether a pool's engine gives each request of a batch its own model when requests without an
adapter share the batch with adapter requests, and the config check that base-model traffic never
needs an engine where that is not proven."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from core.config_base import ConfigError
from core.vllm_plugins import PLUGINS_ENV, plugin_loads

if TYPE_CHECKING:
    from core.config import TrilemmaConfig
    from core.pool_config import PoolConfig

# The entry point (pyproject.toml) of engine/vllm_lora_isolation.py, which mends vLLM's CPU LoRA ops.
LORA_ISOLATION_PLUGIN = "trilemma_lora_isolation"
# Ray's accelerator names of NVIDIA GPUs (ray.util.accelerators), as a pool's `accelerator` gives
# them. vLLM runs LoRA there with its Triton kernels, which skip a token without an adapter; checked
# with real weights on an H100 (bench/results/adapter-isolation).
NVIDIA_ACCELERATORS = frozenset({
    "V100", "P100", "T4", "P4", "K80", "A10G", "A10", "A40", "L4", "L40S", "A100", "A100-40G", "A100-80G",
    "H100", "H200", "H20", "B200", "B300", "GB200", "GB300", "RTX-PRO-6000",
})


@dataclass(frozen=True)
class BatchIsolation:
    """Whether a pool's engines are proven to keep a request without an adapter off the adapters of
    its batch, and why (the evidence, or what is missing)."""

    proven: bool
    why: str


def batch_isolation(pool: PoolConfig, environ: Mapping[str, str]) -> BatchIsolation:
    """The isolation of `pool`'s engines, whose processes run in `environ` plus the pool's `env`."""
    if pool.is_cpu:
        if plugin_loads(LORA_ISOLATION_PLUGIN, {**environ, **pool.env}):
            return BatchIsolation(True, f"vLLM's CPU LoRA ops, mended by the plugin {LORA_ISOLATION_PLUGIN}")
        return BatchIsolation(False, (
            f"vLLM's CPU LoRA ops serve a request without an adapter with the adapter in the engine's last slot, "
            f"and vLLM will not load the plugin {LORA_ISOLATION_PLUGIN} that mends them (the package is not "
            f"installed with its entry points, or {PLUGINS_ENV} leaves it out)"))
    if pool.accelerator.upper() in NVIDIA_ACCELERATORS:
        return BatchIsolation(True, "vLLM's Triton LoRA kernels skip a token without an adapter")
    return BatchIsolation(False, (
        f"vLLM's LoRA kernels on accelerator {pool.accelerator!r} have not been checked with requests "
        f"without an adapter in a batch with adapter requests (bench/lora_slot_repro.py checks them)"))


def unisolated_lora_pools(config: TrilemmaConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """The pools that serve adapters on engines not proven to isolate a base-model request in
    their batches, each with the reason: they take adapter requests only."""
    return {name: isolation.why for name, pool in config.pools.items()
            if pool.lora is not None and not (isolation := batch_isolation(pool, environ)).proven}


def adapter_only_pools(config: TrilemmaConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """`unisolated_lora_pools`, once the config is shown to need none of them for a base model:
    refuses a config in which a scenario's requests for a base model could only go to such pools,
    where no pool would take them."""
    unisolated = unisolated_lora_pools(config, environ)
    for scenario_name, scenario in config.scenarios.items():
        for model in scenario.models or config.models:
            pools = config.pools_serving(model, scenario)
            if pools and all(name in unisolated for name in pools):
                reasons = "; ".join(f"{name}: {unisolated[name]}" for name in pools)
                raise ConfigError(
                    f"scenarios.{scenario_name}: requests for model {model!r} without an adapter have only pools "
                    f"{pools}, which serve adapters on engines not proven to keep such a request off the adapters "
                    f"in its batch ({reasons}); give the scenario a pool of {model!r} without `lora`")
    return unisolated
