"""The adapter checks (core/adapter_files.py) on tiny synthetic adapters: a good one is described,
and each fault is refused with a message that names the adapter and the fault, a base of smaller
dimensions (which vLLM would load silently) included."""

from __future__ import annotations

import json
import re
import struct

import numpy as np
import pytest

from bench.synthetic_adapters import adapter_config, lora_tensors, write_adapter, write_random_adapter
from core.adapter_files import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    AdapterFiles,
    AdapterRefused,
    BaseShapes,
    inspect_adapter,
    refuse_over_rank,
)

# q and o: 32 -> 32; k and v: 32 -> 16; gate and up: 32 -> 64; down: 64 -> 32.
BASE = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 8, "intermediate_size": 64}
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")


def refused(message: str):
    return pytest.raises(AdapterRefused, match=f"^{re.escape(message)}$")


def test_a_good_adapter_is_described(tmp_path):
    folder = write_random_adapter(tmp_path / "tagged", BASE, "tiny", rank=4, modules=ATTENTION)
    assert inspect_adapter(folder, BASE) == AdapterFiles(
        rank=4, alpha=8.0, target_modules=ATTENTION, tensors=2 * 4 * 2,
        bytes=(folder / ADAPTER_WEIGHTS).stat().st_size)


def test_the_mlp_modules_all_linear_and_a_regex_are_understood(tmp_path):
    mlp = ("gate_proj", "up_proj", "down_proj")
    folder = write_random_adapter(tmp_path / "mlp", BASE, "tiny", rank=8, modules=mlp, target_modules="all-linear")
    assert inspect_adapter(folder, BASE).target_modules == ATTENTION + mlp
    folder = write_random_adapter(tmp_path / "qv", BASE, "tiny", modules=("q_proj", "v_proj"),
                                  target_modules=r".*\.(q|v)_proj")
    assert inspect_adapter(folder, BASE, name="qv").target_modules == ("q_proj", "v_proj")
    # peft writes its target list from a set: any order reads as the base's.
    folder = write_random_adapter(tmp_path / "shuffled", BASE, "tiny", modules=ATTENTION,
                                  target_modules=["o_proj", "k_proj", "q_proj", "v_proj"])
    assert inspect_adapter(folder, BASE).target_modules == ATTENTION


def test_a_rank_over_the_pools_max_is_refused(tmp_path):
    folder = write_random_adapter(tmp_path / "wide", BASE, "tiny", rank=64, modules=("q_proj",), layers=[0])
    adapter = inspect_adapter(folder, BASE, name="tagged")
    refuse_over_rank("tagged", adapter, max_lora_rank=64)
    with refused("adapter 'tagged': rank 64 is over the pool's lora.max_lora_rank 16"):
        refuse_over_rank("tagged", adapter, max_lora_rank=16)


def test_missing_files_are_named(tmp_path):
    with refused("adapter 'gone': its folder is missing"):
        inspect_adapter(tmp_path / "gone", BASE)
    folder = write_random_adapter(tmp_path / "tagged", BASE, "tiny")
    (folder / ADAPTER_WEIGHTS).unlink()
    with refused("adapter 'tagged': adapter_model.safetensors is missing"):
        inspect_adapter(folder, BASE)
    (folder / ADAPTER_CONFIG).unlink()
    with refused("adapter 'tagged': adapter_config.json is missing"):
        inspect_adapter(folder, BASE)


def test_a_config_that_is_not_json_is_refused(tmp_path):
    folder = write_random_adapter(tmp_path / "tagged", BASE, "tiny")
    (folder / ADAPTER_CONFIG).write_text("{r: 8")
    with pytest.raises(AdapterRefused, match=r"^adapter 'tagged': adapter_config.json is not JSON \("):
        inspect_adapter(folder, BASE)


def test_a_truncated_header_is_caught_without_loading_weights(tmp_path):
    folder = write_random_adapter(tmp_path / "tagged", BASE, "tiny")
    weights = folder / ADAPTER_WEIGHTS
    weights.write_bytes(weights.read_bytes()[:40])
    with refused("adapter 'tagged': adapter_model.safetensors is not a safetensors file (truncated header)"):
        inspect_adapter(folder, BASE)
    weights.write_bytes(b"\x01\x02")
    with refused("adapter 'tagged': adapter_model.safetensors is not a safetensors file (truncated header)"):
        inspect_adapter(folder, BASE)


