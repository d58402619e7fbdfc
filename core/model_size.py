"""How much memory a model's weights take in a pool's precision, from the model's config.json:
what each pool's GPU memory is held against when the cluster is planned."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

GIB = 1 << 30
# vLLM's names for them too (`half`, `float`); `auto` is the checkpoint's own.
BYTES_PER_DTYPE = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2}
# Bytes per weight of the quantized linear layers, by method, where the method fixes the width;
# embeddings keep the checkpoint's dtype. Other methods say their width in `bits`.
BYTES_PER_QUANTIZED_WEIGHT = {"fp8": 1.0, "w8a8-int8": 1.0}
_DECODER_KEYS = ("hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size", "num_attention_heads")
# A mixture of experts has all of a dense decoder's keys, and many times its MLP weights.
_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size")


def decoder_parameters(config: dict[str, Any]) -> tuple[int, int] | None:
    """(linear-layer parameters, embedding parameters) of a Llama-style decoder (Llama, Mistral,
    Qwen, SmolLM: attention with grouped KV heads, a gated MLP); None for another shape."""
    if not all(isinstance(config.get(key), int) for key in _DECODER_KEYS) or any(key in config for key in _EXPERT_KEYS):
        return None
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim  # q and o; k and v
    mlp = 3 * hidden * config["intermediate_size"]  # gate, up, down
    linear = config["num_hidden_layers"] * (attention + mlp)
    tables = 1 if config.get("tie_word_embeddings") else 2  # the input embedding and the LM head
    return linear, tables * config["vocab_size"] * hidden


def weights_gib(config: dict[str, Any], quantization: str | None = None, dtype: str | None = None) -> float | None:
    """The weights' size in GiB: embeddings in the model's dtype (or `dtype`), linear layers in
    `quantization`'s width where one is set. None where the shape or a width is not known."""
    counted = decoder_parameters(config)
    checkpoint_dtype = config.get("dtype") or config.get("torch_dtype") or "bfloat16"
    dtype_bytes = BYTES_PER_DTYPE.get(str(checkpoint_dtype if dtype in (None, "auto") else dtype))
    linear_bytes = quantized_width(config, quantization) if quantization or "quantization_config" in config \
        else dtype_bytes
    if counted is None or dtype_bytes is None or linear_bytes is None:
        return None
    linear, embeddings = counted
    return (linear * linear_bytes + embeddings * dtype_bytes) / GIB


def quantized_width(config: dict[str, Any], quantization: str | None) -> float | None:
    """Bytes per quantized weight: the pool's method where it fixes one, else the `bits` of the
    checkpoint's own quantization_config (a pre-quantized checkpoint); None when neither says."""
    if quantization in BYTES_PER_QUANTIZED_WEIGHT:
        return BYTES_PER_QUANTIZED_WEIGHT[quantization]
    own = config.get("quantization_config") or {}
    method = own.get("quant_method")
    if quantization not in (None, method):
        return None  # a method the checkpoint does not say the width of
    bits = own.get("bits") or own.get("w_bit")
    return bits / 8 if isinstance(bits, int) else BYTES_PER_QUANTIZED_WEIGHT.get(method)


def read_model_config(source: str) -> dict[str, Any] | None:
    """A local checkpoint folder's config.json; None for a hub id or a folder without one."""
    path = Path(source).expanduser() / "config.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
