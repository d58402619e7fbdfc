"""Checks a LoRA adapter folder (peft's layout: adapter_config.json and adapter_model.safetensors)
against its base model's config.json before any engine loads it.

vLLM refuses some bad adapters only after it has half-registered them, and loads one made for a
smaller base silently (its slice copies fit), so every check it lacks is made here, from the
config and the safetensors header alone: cheap, no weights read, no torch.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
# The linear modules of a Llama-style decoder layer, the ones vLLM applies LoRA to.
LINEAR_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# safetensors itself refuses headers over 100 MB; a larger length is a corrupt file, not a header.
MAX_HEADER_BYTES = 100_000_000
# Bytes per element of the floating-point dtypes a LoRA weight may have; vLLM casts them to its own.
FLOAT_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2}
# `...layers.3.self_attn.q_proj.lora_A.weight`, with whatever prefix peft wrote before `layers`.
_LORA_TENSOR = re.compile(r"(?:.*\.)?(layers\.(\d+)\.(?:.+\.)?(\w+))\.lora_([AB])\.weight")
_ANOTHER_BASE = "the adapter was made for another base model"


class AdapterRefused(ValueError):
    """An adapter that must not reach an engine; the message names the adapter and the reason."""

    def __init__(self, adapter: str, reason: str):
        super().__init__(f"adapter '{adapter}': {reason}")
        self.adapter = adapter
        self.reason = reason


class AdapterOverRank(AdapterRefused):
    """An adapter of a higher rank than the pool's engines take: a request for it is refused with 400."""


@dataclass(frozen=True)
class AdapterFiles:
    """What an accepted adapter is: its rank and scaling, the modules it changes, and its size."""

    rank: int
    alpha: float
    target_modules: tuple[str, ...]  # in LINEAR_MODULES' order
    tensors: int
    bytes: int  # of adapter_model.safetensors on disk


