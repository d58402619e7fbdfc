"""The engine-alone benchmark's arithmetic: the weight bytes that bound TPOT at batch 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.engine_alone import llama_weight_bytes

SHAPES = Path(__file__).resolve().parents[2] / "data" / "model_shapes"


def test_llama_8b_shape_weighs_what_its_parameters_do():
    config = json.loads((SHAPES / "llama-8b-shape.json").read_text())
    # 7.38 B parameters in bf16: the 13.75 GiB the bandwidth floor is computed from.
    assert llama_weight_bytes(config) / 2**30 == pytest.approx(13.75, abs=0.01)


def test_tied_embeddings_are_counted_once():
    config = json.loads((SHAPES / "llama-8b-shape.json").read_text())
    untied = llama_weight_bytes(config)
    tied = llama_weight_bytes({**config, "tie_word_embeddings": True})
    assert untied - tied == config["vocab_size"] * config["hidden_size"] * 2
