"""A vLLM plugin that keeps a CPU engine's requests without an adapter off the adapters of their batch.

vLLM marks each token of a request without a LoRA adapter with adapter slot -1. Its GPU kernels
(Triton) skip such tokens; its CPU ops (`vllm/lora/ops/torch_ops/lora_ops.py`, vLLM 0.29)
pick each token's weights with `weights[indices]`, where Python's indexing reads -1 as the
last slot. So a base-model request that shares a CPU engine's batch with adapter requests is
served with whichever adapter sits in the last slot: another tenant's fine-tune. Measured
through the app with the two test adapters, 8 requests in flight, half of them for the base:
11 of 24 base answers came in an adapter's format (docs/upstream/vllm-cpu-lora-slot-minus-one.md,
with a reproduction against vLLM alone in bench/lora_slot_repro.py).

This gives vLLM's three CPU ops that select by index (`bgmv_shrink`, `bgmv_expand`,
`bgmv_expand_slice`; the `sgmv_*` ops and vLLM's CPU punica wrapper call them) the GPU
kernels' meaning: a token at slot -1 gets no adapter's product, and the rows of the other
tokens are computed as before. It changes nothing where vLLM's ops already skip slot -1 (a
fixed vLLM: `ops_skip_tokens_without_adapter` asks the ops themselves) or where the module is
not there. vLLM loads it as it loads engine/vllm_compile_cache.py: from the `vllm.general_plugins`
entry point group, in every engine process, before the model is loaded.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import TYPE_CHECKING

from core.lora_isolation import LORA_ISOLATION_PLUGIN

if TYPE_CHECKING:
    import torch

PLUGIN_NAME = LORA_ISOLATION_PLUGIN
OPS_MODULE = "vllm.lora.ops.torch_ops.lora_ops"
# Modules that bind the ops by name at import: vLLM's package of the ops and its CPU punica wrapper.
BINDERS = ("vllm.lora.ops.torch_ops", "vllm.lora.punica_wrapper.punica_cpu")
INDEXED_OPS = ("bgmv_shrink", "bgmv_expand", "bgmv_expand_slice")


def register() -> None:
    """vLLM's hook: the CPU ops skip tokens without an adapter, where they do not already."""
    try:
        ops = importlib.import_module(OPS_MODULE)
    except ImportError:
        return
    if ops_skip_tokens_without_adapter(ops):
        return
    replacements = {"bgmv_shrink": bgmv_shrink, "bgmv_expand": bgmv_expand, "bgmv_expand_slice": bgmv_expand_slice}
    # The sgmv ops look the bgmv ones up in their module; the binders hold the names they imported.
    for module in (ops, *filter(None, map(sys.modules.get, BINDERS))):
        for name, op in replacements.items():
            if hasattr(module, name):
                setattr(module, name, op)


def ops_skip_tokens_without_adapter(ops: ModuleType) -> bool:
    """Whether `ops`' three indexed ops leave a token at slot -1 as it was: two tokens, the first
    without an adapter and the second on slot 0, with two slots loaded."""
    import torch

    tokens = torch.ones(2, 3)
    untouched = torch.tensor([7.0, 7.0])
    # Slot 0 and slot 1 hold different weights, so a wrong slot shows in the second row too.
    shrink_weights = torch.stack([torch.full((1, 2, 3), 1.0), torch.full((1, 2, 3), 2.0)])
    expand_weights = torch.stack([torch.full((1, 2, 2), 1.0), torch.full((1, 2, 2), 2.0)])
    slots = torch.tensor([-1, 0])
    outputs = []
    shrunk = torch.full((2, 2), 7.0)
    ops.bgmv_shrink(tokens, shrink_weights, shrunk, slots, 1.0)
    outputs.append(shrunk)
    expanded = torch.full((2, 2), 7.0)
    ops.bgmv_expand(tokens[:, :2], expand_weights, expanded, slots, True)
    outputs.append(expanded)
    sliced = torch.full((2, 4), 7.0)
    ops.bgmv_expand_slice(tokens[:, :2], expand_weights, sliced, slots, 2, 2, True)
    outputs.append(sliced[:, 2:])
    return all(torch.equal(output[0], untouched) for output in outputs)


def bgmv_shrink(inputs: torch.Tensor, lora_a_weights: torch.Tensor, output_tensor: torch.Tensor,
                lora_indices_tensor: torch.Tensor, scaling: float = 1.0) -> None:
    adapted, products = _products(inputs, lora_a_weights, lora_indices_tensor, output_tensor.dtype)
    _write(output_tensor[:, : products.shape[1]], scaling * products, adapted, add=False)


def bgmv_expand(inputs: torch.Tensor, lora_b_weights: torch.Tensor, output_tensor: torch.Tensor,
                lora_indices_tensor: torch.Tensor, add_inputs: bool = True) -> None:
    adapted, products = _products(inputs, lora_b_weights, lora_indices_tensor, output_tensor.dtype)
    # As vLLM's op: one row of products (one token) is spread over every row of the output.
    limit = 1 if products.shape[0] == 1 and output_tensor.shape[0] != 1 else output_tensor.shape[0]
    # The adapter and the model may pad the output to different widths.
    width = min(products.shape[1], output_tensor.shape[1])
    _write(output_tensor[:, :width], products[:limit, :width], adapted[:limit], add=add_inputs)


def bgmv_expand_slice(inputs: torch.Tensor, lora_b_weights: torch.Tensor, output_tensor: torch.Tensor,
                      lora_indices_tensor: torch.Tensor, slice_offset: int, slice_size: int,
                      add_inputs: bool = True) -> None:
    adapted, products = _products(inputs, lora_b_weights, lora_indices_tensor, output_tensor.dtype)
    _write(output_tensor[:, slice_offset: slice_offset + slice_size], products, adapted, add=add_inputs)


def _products(inputs: torch.Tensor, weights: torch.Tensor, slots: torch.Tensor,
              dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Which tokens have an adapter, and each token's input times its slot's weights (slot 0's
    for a token without one: a real slot to read, whose product `_write` drops)."""
    import torch

    adapted = slots >= 0
    selected = weights[slots.clamp(min=0)].to(dtype=dtype)
    if selected.dim() == 4:
        selected = selected.squeeze(dim=1)
    return adapted, torch.einsum("bi, boi -> bo", inputs.to(dtype=dtype), selected)


def _write(target: torch.Tensor, products: torch.Tensor, adapted: torch.Tensor, *, add: bool) -> None:
    """Adds or writes each adapted token's products into its row of `target` (a view of the op's
    output); a row without an adapter keeps what it held."""
    import torch

    keep = ~adapted[:, None]
    if add:
        target += products.masked_fill(keep, 0)
    else:
        target.copy_(torch.where(keep, target, products))
