"""Adapters in the config: a pool's `lora` becomes vLLM's LoRA arguments, and every adapter names
a served base with a pool that serves adapters, under a name of its own."""

from __future__ import annotations

import pytest

from core.config import ConfigError, TrilemmaConfig
from pool.deployment import llm_config_for_pool
from tests.support import config_for_tests

MODEL = "SmolLM2-135M-Instruct"


def with_adapters(lora: dict | None = None, adapters: dict | None = None, **short: object) -> TrilemmaConfig:
    raw = config_for_tests().model_dump(mode="json")
    if lora is not None:
        raw["pools"]["short"]["lora"] = lora
    raw["pools"]["short"].update(short)
    raw["adapters"] = adapters if adapters is not None else {"tagged": {"base": MODEL, "source": "/a/tagged"}}
    return TrilemmaConfig.from_dict(raw)


def test_a_pools_lora_becomes_vllms_lora_arguments_with_the_cpu_cache_the_residency_bound():
    config = with_adapters({"max_loras": 2, "max_lora_rank": 32, "max_resident": 6})
    short = config.pools["short"]
    llm_config = llm_config_for_pool("short", short, config.pool_model("short"), "/models/smol")
    lora_kwargs = ("enable_lora", "max_loras", "max_lora_rank", "max_cpu_loras")
    assert {key: llm_config.engine_kwargs[key] for key in lora_kwargs} == \
        {"enable_lora": True, "max_loras": 2, "max_lora_rank": 32, "max_cpu_loras": 6}
    assert "enable_lora" not in llm_config_for_pool("long", config.pools["long"], config.pool_model("long"),
                                                     "/models/smol").engine_kwargs


def test_adapters_of_a_pool_are_those_of_its_model_where_it_sets_lora():
    config = with_adapters({})
    assert list(config.adapters_of_pool("short")) == ["tagged"] and config.adapters_of_pool("long") == {}
    assert config.pools_serving(MODEL, adapters=True) == ["short"]


@pytest.mark.parametrize("lora, adapters, short, message", [
    ({"max_lora_rank": 12}, None, {}, "max_lora_rank"),
    ({"max_loras": 8, "max_resident": 4}, None, {}, "lora.max_resident (4) must be at least lora.max_loras (8)"),
    (None, None, {}, "no pool serving its base 'SmolLM2-135M-Instruct' sets `lora`"),
    ({}, {"tagged": {"base": "gpt-4", "source": "/a"}}, {}, "adapters.tagged.base 'gpt-4' is not a model"),
    ({}, {MODEL: {"base": MODEL, "source": "/a"}}, {}, "the name is a model's name"),
    ({}, {"base": {"base": MODEL, "source": "/a"}}, {}, "the label of requests without an adapter"),
    ({}, {"tagged": {"base": MODEL, "source": "/a", "rank": 8}}, {}, "rank"),   # unknown keys are refused
    ({}, None, {"engine_kwargs": {"enable_lora": True}}, "engine_kwargs must not set ['enable_lora']"),
    ({}, None, {"engine_kwargs": {"runner": "pooling"}}, "this pool's engine embeds"),
])
def test_a_config_that_cannot_serve_its_adapters_is_refused_with_the_reason(lora, adapters, short, message):
    with pytest.raises(ConfigError) as refused:
        with_adapters(lora, adapters, **short)
    assert message in str(refused.value)
