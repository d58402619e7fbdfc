"""Builds the Ray Serve application: the router in front of one deployment per pool."""

from __future__ import annotations

import os
from typing import Any

from ray import serve
from ray.serve.config import BackpressureConfig
from ray.serve.deployment import Application

from autoscaling.serve_config import serve_autoscaling_config
from cluster.pricing import pool_rates, resolve_catalog
from core.config import DEFAULT_CONFIG_PATH, TrilemmaConfig
from core.lora_isolation import adapter_only_pools
from core.model_store import resolve_model_source
from core.upstream import to_model_metadata
from pool.deployment import build_pool_deployment, llm_config_for_pool
from router.http_api import router_ingress_class
from router.quality_ledger import QualityLedger
from router.tenants import TenantDirectory
from serve_app.deployment_versions import with_version, without_replica_counts


def build_app(
    config: TrilemmaConfig, *, engine_cls: type | None = None, model_source: str | None = None
) -> Application:
    """The whole online path. `model_source` stands in for every model's source (tests with a
    fake engine need no model weights, only a tokenizer)."""
    # Here, where the engines' environment is decided: pools whose engines may batch no request
    # without an adapter beside adapter requests take adapter requests only.
    adapter_only = adapter_only_pools(config, os.environ)
    sources = {spec.source: model_source or resolve_model_source(spec.source) for spec in config.models.values()}
    in_use = sorted({pool.accelerator for pool in config.pools.values()})
    rates = pool_rates(config, resolve_catalog(config.costs, in_use))
    prices = {name: rate.usd_per_hour for name, rate in rates.items()}
    llm_configs = {
        name: llm_config_for_pool(name, pool, config.pool_model(name), sources[config.pool_model(name).source],
                                  serve_autoscaling_config(config, name, prices),
                                  ongoing_limit=config.ongoing_limit(name), pool_slot=slot)
        for slot, (name, pool) in enumerate(config.pools.items())
    }
    pools = {
        name: with_version(
            build_pool_deployment(name, config.pools[name], llm_config, rates[name], engine_cls,
                                  max_in_engine_ceiling=config.max_in_engine_ceiling(name),
                                  adapters=config.adapters_of_pool(name), adapter_only=adapter_only.get(name)),
            without_replica_counts({"pools": {name: config.pools[name].model_dump(mode="json")}}),
            {name: adapter.model_dump(mode="json") for name, adapter in config.adapters_of_pool(name).items()},
            config.pool_model(name).model_dump(mode="json"), sources[config.pool_model(name).source],
            rates[name].model_dump(mode="json"), config.max_in_engine_ceiling(name), _qualname(engine_cls),
            adapter_only.get(name),
        )
        for name, llm_config in llm_configs.items()
    }
    # The default model first: clients that take the first model listed get the app's default.
    names = sorted(config.models, key=lambda name: name != config.default_model)
    model_cards = {name: to_model_metadata(name, llm_configs[config.pools_serving(name)[0]]) for name in names}
    # Each adapter after the models, a card of its base's with the base named as its parent (as vLLM lists them).
    for name, adapter in config.adapters.items():
        base = model_cards[adapter.base]
        model_cards[name] = base.model_copy(update={"id": name, "metadata": {**base.metadata, "parent": adapter.base}})
    tokenizer_sources = {name: sources[spec.source] for name, spec in config.models.items()}
    router = serve.deployment(
        router_ingress_class(config.router.max_body_bytes),
        name="router",
        num_replicas=config.router.replicas,
        max_ongoing_requests=config.router.max_ongoing_requests,
        # The proxy's own guard, before any router sees a request: a flood gets 429, not a hang.
        max_queued_requests=config.router.max_queued_requests,
        backpressure_config=BackpressureConfig(status_code=429, retry_after_s=config.router.retry_after_s),
        ray_actor_options={"num_cpus": config.router.num_cpus},
        graceful_shutdown_timeout_s=config.router.drain_timeout_s,
    )
    rates_dump = {name: rate.model_dump() for name, rate in rates.items()}
    # Read here, where the keys file and environment are the operator's; only hashes travel.
    directory = TenantDirectory.load(config.tenants.keys_file, config.tenants.keys_env)
    directory.check_adapters(config.adapters)
    tenants = {name: entry.model_dump() for name, entry in directory.entries.items()}
    # Read here too: the file is where the config's author ran the measurement.
    quality = QualityLedger.from_result(config.quality.results).to_dict() if config.quality.results else None
    return with_version(
        router.bind(pools=pools, model_cards=model_cards, config=config, tokenizer_sources=tokenizer_sources,
                    rates=rates_dump, tenants=tenants, quality=quality, adapter_only=adapter_only),
        without_replica_counts(config.model_dump(mode="json")), tokenizer_sources, rates_dump, tenants, quality,
        adapter_only,
    )


def _qualname(cls: type | None) -> str | None:
    return None if cls is None else f"{cls.__module__}.{cls.__qualname__}"


def app_builder(args: dict[str, Any]) -> Application:
    """Entry point of `serve run serve_app.app:app_builder [config=PATH]`."""
    unknown = sorted(set(args) - {"config"})
    if unknown:
        raise ValueError(f"unknown arguments {unknown}; the only one is config=PATH")
    return build_app(TrilemmaConfig.from_yaml(args.get("config", DEFAULT_CONFIG_PATH)))
