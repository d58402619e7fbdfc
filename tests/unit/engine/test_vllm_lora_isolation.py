"""The vLLM plugin that keeps a CPU engine's tokens without an adapter off the adapters of their
batch: vLLM's CPU ops still need it, it mends them, and it changes nothing for adapted tokens."""

from __future__ import annotations

import importlib
import importlib.util

import pytest

from core.vllm_plugins import PLUGIN_GROUP, plugin_loads
from engine import vllm_lora_isolation
from engine.vllm_lora_isolation import BINDERS, INDEXED_OPS, OPS_MODULE, ops_skip_tokens_without_adapter

torch = pytest.importorskip("torch")
ops = pytest.importorskip(OPS_MODULE)


@pytest.fixture
def mended(monkeypatch):
    """vLLM's CPU ops as the plugin leaves them; vLLM's own again after the test."""
    modules = [ops, *(importlib.import_module(name) for name in BINDERS)]
    originals = {(module, name): getattr(module, name) for module in modules for name in INDEXED_OPS
                 if hasattr(module, name)}
    for (module, name), op in originals.items():
        monkeypatch.setattr(module, name, op)
    vllm_lora_isolation.register()
    return {name: op for (module, name), op in originals.items() if module is ops}


def test_vllm_cpu_ops_give_a_token_without_an_adapter_the_last_slot():
    """The bug the plugin mends (docs/upstream/vllm-cpu-lora-slot-minus-one.md), in a copy of
    vLLM's module of its own (another test's engine may have loaded the plugin in this process).
    Once vLLM's own ops skip slot -1, this fails: the plugin then changes nothing and can go."""
    spec = importlib.util.spec_from_file_location("vllm_cpu_lora_ops_as_shipped", ops.__file__)
    shipped = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shipped)
    weights = torch.stack([torch.full((1, 2, 3), 1.0), torch.full((1, 2, 3), 2.0)])
    shrunk = torch.zeros(2, 2)
    shipped.bgmv_shrink(torch.ones(2, 3), weights, shrunk, torch.tensor([-1, 0]), 1.0)
    assert shrunk[0].tolist() == [6.0, 6.0], "slot -1 read the last slot (2.0 x 3 inputs)"
    assert not ops_skip_tokens_without_adapter(shipped)


def test_mended_ops_skip_a_token_without_an_adapter(mended):
    assert ops_skip_tokens_without_adapter(ops)
    for name in BINDERS:  # bound by name at import: rebound too
        module = importlib.import_module(name)
        for op in INDEXED_OPS:
            assert getattr(module, op) is getattr(vllm_lora_isolation, op), f"{name}.{op}"


@pytest.mark.parametrize("add_inputs", [True, False])
def test_adapted_tokens_get_what_vllms_ops_give_them(mended, add_inputs):
    """Tokens with an adapter: bit for bit vLLM's own result; tokens without one: untouched."""
    generator = torch.Generator().manual_seed(0)
    tokens, hidden, rank, out, slots = 6, 8, 4, 10, 3
    inputs = torch.randn(tokens, hidden, generator=generator)
    shrink_weights = torch.randn(slots, 1, rank, hidden, generator=generator)
    expand_weights = torch.randn(slots, 1, out, rank, generator=generator)
    indices = torch.tensor([0, -1, 2, 1, -1, 2])
    adapted = indices >= 0
    start = torch.randn(tokens, out, generator=generator)

    def both(op, *args, target):
        theirs, ours = target.clone(), target.clone()
        mended[op](args[0], args[1], theirs, indices.clamp(min=0), *args[2:])
        getattr(ops, op)(args[0], args[1], ours, indices, *args[2:])
        return theirs, ours

    theirs, ours = both("bgmv_shrink", inputs, shrink_weights, 0.5, target=torch.zeros(tokens, rank))
    assert torch.equal(ours[adapted], theirs[adapted]) and torch.equal(ours[~adapted], torch.zeros(2, rank))
    hidden_states = torch.randn(tokens, rank, generator=generator)
    theirs, ours = both("bgmv_expand", hidden_states, expand_weights, add_inputs, target=start)
    assert torch.equal(ours[adapted], theirs[adapted]) and torch.equal(ours[~adapted], start[~adapted])
    wide = torch.randn(tokens, 3 * out, generator=generator)
    theirs, ours = both("bgmv_expand_slice", hidden_states, expand_weights, out, out, add_inputs, target=wide)
    assert torch.equal(ours[adapted], theirs[adapted]) and torch.equal(ours[~adapted], wide[~adapted])


def test_the_sgmv_ops_of_a_prefill_go_through_the_mended_ones(mended):
    """A prefill's ops take one slot per sequence and spread it over the sequence's tokens."""
    weights = torch.stack([torch.full((1, 2, 3), 1.0), torch.full((1, 2, 3), 2.0)])
    shrunk = torch.zeros(5, 2)
    seq_lens = torch.tensor([3, 2])
    ops.sgmv_shrink(torch.ones(5, 3), weights, shrunk, torch.tensor([0, 3]), seq_lens, torch.tensor([-1, 1]),
                    2, 3, 5, 1.0)
    assert shrunk.tolist() == [[0.0, 0.0]] * 3 + [[6.0, 6.0]] * 2


def test_vllm_loads_the_plugin_where_it_loads_its_general_plugins():
    from vllm.plugins import DEFAULT_PLUGINS_GROUP, load_plugins_by_group

    assert DEFAULT_PLUGINS_GROUP == PLUGIN_GROUP
    assert plugin_loads(vllm_lora_isolation.PLUGIN_NAME, {}), "no entry point: reinstall the package (make setup)"
    assert load_plugins_by_group(DEFAULT_PLUGINS_GROUP)[vllm_lora_isolation.PLUGIN_NAME] is vllm_lora_isolation.register
