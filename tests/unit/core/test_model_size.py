"""Each pool's own model size: weights from the model's config in the pool's precision, and the
cluster plan holding every pool's GPU memory against its own model's weights."""

from __future__ import annotations

import json

import pytest

from cluster.plan import PlanError, choose_node_type
from cluster.pool_needs import PoolNeed, pool_needs
from core.config import TrilemmaConfig
from core.model_size import decoder_parameters, weights_gib
from tests.unit.cluster.test_cluster_plan import TYPES

# The Llama-3.1-8B shape with SmolLM2's vocabulary (the GPU benchmarks' model), and SmolLM2-135M.
LLAMA_8B_SHAPE = {"hidden_size": 4096, "num_hidden_layers": 32, "intermediate_size": 14336, "vocab_size": 49152,
                  "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "dtype": "bfloat16"}
SMOLLM2_135M = {"hidden_size": 576, "num_hidden_layers": 30, "intermediate_size": 1536, "vocab_size": 49152,
                "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64, "tie_word_embeddings": True,
                "dtype": "bfloat16"}


@pytest.mark.parametrize("config, quantization, dtype, expected_gib", [
    (LLAMA_8B_SHAPE, None, None, 13.75),       # what vLLM logged loading it on an H200: 13.75 GiB
    (LLAMA_8B_SHAPE, "fp8", None, 7.25),       # and in fp8: 7.28 GiB (with the scales)
    (SMOLLM2_135M, None, None, 0.25),
    (SMOLLM2_135M, None, "float32", 0.50),     # the CPU pools' fp32
    (SMOLLM2_135M, None, "auto", 0.25),        # vLLM's auto: the checkpoint's dtype
    (SMOLLM2_135M, None, "half", 0.25),
    ({**SMOLLM2_135M, "quantization_config": {"quant_method": "awq", "bits": 4}}, None, None, 0.11),
    ({**SMOLLM2_135M, "quantization_config": {"quant_method": "gptq", "bits": 4}}, "gptq", None, 0.11),
])
def test_weights_in_the_pools_precision(config, quantization, dtype, expected_gib):
    assert weights_gib(config, quantization, dtype) == pytest.approx(expected_gib, abs=0.01)


def test_a_shape_or_width_not_known_is_none_rather_than_a_guess():
    assert decoder_parameters({"model_type": "mamba", "d_model": 768}) is None
    assert decoder_parameters({**LLAMA_8B_SHAPE, "num_local_experts": 8}) is None  # a mixture of experts
    assert weights_gib(SMOLLM2_135M, "bitsandbytes") is None
    assert weights_gib({**SMOLLM2_135M, "quantization_config": {"quant_method": "compressed-tensors"}}) is None
    assert sum(decoder_parameters(SMOLLM2_135M)) == 134_515_008 - 576 * 61  # SmolLM2-135M, norms aside


def need(weights_gib: float, memory: float | None = None, gpus: float = 1.0, kv: float | None = None) -> PoolNeed:
    return PoolNeed(pool="long", accelerator="H100", gpus_per_replica=gpus, gpu_memory_gib=memory,
                    min_replicas=1, max_replicas=1, purchase="on_demand", model="big", weights_gib=weights_gib,
                    kv_cache_gib=kv)


def test_the_plan_skips_gpus_too_small_for_the_pools_own_weights():
    # 30 GiB of weights: the L4 (24 GiB) cannot hold them even where the pool's memory need would fit.
    choice = choose_node_type(need(30, memory=32), TYPES)
    assert choice.node_type.accelerator == "A100-40G" and "holding big's 30.0 GiB of weights" in choice.reason


@pytest.mark.parametrize("pool_need, message", [
    (need(30, memory=20), "pool long sets gpu_memory_gib 20, less than big's 30.0 GiB of weights take (30.0 GiB per GPU)"),
    (need(7.25, memory=30, kv=24), "less than big's 7.2 GiB of weights and its 24 GiB KV cache take (31.2 GiB per GPU)"),
    (need(50, gpus=0.5), "big's 50.0 GiB of weights take 50.0 GiB per GPU, more than its share of the largest fitting "
                         "GPU holds (H100: 40.0"),
])
def test_weights_that_cannot_fit_stop_the_plan_with_both_sizes(pool_need, message):
    with pytest.raises(PlanError) as caught:
        choose_node_type(pool_need, TYPES)
    assert message in str(caught.value)


def test_each_pool_is_counted_with_its_own_model(tmp_path):
    for name, shape in (("big", LLAMA_8B_SHAPE), ("small", SMOLLM2_135M)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(shape))
    pool = {"max_num_seqs": 8, "accelerator": "H100"}
    config = TrilemmaConfig.from_dict({
        "model": {"name": "big", "source": str(tmp_path / "big")},
        "pools": {"chat": {"role": "short", "max_model_len": 2048, **pool,
                           "model": {"name": "small", "source": str(tmp_path / "small")}},
                  "batch": {"role": "long", "max_model_len": 8192, **pool, "quantization": "fp8"},
                  "hub": {"role": "long", "max_model_len": 8192, **pool,
                          "model": {"name": "hub", "source": "org/model-on-the-hub"}}},
        "scenarios": {"chat": {"priority": 0}},
    })
    sizes = {need.pool: (need.model, need.weights_gib) for need in pool_needs(config)}
    assert sizes["chat"] == ("small", pytest.approx(0.25, abs=0.01))
    assert sizes["batch"] == ("big", pytest.approx(7.25, abs=0.01))
    assert sizes["hub"] == ("hub", None)  # nothing is fetched to plan
