"""`trilemma bench adapters` without an app: the two pools it compares, the interleaving of its
requests, and the ratios and table it reports."""

from __future__ import annotations

from bench.adapter_mix import ADAPTER_FOLDERS, LORA_MODEL, PLAIN_MODEL, markdown, mix_config, prompts, with_ratios
from tests.support import config_for_tests


def test_the_two_pools_differ_only_in_lora_and_the_core_they_bind():
    config = mix_config(config_for_tests())
    lora, plain = config.pools["short"], config.pools["long"]
    assert config.pool_model("short").name == LORA_MODEL and config.pool_model("long").name == PLAIN_MODEL
    assert plain.lora is None and lora.lora.max_resident == len(ADAPTER_FOLDERS)
    assert (lora.max_model_len, lora.max_num_seqs, lora.engine_kwargs) == \
        (plain.max_model_len, plain.max_num_seqs, plain.engine_kwargs)
    assert {lora.env["VLLM_CPU_OMP_THREADS_BIND"], plain.env["VLLM_CPU_OMP_THREADS_BIND"]} == {"0", "1"}
    assert sorted(config.adapters_of_pool("short")) == sorted(ADAPTER_FOLDERS)


def test_requests_take_the_models_in_turn_with_a_fixed_answer_length():
    sent = prompts(6, ["tagged", "jsonish"], max_tokens=32)
    assert [p.extra["model"] for p in sent] == ["tagged", "jsonish"] * 3
    assert all(p.max_tokens == 32 and p.extra["ignore_eos"] and p.extra["temperature"] == 0 for p in sent)


def test_each_cell_is_compared_with_both_bases_at_its_concurrency():
    def cell(name: str, concurrency: int, tps: float) -> dict:
        return {"cell": name, "models": [], "concurrency": concurrency, "requests": 4, "errors": {}, "output_tps": tps,
                "ttft_ms": {"p50": 10.0, "p99": 20.0}, "tpot_ms": {"p50": 5.0, "p99": 6.0}}

    cells = with_ratios([cell("plain pool, base", 1, 20.0), cell("LoRA pool, base", 1, 10.0),
                         cell("LoRA pool, 4 adapters", 1, 8.0), cell("plain pool, base", 8, 100.0),
                         cell("LoRA pool, base", 8, 50.0)])
    assert (cells[2]["tps_vs_plain_base"], cells[2]["tps_vs_lora_base"]) == (0.4, 0.8)
    assert cells[4]["tps_vs_plain_base"] == 0.5
    table = markdown({"machine": "a CPU", "adapter_loads": [{"adapter": "tagged", "load_s": 0.05}], "cells": cells})
    assert "| LoRA pool, 4 adapters | 1 | 8.0 | 0.40 | 0.80 |" in table and "tagged 0.050 s" in table
