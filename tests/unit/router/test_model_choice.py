"""Models per pool: which model a request gets, the pools that serve it, and configs that cannot work."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from core.config import ConfigError, TrilemmaConfig
from core.errors import ApiError
from router.model_choice import ModelChoice, ModelPick
from router.pool_choice import PoolChooser, PoolRequest
from router.pool_health import PoolHealth
from router.routing import RoutingPolicy


def raw_config(**scenario_models: list[str] | None) -> dict[str, Any]:
    """Real-time chat on a small model, batch on a large one, and the large one in fp8 for cost."""
    def pool(role: str, model: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
        return {"role": role, "max_model_len": 2048 if role == "short" else 8192, "max_num_seqs": 4,
                **({"model": model} if model else {}), **extra}

    return {
        "model": {"name": "big", "source": "/models/big"},
        "pools": {
            "chat": pool("short", {"name": "small", "source": "/models/small"}),
            "batch": pool("long"),
            "batch-fp8": pool("long", quantization="fp8"),
        },
        "scenarios": {
            "chat": {"priority": 0, "models": scenario_models.get("chat", ["small"])},
            "quality": {"priority": 1, "unquantized_only": True, "models": scenario_models.get("quality")},
            "cost": {"priority": 2, "pools": ["batch-fp8"], "models": scenario_models.get("cost")},
            "closed": {"priority": 3, "pools": []},
        },
    }


CONFIG = TrilemmaConfig.from_dict(raw_config())
MODELS = ModelChoice(CONFIG)


def test_every_public_name_is_served_once_with_the_apps_model_as_default():
    assert list(CONFIG.models) == ["small", "big"] and CONFIG.default_model == "big"
    assert CONFIG.pools_serving("big") == ["batch", "batch-fp8"]
    assert CONFIG.pools_serving("big", CONFIG.scenarios["quality"]) == ["batch"]  # unquantized only


@pytest.mark.parametrize("scenario, requested, expected", [
    ("chat", None, "small"),       # the scenario's first model
    ("chat", "small", "small"),
    ("quality", None, "big"),      # no list: the app's default first
    ("quality", "small", "small"),  # any model one of its pools serves
    ("cost", None, "big"),         # its one pool serves the large model
    ("closed", None, "big"),       # no pool at all: the pool choice refuses it
])
def test_a_request_gets_the_model_it_names_or_its_scenarios_first(scenario, requested, expected):
    assert MODELS.resolve(requested, scenario, CONFIG.scenarios[scenario]) == expected


@pytest.mark.parametrize("scenario, requested, status, code, message", [
    ("chat", "gpt-4", 404, "model_not_found", "model 'gpt-4' does not exist; this server serves models ['small', 'big']"),
    ("chat", "big", 400, "model_not_allowed", "model 'big' is not served to scenario 'chat'; its models: ['small']"),
    ("cost", "small", 400, "model_not_allowed", "its models: ['big']"),
])
def test_a_model_the_scenario_does_not_serve_is_refused_with_the_ones_it_does(scenario, requested, status, code, message):
    with pytest.raises(ApiError) as caught:
        MODELS.resolve(requested, scenario, CONFIG.scenarios[scenario])
    assert caught.value.status == status and caught.value.code == code
    assert message in caught.value.message


def choose(model: str, scenario: str, prompt_tokens: int = 10, pinned: str | None = None):
    policy = RoutingPolicy.from_config(CONFIG.routing, {"chat": 2.0, "batch": 3.0, "batch-fp8": 1.0})
    choice = PoolChooser(CONFIG, policy, PoolHealth({name: None for name in CONFIG.pools}))
    return choice.choose(PoolRequest(scenario_name=scenario, scenario=CONFIG.scenarios[scenario], model=model,
                                     prompt_tokens=prompt_tokens, max_tokens=64, pinned_pool=pinned))


def test_only_the_pools_of_the_requests_model_are_candidates():
    # A short request for the large model goes to its long pool: the short pool serves another model.
    assert choose("big", "quality").pool == "batch"
    assert choose("small", "chat").pool == "chat"
    assert choose("big", "cost").pool == "batch-fp8"


@pytest.mark.parametrize("model, scenario, pinned, tokens, status, code, message", [
    ("small", "chat", "batch", 10, 400, "pool_model_mismatch", "pool 'batch', which serves model 'big', not 'small'"),
    # The limit is the largest pool of the request's model, not of the app.
    ("small", "chat", None, 2000, 400, "context_length_exceeded",
     "over the largest pool's max_model_len of 2048 (model 'small' in scenario 'chat')"),
    ("big", "chat", None, 9000, 400, "context_length_exceeded", "max_model_len of 8192 (model 'big'"),
    ("big", "closed", None, 10, 503, "no_provider", "no inference provider configured for scenario closed"),
])
def test_no_pool_for_the_model_says_why(model, scenario, pinned, tokens, status, code, message):
    with pytest.raises(ApiError) as caught:
        choose(model, scenario, prompt_tokens=tokens, pinned=pinned)
    assert caught.value.status == status and caught.value.code == code and message in caught.value.message


def test_a_pinned_pool_gives_its_model_to_a_request_that_names_none():
    assert MODELS.resolve(None, "quality", CONFIG.scenarios["quality"], pinned_pool="chat") == "small"
    with pytest.raises(ApiError, match="is not served to scenario 'chat'"):
        MODELS.resolve(None, "chat", CONFIG.scenarios["chat"], pinned_pool="batch")


def test_a_scenario_cannot_list_no_model():
    with pytest.raises(ConfigError, match="scenarios.chat.models"):
        TrilemmaConfig.from_dict(raw_config(chat=[]))


def test_one_public_name_for_two_sources_is_refused():
    raw = raw_config()
    raw["pools"]["batch-fp8"]["model"] = {"name": "big", "source": "/models/other"}
    with pytest.raises(ConfigError, match="pools batch and batch-fp8 both serve model 'big' but load different sources"):
        TrilemmaConfig.from_dict(raw)


@pytest.mark.parametrize("scenario_models, message", [
    ({"chat": ["tiny"]}, "scenarios.chat.models names model 'tiny', which no pool serves; served: ['big', 'small']"),
    ({"cost": ["small"]}, "scenarios.cost.models names model 'small', but none of the pools serving it (['chat'])"),
])
def test_a_scenario_naming_a_model_it_cannot_reach_is_refused(scenario_models, message):
    with pytest.raises(ConfigError) as caught:
        TrilemmaConfig.from_dict(raw_config(**scenario_models))
    assert message in str(caught.value)


def adapter_models() -> tuple[TrilemmaConfig, ModelChoice]:
    """An adapter of the large model, served by its full-precision batch pool only."""
    raw = raw_config()
    raw["pools"]["batch"]["lora"] = {}
    raw["adapters"] = {"legal": {"base": "big", "source": "/adapters/legal"}}
    config = TrilemmaConfig.from_dict(raw)
    return config, ModelChoice(config)


def test_an_adapters_name_picks_its_base_with_the_adapter():
    config, models = adapter_models()
    assert models.pick("legal", "quality", config.scenarios["quality"]) == ModelPick("big", "legal")
    assert models.pick("big", "quality", config.scenarios["quality"]) == ModelPick("big")


def test_an_unknown_name_lists_the_models_and_the_adapters():
    config, models = adapter_models()
    with pytest.raises(ApiError) as caught:
        models.pick("legal-v2", "quality", config.scenarios["quality"])
    assert caught.value.status == 404
    assert caught.value.message == ("model 'legal-v2' does not exist; this server serves models ['small', 'big'] "
                                    "and adapters ['legal']")


def test_an_adapter_whose_lora_pools_the_scenario_may_not_use_is_a_400():
    config, models = adapter_models()  # cost may use batch-fp8 alone, which sets no lora
    with pytest.raises(ApiError) as caught:
        models.pick("legal", "cost", config.scenarios["cost"])
    assert caught.value.status == 400 and "none of the pools it may use for 'big' sets `lora`" in caught.value.message


PRICES = {"chat": 2.0, "batch": 3.0, "batch-fp8": 1.0, "batch-2": 3.0}


def chooser_of(config: TrilemmaConfig, down: tuple[str, ...] = (), adapter_only: dict[str, str] | None = None,
               **prices: float) -> PoolChooser:
    policy = RoutingPolicy.from_config(config.routing, {**PRICES, **prices})
    health = PoolHealth({name: None for name in config.pools})
    for name in down:
        health.failed(name, "its replica died")
    return PoolChooser(config, policy, health, adapter_only)


def big_request(config: TrilemmaConfig, adapter: str | None = None) -> PoolRequest:
    return PoolRequest(scenario_name="any", scenario=config.scenarios["any"], model="big", prompt_tokens=3000,
                       max_tokens=64, adapter=adapter)


def twins_config(**batch_twin: Any) -> TrilemmaConfig:
    """batch (long, lora) and its twin batch-2 (long, no lora), both serving `big` to scenario `any`."""
    raw = raw_config()
    raw["pools"]["batch"]["lora"] = {}
    raw["pools"]["batch-2"] = {**raw["pools"]["batch"], "lora": None, **batch_twin}
    raw["scenarios"]["any"] = {"priority": 1, "models": ["big"]}
    raw["adapters"] = {"legal": {"base": "big", "source": "/adapters/legal"}}
    return TrilemmaConfig.from_dict(raw)


def test_a_base_request_takes_the_lora_pools_twin_and_an_adapter_request_the_lora_pool():
    config = twins_config()
    base = chooser_of(config).choose(big_request(config))
    assert base.pool == "batch-2"
    assert base.reason.endswith("; base model: 'batch-2' in place of 'batch', which serves adapters (`lora`), "
                                "so the request stays out of their batches")
    assert chooser_of(config).choose(big_request(config, adapter="legal")).pool == "batch"
    # With the twin down, the base request goes where the policy sends it.
    fallback = chooser_of(config, down=("batch-2",)).choose(big_request(config))
    assert fallback.pool == "batch" and "in place of" not in fallback.reason


@pytest.mark.parametrize("twin", [{"quantization": "fp8"}, {"role": "short", "max_model_len": 8192},
                                  {"max_model_len": 2048}], ids=["other-precision", "other-role", "too-short"])
def test_a_pool_that_differs_is_no_twin(twin):
    config = twins_config(**twin)
    decision = chooser_of(config).choose(big_request(config))
    assert decision.pool == "batch" and "in place of" not in decision.reason


def test_a_pricier_pool_is_no_twin():
    config = twins_config()
    assert chooser_of(config, **{"batch-2": 4.0}).choose(big_request(config)).pool == "batch"


def test_without_lora_pools_the_choice_and_its_reason_are_the_policys():
    raw = raw_config()
    raw["scenarios"]["any"] = {"priority": 1, "models": ["big"]}
    config = TrilemmaConfig.from_dict(raw)
    decision = chooser_of(config).choose(big_request(config))
    assert decision.pool == "batch" and "in place of" not in decision.reason


UNPROVEN = {"batch": "its LoRA kernels are not proven"}


def test_an_adapter_only_pool_never_takes_a_base_request():
    """Where the lora pool's engines are not proven to isolate a base request, its twin is no
    preference but the only pool: with the twin down the request waits for it (503), and a pin
    to the lora pool is refused with the reason."""
    config = twins_config()
    pricier_twin = {"batch-2": 4.0}  # no twin by the preference's rule
    assert chooser_of(config, **pricier_twin).choose(big_request(config)).pool == "batch"
    # The policy's pick among the pools without lora: batch-fp8 before batch-2, in the config's order.
    base = chooser_of(config, adapter_only=UNPROVEN, **pricier_twin).choose(big_request(config))
    assert base.pool == "batch-fp8" and "in place of" not in base.reason
    assert chooser_of(config, adapter_only=UNPROVEN).choose(big_request(config, adapter="legal")).pool == "batch"
    with pytest.raises(ApiError) as caught:
        chooser_of(config, down=("batch-2", "batch-fp8"), adapter_only=UNPROVEN).choose(big_request(config))
    assert caught.value.status == 503 and caught.value.code == "pool_unavailable"
    pinned = dataclasses.replace(big_request(config), pinned_pool="batch")
    with pytest.raises(ApiError) as caught:
        chooser_of(config, adapter_only=UNPROVEN).choose(pinned)
    assert caught.value.status == 400 and caught.value.code == "pool_model_mismatch"
    assert caught.value.message.endswith("serves adapter requests only, for model 'big' without an adapter: "
                                         "its LoRA kernels are not proven")
    assert chooser_of(config).choose(pinned).pool == "batch"  # proven: the pin stands