@dataclass(frozen=True)
class BaseShapes:
    """The dimensions of a Llama-style base that an adapter's matrices must match."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> BaseShapes:
        # A multimodal model keeps its decoder's numbers under text_config.
        if "hidden_size" not in config and isinstance(config.get("text_config"), Mapping):
            config = config["text_config"]
        required = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
        missing = [key for key in required if not isinstance(config.get(key), int)]
        if missing:
            raise ValueError(f"the base's config.json has no integer {', '.join(missing)}: not a Llama-style decoder")
        hidden, heads = config["hidden_size"], config["num_attention_heads"]
        return cls(hidden=hidden, layers=config["num_hidden_layers"], heads=heads,
                   kv_heads=config.get("num_key_value_heads") or heads,
                   head_dim=config.get("head_dim") or hidden // heads,
                   intermediate=config["intermediate_size"])

    def in_out(self, module: str) -> tuple[int, int]:
        """(inputs, outputs) of one of LINEAR_MODULES."""
        attention, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return {"q_proj": (self.hidden, attention), "k_proj": (self.hidden, kv), "v_proj": (self.hidden, kv),
                "o_proj": (attention, self.hidden), "gate_proj": (self.hidden, self.intermediate),
                "up_proj": (self.hidden, self.intermediate), "down_proj": (self.intermediate, self.hidden)}[module]


def inspect_adapter(folder: Path, base_config: Mapping[str, Any], name: str | None = None) -> AdapterFiles:
    """The adapter in `folder` if its files fit the base `base_config` (a parsed config.json);
    raises AdapterRefused naming `name` (the folder's name by default) and the first fault."""
    name = name or folder.name
    try:
        base = BaseShapes.from_config(base_config)
    except ValueError as error:
        raise AdapterRefused(name, str(error)) from None
    if not folder.is_dir():
        raise AdapterRefused(name, "its folder is missing")
    config = _read_adapter_config(folder, name)
    rank, alpha, targets = _lora_settings(config, name)
    header = read_safetensors_header(folder / ADAPTER_WEIGHTS, name)
    tensors = {key: value for key, value in header.items() if key != "__metadata__"}
    _check_tensors(tensors, base, rank, targets, name)
    return AdapterFiles(rank=rank, alpha=alpha, target_modules=targets, tensors=len(tensors),
                        bytes=(folder / ADAPTER_WEIGHTS).stat().st_size)


def refuse_over_rank(name: str, adapter: AdapterFiles, max_lora_rank: int) -> None:
    """Refuses an adapter whose rank a pool's engine would refuse: vLLM answers that with a bare
    500 at load time, so the router says it first, naming both numbers."""
    if adapter.rank > max_lora_rank:
        raise AdapterOverRank(name, f"rank {adapter.rank} is over the pool's lora.max_lora_rank {max_lora_rank}")


def read_safetensors_header(path: Path, name: str) -> dict[str, Any]:
    """The header of a safetensors file (an 8-byte little-endian length, then that much JSON),
    checked to describe the file's bytes exactly, so a truncated or corrupt file is caught
    without reading a weight."""
    if not path.is_file():
        raise AdapterRefused(name, f"{ADAPTER_WEIGHTS} is missing")
    size = path.stat().st_size

    def corrupt(why: str) -> AdapterRefused:
        return AdapterRefused(name, f"{ADAPTER_WEIGHTS} is not a safetensors file ({why})")

    with path.open("rb") as weights:
        if size < 8:
            raise corrupt("truncated header")
        (length,) = struct.unpack("<Q", weights.read(8))
        if length > MAX_HEADER_BYTES:
            raise corrupt(f"header length {length} is implausible")
        if 8 + length > size:
            raise corrupt("truncated header")
        raw = weights.read(length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise corrupt("header is not JSON") from None
    if not isinstance(header, dict):
        raise corrupt("header is not a JSON object")
    data_bytes = size - 8 - length
    end = 0
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        if not _is_tensor_entry(entry):
            raise corrupt(f"entry '{key}' lacks a dtype, shape or data_offsets")
        start, stop = entry["data_offsets"]
        width = FLOAT_DTYPE_BYTES.get(entry["dtype"])
        if width is not None and stop - start != width * _product(entry["shape"]):
            raise corrupt(f"'{key}' takes {stop - start} bytes, its shape and dtype need "
                          f"{width * _product(entry['shape'])}")
        end = max(end, stop)
    if end > data_bytes:
        raise corrupt(f"truncated data: the header describes {end} bytes, the file holds {data_bytes}")
    if end < data_bytes:  # safetensors refuses these too: the file is not the one its header describes
        raise corrupt(f"{data_bytes - end} bytes after the last tensor")
    return header


def _read_adapter_config(folder: Path, name: str) -> dict[str, Any]:
    path = folder / ADAPTER_CONFIG
    if not path.is_file():
        raise AdapterRefused(name, f"{ADAPTER_CONFIG} is missing")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise AdapterRefused(name, f"{ADAPTER_CONFIG} is not JSON ({error})") from None
    if not isinstance(config, dict):
        raise AdapterRefused(name, f"{ADAPTER_CONFIG} is not a JSON object")
    return config


def _lora_settings(config: dict[str, Any], name: str) -> tuple[int, float, tuple[str, ...]]:
    """(rank, alpha, targeted modules) of an adapter_config.json, refusing what vLLM cannot serve
    as the config says: vLLM reads only r, lora_alpha and a few flags, and would serve the rest
    wrongly rather than refuse it."""
    peft_type = config.get("peft_type", "LORA")
    if peft_type != "LORA":
        raise AdapterRefused(name, f"peft_type '{peft_type}' is not supported (vLLM serves LORA)")
    rank, alpha = config.get("r"), config.get("lora_alpha")
    if not isinstance(rank, int) or isinstance(rank, bool) or rank <= 0:
        raise AdapterRefused(name, f"{ADAPTER_CONFIG} has r {rank!r}, not a positive integer")
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool):
        raise AdapterRefused(name, f"{ADAPTER_CONFIG} has lora_alpha {alpha!r}, not a number")
    bias = config.get("bias", "none")
    if bias != "none":
        raise AdapterRefused(name, f"bias '{bias}' is not supported (vLLM serves bias 'none')")
    if config.get("use_dora"):
        raise AdapterRefused(name, "DoRA is not supported (vLLM serves plain LoRA)")
    if config.get("modules_to_save"):
        raise AdapterRefused(name, "modules_to_save is not supported (vLLM serves only the LoRA matrices)")
    for pattern in ("rank_pattern", "alpha_pattern"):
        if config.get(pattern):
            raise AdapterRefused(name, f"{pattern} is not supported (vLLM scales every module by lora_alpha / r)")
    return rank, float(alpha), _targets(config.get("target_modules"), name)


def _targets(declared: Any, name: str) -> tuple[str, ...]:
    """The base modules an adapter_config.json's target_modules names: a list of module names,
    `all-linear`, or (peft's other string form) a regex matched against full module names."""
    if declared == "all-linear":
        return LINEAR_MODULES
    if isinstance(declared, str):
        try:
            pattern = re.compile(declared)
        except re.error:
            raise AdapterRefused(name, f"target_modules '{declared}' is not a regular expression") from None
        found = tuple(module for module in LINEAR_MODULES
                      if any(pattern.fullmatch(f"model.layers.0.{block}.{module}") for block in ("self_attn", "mlp")))
        if not found:
            raise AdapterRefused(name, f"target_modules '{declared}' matches no module of the base")
        return found
    if not isinstance(declared, list) or not declared or not all(isinstance(item, str) for item in declared):
        raise AdapterRefused(name, f"{ADAPTER_CONFIG} has target_modules {declared!r}, not a list of module names")
    for module in declared:
        if module.rsplit(".", 1)[-1] not in LINEAR_MODULES:
            raise AdapterRefused(name, f"targets {module}, which the base has no module named")
    # In the base's order: peft writes the list from a set, in no order of its own.
    named = {module.rsplit(".", 1)[-1] for module in declared}
    return tuple(module for module in LINEAR_MODULES if module in named)


def _check_tensors(tensors: dict[str, Any], base: BaseShapes, rank: int, targets: tuple[str, ...], name: str) -> None:
    if not tensors:
        raise AdapterRefused(name, f"{ADAPTER_WEIGHTS} holds no tensors")
    halves: dict[str, set[str]] = {}
    for key, entry in tensors.items():
        match = _LORA_TENSOR.fullmatch(key)
        if match is None:
            raise AdapterRefused(name, f"tensor '{key}' is not a lora_A or lora_B weight of a decoder layer")
        where, layer, module, half = match.group(1), int(match.group(2)), match.group(3), match.group(4)
        label = f"{where}.lora_{half}"
        if module not in LINEAR_MODULES:
            raise AdapterRefused(name, f"{label} is for {module}, which the base has no module named")
        if module not in targets:
            raise AdapterRefused(name, f"{label} is for {module}, which {ADAPTER_CONFIG}'s target_modules "
                                       "does not name")
        if layer >= base.layers:
            raise AdapterRefused(name, f"{label} is for layer {layer}, the base has {base.layers} layers: "
                                       f"{_ANOTHER_BASE}")
        if entry["dtype"] not in FLOAT_DTYPE_BYTES:
            raise AdapterRefused(name, f"{label} has dtype {entry['dtype']}, not a floating-point one")
        _check_shape(label, module, half, entry["shape"], base, rank, name)
        halves.setdefault(where, set()).add(half)
    for where, found in halves.items():
        if found != {"A", "B"}:
            (present,) = found
            raise AdapterRefused(name, f"{where} has lora_{present} but no lora_{'B' if present == 'A' else 'A'}")


def _check_shape(label: str, module: str, half: str, shape: list[int], base: BaseShapes, rank: int, name: str) -> None:
    """lora_A is [r, inputs], lora_B is [outputs, r]: either dimension wrong means another base,
    smaller ones included (vLLM would copy them into a corner of its buffers and say nothing)."""
    shown = "[" + ", ".join(str(size) for size in shape) + "]"
    if len(shape) != 2:
        raise AdapterRefused(name, f"{label} has shape {shown}, not a matrix")
    inputs, outputs = base.in_out(module)
    own_rank, width = (shape[0], shape[1]) if half == "A" else (shape[1], shape[0])
    if own_rank != rank:
        raise AdapterRefused(name, f"{label} has shape {shown}, of rank {own_rank}, but {ADAPTER_CONFIG} says r {rank}")
    expected, side = (inputs, "inputs") if half == "A" else (outputs, "outputs")
    if width != expected:
        raise AdapterRefused(name, f"{label} has shape {shown}, the base's {module} has {expected} {side}: "
                                   f"{_ANOTHER_BASE}")


def _is_tensor_entry(entry: Any) -> bool:
    if not isinstance(entry, dict) or not isinstance(entry.get("dtype"), str):
        return False
    shape, offsets = entry.get("shape"), entry.get("data_offsets")
    return (isinstance(shape, list) and all(isinstance(size, int) and size >= 0 for size in shape)
            and isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)
            and 0 <= offsets[0] <= offsets[1])


def _product(shape: list[int]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count