def test_truncated_data_and_a_garbage_header_are_caught(tmp_path):
    folder = write_random_adapter(tmp_path / "tagged", BASE, "tiny")
    weights = folder / ADAPTER_WEIGHTS
    whole = weights.read_bytes()
    weights.write_bytes(whole[:-10])
    with pytest.raises(AdapterRefused, match=r"not a safetensors file \(truncated data: the header describes \d+ "
                                             r"bytes, the file holds \d+\)$"):
        inspect_adapter(folder, BASE)
    weights.write_bytes(whole + b"extra")
    with refused("adapter 'tagged': adapter_model.safetensors is not a safetensors file "
                 "(5 bytes after the last tensor)"):
        inspect_adapter(folder, BASE)
    weights.write_bytes(struct.pack("<Q", 4) + b"\xff\xfe{}")
    with refused("adapter 'tagged': adapter_model.safetensors is not a safetensors file (header is not JSON)"):
        inspect_adapter(folder, BASE)
    weights.write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    with refused("adapter 'tagged': adapter_model.safetensors is not a safetensors file "
                 f"(header length {1 << 40} is implausible)"):
        inspect_adapter(folder, BASE)


def test_a_larger_base_is_refused(tmp_path):
    larger = {**BASE, "hidden_size": 64, "num_attention_heads": 8}
    folder = write_random_adapter(tmp_path / "tagged", larger, "other", rank=4, modules=("q_proj",), layers=[1])
    with refused("adapter 'tagged': layers.1.self_attn.q_proj.lora_A has shape [4, 64], the base's q_proj has "
                 "32 inputs: the adapter was made for another base model"):
        inspect_adapter(folder, BASE)


def test_a_smaller_base_which_vllm_would_load_silently_is_refused(tmp_path):
    smaller = {**BASE, "hidden_size": 16, "num_attention_heads": 2, "intermediate_size": 32}
    folder = write_random_adapter(tmp_path / "tagged", smaller, "other", rank=4, modules=("down_proj",), layers=[0])
    with refused("adapter 'tagged': layers.0.mlp.down_proj.lora_A has shape [4, 32], the base's down_proj has "
                 "64 inputs: the adapter was made for another base model"):
        inspect_adapter(folder, BASE)


def test_outputs_of_another_base_are_refused_on_lora_b(tmp_path):
    # The same hidden size, more heads: lora_A fits, lora_B does not.
    more_heads = {**BASE, "num_attention_heads": 8}
    folder = write_random_adapter(tmp_path / "tagged", more_heads, "other", rank=8, modules=("q_proj",), layers=[0])
    with refused("adapter 'tagged': layers.0.self_attn.q_proj.lora_B has shape [64, 8], the base's q_proj has "
                 "32 outputs: the adapter was made for another base model"):
        inspect_adapter(folder, BASE)


def test_a_layer_the_base_lacks_is_refused(tmp_path):
    deeper = {**BASE, "num_hidden_layers": 4}
    folder = write_random_adapter(tmp_path / "tagged", deeper, "other", modules=("v_proj",), layers=[3])
    with refused("adapter 'tagged': layers.3.self_attn.v_proj.lora_A is for layer 3, the base has 2 layers: "
                 "the adapter was made for another base model"):
        inspect_adapter(folder, BASE)


def test_a_target_the_base_lacks_is_refused(tmp_path):
    folder = write_random_adapter(tmp_path / "tagged", BASE, "tiny", target_modules=["q_proj", "gate_proj_x"])
    with refused("adapter 'tagged': targets gate_proj_x, which the base has no module named"):
        inspect_adapter(folder, BASE)


