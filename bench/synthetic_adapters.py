"""LoRA adapters of random weights in peft's layout, shaped for any Llama-style base config: the
adapters the checks are tested on and the committed broken fixtures, made in milliseconds
without training."""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

from core.adapter_files import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    AdapterRefused,
    BaseShapes,
    inspect_adapter,
    refuse_over_rank,
)

# Shapes of the embedded SmolLM2-135M-Instruct's config.json, the base of the committed adapters.
SMOLLM2_135M_SHAPE = {"hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9,
                      "num_key_value_heads": 3, "head_dim": 64, "intermediate_size": 1536}
# The max_lora_rank of the pool the rank-64 fixture is refused by (vLLM allows 8, 16, 32, ...).
BAD_FIXTURE_MAX_RANK = 16


def lora_tensors(base_config: Mapping[str, Any], rank: int, modules: Sequence[str], layers: Sequence[int],
                 seed: int = 0, dtype: str = "float16") -> dict[str, np.ndarray]:
    """peft's tensor names and shapes (lora_A [r, inputs], lora_B [outputs, r]) for `modules` of
    `layers`, filled with small random numbers."""
    shapes = BaseShapes.from_config(base_config)
    rng = np.random.default_rng(seed)
    tensors = {}
    for layer in layers:
        for module in modules:
            block = "mlp" if module in ("gate_proj", "up_proj", "down_proj") else "self_attn"
            prefix = f"base_model.model.model.layers.{layer}.{block}.{module}"
            inputs, outputs = shapes.in_out(module)
            tensors[f"{prefix}.lora_A.weight"] = (rng.standard_normal((rank, inputs)) * 0.01).astype(dtype)
            tensors[f"{prefix}.lora_B.weight"] = (rng.standard_normal((outputs, rank)) * 0.01).astype(dtype)
    return tensors


def adapter_config(base_model: str, rank: int, alpha: float, modules: Sequence[str],
                   layers: Sequence[int] | None = None, **overrides: Any) -> dict[str, Any]:
    """An adapter_config.json as peft writes it, with only the fields vLLM and the checks read."""
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": base_model,
              "r": rank, "lora_alpha": alpha, "lora_dropout": 0.0, "bias": "none",
              "target_modules": list(modules), "layers_to_transform": list(layers) if layers is not None else None,
              "modules_to_save": None, "use_dora": False, "use_rslora": False}
    return {**config, **overrides}


def write_adapter(folder: Path, config: Mapping[str, Any], tensors: Mapping[str, np.ndarray]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    save_file(dict(tensors), str(folder / ADAPTER_WEIGHTS))
    return folder


def write_random_adapter(folder: Path, base_config: Mapping[str, Any], base_model: str, rank: int = 8,
                         modules: Sequence[str] = ("q_proj", "v_proj"), layers: Sequence[int] | None = None,
                         seed: int = 0, **config_overrides: Any) -> Path:
    """A well-formed adapter of `base_config`'s shapes (all its layers unless `layers` says)."""
    chosen = list(layers) if layers is not None else list(range(BaseShapes.from_config(base_config).layers))
    config = adapter_config(base_model, rank, 2 * rank, modules, layers, **config_overrides)
    return write_adapter(folder, config, lora_tensors(base_config, rank, modules, chosen, seed))


def write_bad_fixtures(folder: Path, base_config: Mapping[str, Any], base_model: str) -> dict[str, dict[str, str]]:
    """The broken adapters of `base_config`'s model under `folder`, each as small as its fault
    allows (fp16, layer 0 only), and what the adapter checks say of each (rank-64 against a
    pool's max_lora_rank of BAD_FIXTURE_MAX_RANK). Every one names `base_model` as its base:
    an adapter's own claim proves nothing, its shapes do."""
    own = BaseShapes.from_config(base_config)
    # Another base's numbers: a wider one (vLLM fails its copy only after registering the adapter)
    # and a narrower one (vLLM copies it into a corner of its buffers and serves it silently).
    larger = {**base_config, "hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 4,
              "head_dim": 64, "intermediate_size": 4096}
    smaller = {**base_config, "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 1,
               "head_dim": 64, "intermediate_size": 1024}
    assert own.hidden not in (1024, 256), "the wrong bases must differ from the real one"
    made = {
        "truncated": ("a good adapter whose adapter_model.safetensors stops halfway through its header",
                      lambda path: _truncate_header(write_random_adapter(path, base_config, base_model, layers=[0]))),
        "wrong-base-larger": ("q_proj and v_proj of a base with hidden_size 1024",
                              lambda path: write_random_adapter(path, larger, base_model, layers=[0])),
        "wrong-base-smaller": ("q_proj and v_proj of a base with hidden_size 256",
                               lambda path: write_random_adapter(path, smaller, base_model, layers=[0])),
        "rank-64": (f"rank 64 on q_proj, for a pool whose max_lora_rank is {BAD_FIXTURE_MAX_RANK}",
                    lambda path: write_random_adapter(path, base_config, base_model, rank=64, modules=("q_proj",),
                                                      layers=[0])),
    }
    fixtures = {}
    for name, (made_as, write) in made.items():
        shutil.rmtree(folder / name, ignore_errors=True)
        path = write(folder / name)
        try:
            refuse_over_rank(name, inspect_adapter(path, base_config, name=name), BAD_FIXTURE_MAX_RANK)
        except AdapterRefused as refusal:
            fixtures[name] = {"made_as": made_as, "refused_because": str(refusal)}
        else:
            raise AssertionError(f"the bad fixture {name} passes the adapter checks")
    return fixtures


def _truncate_header(folder: Path) -> Path:
    weights = folder / ADAPTER_WEIGHTS
    whole = weights.read_bytes()
    (header_length,) = struct.unpack("<Q", whole[:8])
    weights.write_bytes(whole[:8 + header_length // 2])
    return folder
