"""`quantization: w8a8-int8`: the int8 checkpoint derived from a model's own folder."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from core.int8_checkpoint import QUANTIZATION_CONFIG, prepare_w8a8_int8, write_w8a8_int8


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=128, tie_word_embeddings=True)
    folder = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(config).save_pretrained(folder)
    (folder / "tokenizer.json").write_text("{}")
    return folder


def test_every_block_linear_is_int8_with_a_scale_per_output_channel(tiny_llama, tmp_path):
    out = tmp_path / "int8"
    write_w8a8_int8(tiny_llama, out)
    before, after = load_file(tiny_llama / "model.safetensors"), load_file(out / "model.safetensors")
    linears = [name for name in before if name.endswith("_proj.weight")]
    assert len(linears) == 2 * 7
    for name in linears:
        weight, scale = after[name], after[name.removesuffix("weight") + "weight_scale"]
        assert weight.dtype == torch.int8 and scale.shape == (before[name].shape[0], 1)
        # Round to nearest: no weight moves by more than half its channel's step.
        error = (weight.float() * scale - before[name].float()).abs()
        assert (error <= scale / 2 + 1e-6).all()
        assert weight.abs().amax(dim=1).eq(127).all()  # each channel's largest weight uses the range
    # Embeddings and norms as they were.
    assert torch.equal(after["model.embed_tokens.weight"], before["model.embed_tokens.weight"])
    assert torch.equal(after["model.norm.weight"], before["model.norm.weight"])
    config = json.loads((out / "config.json").read_text())
    assert config["quantization_config"] == QUANTIZATION_CONFIG and config["hidden_size"] == 64
    assert (out / "tokenizer.json").exists()


def test_the_derived_folder_is_made_once_and_a_quantized_source_is_refused(tiny_llama, tmp_path):
    first = prepare_w8a8_int8(tiny_llama, tmp_path)
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert prepare_w8a8_int8(tiny_llama, tmp_path) == first
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp
    with pytest.raises(ValueError, match="quantized already"):
        write_w8a8_int8(first, tmp_path / "again")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="no safetensors"):
        write_w8a8_int8(empty, tmp_path / "none")