@pytest.mark.parametrize("override, reason", [
    ({"bias": "all"}, "bias 'all' is not supported (vLLM serves bias 'none')"),
    ({"use_dora": True}, "DoRA is not supported (vLLM serves plain LoRA)"),
    ({"modules_to_save": ["lm_head"]}, "modules_to_save is not supported (vLLM serves only the LoRA matrices)"),
    ({"rank_pattern": {"q_proj": 4}}, "rank_pattern is not supported (vLLM scales every module by lora_alpha / r)"),
    ({"peft_type": "IA3"}, "peft_type 'IA3' is not supported (vLLM serves LORA)"),
    ({"r": 0}, "adapter_config.json has r 0, not a positive integer"),
    ({"lora_alpha": "16"}, "adapter_config.json has lora_alpha '16', not a number"),
    ({"target_modules": []}, "adapter_config.json has target_modules [], not a list of module names"),
])
def test_settings_vllm_would_not_serve_as_written_are_refused(tmp_path, override, reason):
    folder = write_random_adapter(tmp_path / "tagged", BASE, "tiny", **override)
    with refused(f"adapter 'tagged': {reason}"):
        inspect_adapter(folder, BASE)


def test_a_rank_other_than_the_configs_is_refused(tmp_path):
    folder = write_adapter(tmp_path / "tagged", adapter_config("tiny", 8, 16, ["q_proj"]),
                           lora_tensors(BASE, 4, ["q_proj"], [0]))
    with refused("adapter 'tagged': layers.0.self_attn.q_proj.lora_A has shape [4, 32], of rank 4, "
                 "but adapter_config.json says r 8"):
        inspect_adapter(folder, BASE)


def test_half_a_pair_a_stray_tensor_and_an_untargeted_module_are_refused(tmp_path):
    tensors = lora_tensors(BASE, 8, ["q_proj"], [0])
    del tensors["base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"]
    folder = write_adapter(tmp_path / "half", adapter_config("tiny", 8, 16, ["q_proj"]), tensors)
    with refused("adapter 'half': layers.0.self_attn.q_proj has lora_A but no lora_B"):
        inspect_adapter(folder, BASE)
    stray = {**lora_tensors(BASE, 8, ["q_proj"], [0]), "base_model.model.lm_head.weight": np.zeros((2, 2), "float16")}
    folder = write_adapter(tmp_path / "stray", adapter_config("tiny", 8, 16, ["q_proj"]), stray)
    with refused("adapter 'stray': tensor 'base_model.model.lm_head.weight' is not a lora_A or lora_B weight "
                 "of a decoder layer"):
        inspect_adapter(folder, BASE)
    folder = write_adapter(tmp_path / "untargeted", adapter_config("tiny", 8, 16, ["q_proj"]),
                           lora_tensors(BASE, 8, ["k_proj"], [0]))
    with refused("adapter 'untargeted': layers.0.self_attn.k_proj.lora_A is for k_proj, which "
                 "adapter_config.json's target_modules does not name"):
        inspect_adapter(folder, BASE)


def test_a_base_config_of_another_shape_is_named(tmp_path):
    folder = write_random_adapter(tmp_path / "tagged", BASE, "tiny")
    with refused("adapter 'tagged': the base's config.json has no integer hidden_size, intermediate_size: "
                 "not a Llama-style decoder"):
        inspect_adapter(folder, {"model_type": "mamba", "num_hidden_layers": 2, "num_attention_heads": 4})


def test_head_dim_and_kv_heads_default_as_in_transformers():
    shapes = BaseShapes.from_config({"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
                                     "intermediate_size": 64})
    assert (shapes.kv_heads, shapes.head_dim) == (4, 8)
    assert shapes.in_out("k_proj") == (32, 32)
    nested = BaseShapes.from_config({"model_type": "llava", "text_config": BASE})
    assert nested.in_out("v_proj") == (32, 16)


def test_the_header_is_read_alone(tmp_path):
    """The checks read 8 bytes and the header, not the weights: a file whose data is all zeros
    passes as long as its header describes it."""
    header = json.dumps({"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight":
                         {"dtype": "F32", "shape": [8, 32], "data_offsets": [0, 1024]},
                         "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight":
                         {"dtype": "F32", "shape": [32, 8], "data_offsets": [1024, 2048]}}).encode()
    folder = tmp_path / "zeros"
    folder.mkdir()
    (folder / ADAPTER_CONFIG).write_text(json.dumps(adapter_config("tiny", 8, 16, ["q_proj"])))
    (folder / ADAPTER_WEIGHTS).write_bytes(struct.pack("<Q", len(header)) + header + bytes(2048))
    assert inspect_adapter(folder, BASE).tensors == 2
