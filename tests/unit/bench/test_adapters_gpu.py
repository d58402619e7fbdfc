"""The LoRA multiplexing bench's pure parts: arguments, statistics, prices and tables (no vLLM, no GPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import adapters_gpu
from bench.adapters_gpu import (
    adapter_jobs,
    int_list,
    latency_by_kind,
    parse_args,
    percentile,
    rotation,
    summarize,
    table_command,
)
from bench.adapters_gpu_tables import (
    accelerator_for,
    combine,
    hourly_prices,
    markdown_table,
    mixed_table,
    priced_rows,
    usd_per_1m_tokens,
)

SHAPES = Path(__file__).resolve().parents[2] / "data" / "model_shapes"


def test_run_arguments_default_to_the_issues_grid():
    args = parse_args(["run", "--model", "m", "--rank", "16", "--name", "n"])
    assert args.adapters == [0, 1, 8, 32] and args.concurrency == [16, 128]
    assert args.max_loras == 32 and args.max_cpu_loras == 32
    assert args.modules == ("q_proj", "k_proj", "v_proj", "o_proj")
    assert (args.prompt_tokens, args.output_tokens, args.load_format) == (512, 128, "dummy")
    assert isinstance(args.model, Path)


def test_cpu_loras_cover_every_adapter_in_rotation():
    args = parse_args(["run", "--model", "m", "--rank", "8", "--adapters", "1,48", "--max-loras", "8", "--name", "n"])
    assert args.max_cpu_loras == 48
    with pytest.raises(SystemExit):
        parse_args(["run", "--model", "m", "--rank", "8", "--adapters", "32", "--max-cpu-loras", "16", "--name", "n"])


@pytest.mark.parametrize("extra", [
    ["--rank", "0", "--adapters", "0,8"],  # an engine without LoRA serves the base alone
    ["--rank", "-1"],
    ["--rank", "8", "--concurrency", "256"],  # over max_num_seqs
    ["--rank", "8", "--prompt-tokens", "1000"],  # over max_model_len with the output
    ["--rank", "8", "--adapters", "1,1"],
    ["--rank", "0", "--adapters", "0", "--mixed", "8"],  # no adapters to mix in
    ["--rank", "8", "--mixed", "0"],
])
def test_bad_run_arguments_are_refused(extra):
    with pytest.raises(SystemExit):
        parse_args(["run", "--model", "m", "--name", "n", *extra])


def test_int_list():
    assert int_list("1, 8,32") == [1, 8, 32]
    for bad in ("", "a", "-1", "3,3"):
        with pytest.raises(Exception):
            int_list(bad)


def test_percentile_interpolates_between_ranks():
    assert percentile([], 50) is None
    assert percentile([5.0], 99) == 5.0
    assert percentile([1, 2, 3, 4], 50) == pytest.approx(2.5)
    assert percentile(list(range(101)), 99) == pytest.approx(99)
    assert percentile([3, 1, 2], 100) == 3


def test_rotation_names_adapters_from_one_and_the_base_as_zero():
    assert rotation(0) == [0]
    assert rotation(3) == [1, 2, 3]
    # Mixed: every other request is the base's.
    assert rotation(2, mixed=True) == [0, 1, 0, 2]


def test_mixed_cells_write_the_adapters_they_name_and_keep_them_in_cpu_memory(tmp_path):
    args = parse_args(["run", "--model", str(tmp_path), "--rank", "8", "--adapters", "0,1", "--mixed", "8",
                       "--max-loras", "4", "--name", "n"])
    assert args.mixed == [8] and args.max_cpu_loras == 8
    assert len(adapter_jobs(args, {})) == 8


def test_a_mixed_cells_base_and_adapter_requests_are_summarized_apart():
    records = [{"adapter": i % 2, "ttft_s": 0.1 if i % 2 == 0 else 0.3, "e2e_s": 1.37 if i % 2 == 0 else 3.856,
                "output_tokens": 128} for i in range(6)]
    kinds = latency_by_kind(records)
    assert kinds["base"]["requests"] == kinds["adapter"]["requests"] == 3
    assert kinds["base"]["ttft_ms"]["p50"] == pytest.approx(100)
    assert kinds["base"]["tpot_ms"]["p50"] == pytest.approx(10)
    assert kinds["adapter"]["ttft_ms"]["p50"] == pytest.approx(300)
    assert kinds["adapter"]["tpot_ms"]["p50"] == pytest.approx(28.0)


def test_summarize_a_cell():
    records = [{"adapter": 1 + i % 2, "ttft_s": 0.1 * (i + 1), "e2e_s": 0.1 * (i + 1) + 1.27, "output_tokens": 128}
               for i in range(4)]
    s = summarize(records, wall_s=2.0)
    assert s["output_tokens"] == 512 and s["output_tokens_per_s"] == 256 and s["requests_per_s"] == 2
    assert s["ttft_ms"]["p50"] == pytest.approx(250) and s["ttft_ms"]["max"] == pytest.approx(400)
    assert s["tpot_ms"]["p50"] == pytest.approx(10)
    assert s["adapters_served"] == 2 and s["token_share_per_adapter"] == {"min": 0.5, "max": 0.5}


def test_accelerator_from_the_gpu_name():
    assert accelerator_for("NVIDIA H200") == "H200"
    assert accelerator_for("NVIDIA H100 80GB HBM3") == "H100"
    assert accelerator_for("NVIDIA A100-SXM4-80GB") == "A100-80G"
    assert accelerator_for("cpu") is None and accelerator_for(None) is None


def test_cost_per_million_tokens():
    # $7.20/h is $0.002/s; at 2000 tokens/s a million tokens take 500 s: $1.
    assert usd_per_1m_tokens(7.2, 2000) == pytest.approx(1.0)
    assert usd_per_1m_tokens(7.2, 0) is None and usd_per_1m_tokens(None, 10) is None


def test_prices_come_from_the_catalog():
    prices = hourly_prices("H200")
    assert prices["gpu_usd_per_hour"] > 0
    # The replica rate adds energy and the cloud premium to the hardware price.
    assert prices["replica_usd_per_hour"] > prices["gpu_usd_per_hour"]


def run(enable_lora: bool, rank: int | None, cells: list[tuple[int, int, float, float]]) -> dict:
    return {"name": f"r{rank}", "device": "NVIDIA H200", "vllm_version": "0.26.0",
            "engine": {"enable_lora": enable_lora, "max_lora_rank": rank},
            "cells": [{"adapters": a, "concurrency": c,
                       "summary": {"output_tokens_per_s": tps, "requests_per_s": tps / 128,
                                   "ttft_ms": {"p50": ttft, "p99": 2 * ttft}, "tpot_ms": {"p50": 5.0, "p99": 6.0}}}
                      for a, c, tps, ttft in cells]}


PRICES = {"accelerator": "H200", "purchase": "on_demand", "catalog_as_of": "x", "gpu_usd_per_hour": 7.2,
          "replica_usd_per_hour": 9.0}


def test_rows_are_priced_and_set_against_the_engine_without_lora():
    runs = [run(True, 8, [(0, 16, 1800.0, 30.0), (32, 16, 1500.0, 45.0)]), run(False, None, [(0, 16, 2000.0, 30.0)])]
    rows = priced_rows(runs, PRICES)
    assert [r["label"] for r in rows] == ["no LoRA, base only", "r8, base only", "r8, 32 adapters"]
    lora = rows[-1]
    assert lora["throughput_vs_no_lora"] == pytest.approx(0.75)
    assert lora["ttft_p50_vs_no_lora"] == pytest.approx(1.5)
    assert lora["usd_per_1m_tokens"] == pytest.approx(usd_per_1m_tokens(7.2, 1500))
    assert lora["replica_usd_per_1m_tokens"] == pytest.approx(usd_per_1m_tokens(9.0, 1500))
    assert lora["tokens_per_s_per_adapter"] == pytest.approx(1500 / 32)
    assert lora["token_share_per_adapter"] == pytest.approx(1 / 32)
    table = markdown_table(rows)
    assert table.count("\n") == 2 + 3
    assert "| 16 | r8, 32 adapters | 1500 | 0.750x |" in table and "(3.1%)" in table


def test_a_mixed_cell_is_set_against_each_kind_alone_on_the_same_engine():
    lora = run(True, 8, [(0, 16, 1800.0, 30.0), (8, 16, 900.0, 60.0), (8, 16, 1200.0, 45.0)])
    mixed = lora["cells"][2]
    mixed["mixed"] = True
    mixed["summary"]["by_kind"] = {"base": {"ttft_ms": {"p50": 40.0}, "tpot_ms": {"p50": 7.5}},
                                   "adapter": {"ttft_ms": {"p50": 50.0}, "tpot_ms": {"p50": 9.0}}}
    rows = priced_rows([lora], PRICES)
    assert [r["label"] for r in rows] == ["r8, base only", "r8, 8 adapters", "r8, base + 8 adapters, half each"]
    # Half the mixed cell's tokens are the base's, the rest split over its 8 adapters.
    assert rows[-1]["token_share_per_adapter"] == pytest.approx(1 / 16)
    table = mixed_table(rows)
    assert table.count("\n") == 2 + 1
    row = "| 16 | r8, base + 8 adapters, half each | 40.00 (30.00) | 7.50 (5.00) | 50.00 (60.00) | 9.00 (5.00) |"
    assert row in table
    assert mixed_table(rows[:2]) == ""


def test_rows_without_a_reference_or_price_still_print():
    rows = priced_rows([run(True, 64, [(1, 128, 5000.0, 400.0)])], None)
    assert rows[0]["throughput_vs_no_lora"] is None and rows[0]["usd_per_1m_tokens"] is None
    assert "| 128 | r64, 1 adapter | 5000 | - |" in markdown_table(rows)


def test_table_command_joins_run_files(tmp_path):
    paths = []
    for index, r in enumerate([run(False, None, [(0, 16, 2000.0, 30.0)]), run(True, 8, [(8, 16, 1900.0, 33.0)])]):
        path = tmp_path / f"{index}.json"
        path.write_text(json.dumps(r))
        paths.append(str(path))
    args = parse_args(["table", *paths, "--out", str(tmp_path), "--name", "joined"])
    assert table_command(args, ["table"], price_lookup=lambda accelerator, purchase, catalog: PRICES) == 0
    joined = json.loads((tmp_path / "joined.json").read_text())
    assert joined["devices"] == ["NVIDIA H200"] and len(joined["rows"]) == 2
    assert "r8, 8 adapters" in (tmp_path / "joined.md").read_text()


def test_adapter_jobs_name_one_folder_and_seed_per_adapter(tmp_path):
    config = json.loads((SHAPES / "llama-8b-shape.json").read_text())
    args = parse_args(["run", "--model", "m", "--rank", "8", "--adapters", "0,3", "--adapter-dir", str(tmp_path),
                       "--name", "n"])
    jobs = adapter_jobs(args, config)
    assert [Path(j[0]).name for j in jobs] == ["a01", "a02", "a03"]
    assert len({j[-1] for j in jobs}) == 3 and all(j[3] == 8 for j in jobs)


def test_one_adapter_is_written_in_peft_layout(tmp_path):
    config = {"hidden_size": 576, "num_hidden_layers": 2, "num_attention_heads": 9, "num_key_value_heads": 3,
              "head_dim": 64, "intermediate_size": 1536}
    size = adapters_gpu._write_one_adapter((str(tmp_path / "a01"), config, "base", 8, ("q_proj", "o_proj"), 1))
    assert size == (tmp_path / "a01" / "adapter_model.safetensors").stat().st_size
    assert json.loads((tmp_path / "a01" / "adapter_config.json").read_text())["r"] == 8


def test_combine_lists_devices_and_versions():
    result = combine([run(False, None, [(0, 16, 2000.0, 30.0)])], PRICES)
    assert result["devices"] == ["NVIDIA H200"] and result["vllm_versions"] == ["0.26.0"]


def test_random_prompts_are_reproducible_and_inside_the_vocabulary():
    prompts = adapters_gpu.random_prompts(3, 16, seed=1, vocab_size=500)
    assert prompts == adapters_gpu.random_prompts(3, 16, seed=1, vocab_size=500)
    assert len(prompts) == 3 and all(len(p) == 16 and max(p) < 500 for p in prompts)
    assert max(max(p) for p in adapters_gpu.random_prompts(4, 512, seed=2, vocab_size=128256)) < 100_000


def test_cells_measure_rounds_per_client_and_a_floor():
    assert adapters_gpu.cell_requests(16, 3, 64) == 64
    assert adapters_gpu.cell_requests(128, 3, 64) == 384
