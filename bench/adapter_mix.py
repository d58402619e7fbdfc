"""`trilemma bench adapters`: what serving LoRA adapters costs a pool, on the app itself.

One app, two pools of the same engine settings and weights, each under a public name of its own:
`smol-lora` (the pool sets `lora`, and serves four adapters of it) and `smol-plain` (no LoRA, so
on a CPU its engine keeps compilation, which vLLM turns off for a LoRA engine). The run

1. loads each adapter once, alone, and reads its load time from the answer's usage
   (`adapter_load_s`, what the loading request paid);
2. sends the same chats, streamed, greedy, with a fixed answer length, at each concurrency, to:
   the base on the plain pool, the base on the LoRA pool, and 1, 2 and 4 adapters interleaved
   request by request on the LoRA pool (all resident by then: the steady state);
3. reports TTFT and TPOT (median, p99) and output tokens/s of each cell, and each cell's
   throughput against the base on either pool.

    trilemma bench adapters --out bench/results/adapters-cpu --name adapter-mix-cpu
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

import httpx

from bench import machine
from bench.adapter_training_data import qa_pairs
from bench.arrivals import LoadShape
from bench.cli_common import add_app_args, add_output_args, app_config, command_line, fail
from bench.datasets import Prompt
from bench.load_generator import run_load
from bench.metrics import summarize
from bench.result_files import fmt, write_json
from core.config import ConfigError, TrilemmaConfig
from serve_app.launcher import deployed

ADAPTERS = Path(__file__).resolve().parents[1] / "tests" / "data" / "adapters"
LORA_MODEL, PLAIN_MODEL = "smol-lora", "smol-plain"
# Four adapters from the two committed ones: a name is an adapter to vLLM, whatever its files.
ADAPTER_FOLDERS = {"tagged": "tagged", "jsonish": "jsonish", "tagged-2": "tagged", "jsonish-2": "jsonish"}
MIXES = (1, 2, 4)


def add_adapters_command(sub: argparse._SubParsersAction) -> None:
    command = sub.add_parser("adapters", help="LoRA adapters' cost: TTFT and tokens/s with 1, 2 and 4 adapters "
                                              "interleaved against the base, on a LoRA pool and a plain one",
                             allow_abbrev=False)
    add_app_args(command)
    command.add_argument("--requests", type=int, default=16, help="requests per cell and concurrency 1")
    command.add_argument("--concurrency", default="1,8", help="comma-separated requests in flight")
    command.add_argument("--max-tokens", type=int, default=32, help="tokens of every answer (ignore_eos)")
    add_output_args(command, "adapters")
    command.set_defaults(func=bench_adapters)


def bench_adapters(args: argparse.Namespace) -> int:
    try:
        config = mix_config(app_config(args))
        levels = [int(level) for level in args.concurrency.split(",")]
    except (ConfigError, ValueError) as error:
        return fail(error)
    started = time.monotonic()
    with deployed(config) as url:
        loads = [load_once(url, name) for name in ADAPTER_FOLDERS]
        cells = [cell for level in levels for cell in run_cells(url, level, args)]
    result = {
        "kind": "adapters", "command": command_line(args), "machine": machine.describe(),
        "engine": {key: config.pools["short"].model_dump()[key] for key in ("max_model_len", "max_num_seqs", "lora")},
        "max_tokens": args.max_tokens, "adapter_loads": loads, "cells": with_ratios(cells),
        "wall_s": round(time.monotonic() - started, 1),
    }
    path = write_json(result, args.out, args.name or f"adapters-{time.strftime('%Y%m%d-%H%M%S')}")
    path.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    print(f"wrote {path}")
    return 0


def mix_config(config: TrilemmaConfig) -> TrilemmaConfig:
    """The config's short pool twice: with `lora` (and the four adapters) and without."""
    raw = config.model_dump(mode="json")
    short = raw["pools"]["short"]
    source = raw["model"]["source"]
    plain = {**short, "role": "long", "model": {"name": PLAIN_MODEL, "source": source},
             "env": {**short["env"], "VLLM_CPU_OMP_THREADS_BIND": "1"}}
    every = len(ADAPTER_FOLDERS)  # all resident and batched together: the steady state
    raw["pools"] = {
        "short": {**short, "model": {"name": LORA_MODEL, "source": source},
                  "lora": {"max_loras": every, "max_lora_rank": 8, "max_resident": every}},
        "long": plain,
    }
    raw["adapters"] = {name: {"base": LORA_MODEL, "source": str(ADAPTERS / folder)}
                       for name, folder in ADAPTER_FOLDERS.items()}
    for scenario in raw["scenarios"].values():
        scenario.pop("models", None)
        scenario["pools"] = None
    raw["autoscaling"]["enabled"] = False
    return TrilemmaConfig.from_dict(raw)


def load_once(url: str, adapter: str) -> dict[str, Any]:
    """The adapter's first request, alone: its load time as the replica paid it."""
    started = time.perf_counter()
    answer = httpx.post(f"{url}/v1/chat/completions", timeout=300, json={
        "model": adapter, "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 1}).json()
    return {"adapter": adapter, "load_s": answer["usage"].get("adapter_load_s"),
            "first_request_s": round(time.perf_counter() - started, 3)}


def run_cells(url: str, concurrency: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    requests = args.requests * max(1, concurrency // 2)
    names = list(ADAPTER_FOLDERS)
    arms = [("plain pool, base", [PLAIN_MODEL]), ("LoRA pool, base", [LORA_MODEL])]
    arms += [(f"LoRA pool, {mix} adapter{'s' if mix > 1 else ''}", names[:mix]) for mix in MIXES]
    cells = []
    for label, models in arms:
        asyncio.run(run_load(url, prompts(concurrency, models, args.max_tokens), LoadShape(concurrency=concurrency),
                             model=models[0], progress=False))  # warm: the engine's batch shapes, the adapters held
        records, duration = asyncio.run(run_load(url, prompts(requests, models, args.max_tokens),
                                                 LoadShape(concurrency=concurrency), model=models[0],
                                                 progress=not args.no_progress, label=label))
        summary = summarize(records, duration)
        cells.append({"cell": label, "models": models, "concurrency": concurrency, "requests": requests,
                      "errors": summary["errors"], "output_tps": summary["output_token_throughput_tps"],
                      "ttft_ms": summary["ttft_ms"], "tpot_ms": summary["tpot_ms"]})
    return cells


def prompts(count: int, models: list[str], max_tokens: int) -> list[Prompt]:
    """Short chats, the models taken in turn: request i asks models[i % len(models)]."""
    questions = [question for question, _ in qa_pairs(1)]
    return [Prompt(messages=[{"role": "user", "content": questions[i % len(questions)]}], max_tokens=max_tokens,
                   kind="short", extra={"model": models[i % len(models)], "ignore_eos": True, "temperature": 0})
            for i in range(count)]


def with_ratios(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each cell's throughput against the base on the plain pool and on the LoRA pool, at its concurrency."""
    for cell in cells:
        bases = {c["cell"]: c["output_tps"] for c in cells if c["concurrency"] == cell["concurrency"]}
        cell["tps_vs_plain_base"] = cell["output_tps"] / bases["plain pool, base"]
        cell["tps_vs_lora_base"] = cell["output_tps"] / bases["LoRA pool, base"]
    return cells


def markdown(result: dict[str, Any]) -> str:
    lines = [f"# LoRA adapters on one pool ({result['machine']})", "",
             "Adapter loads (the first request of each, alone): " + ", ".join(
                 f"{load['adapter']} {fmt(load['load_s'], 3)} s" for load in result["adapter_loads"]), "",
             "| cell | in flight | out tok/s | vs plain base | vs LoRA base | TTFT p50 ms | TTFT p99 ms "
             "| TPOT p50 ms | TPOT p99 ms | errors |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for cell in result["cells"]:
        lines.append(
            f"| {cell['cell']} | {cell['concurrency']} | {fmt(cell['output_tps'])}"
            f" | {fmt(cell['tps_vs_plain_base'], 2)} | {fmt(cell['tps_vs_lora_base'], 2)}"
            f" | {fmt(cell['ttft_ms']['p50'])} | {fmt(cell['ttft_ms']['p99'])}"
            f" | {fmt(cell['tpot_ms']['p50'])} | {fmt(cell['tpot_ms']['p99'])} | {cell['errors'] or 0} |")
    return "\n".join(lines) + "\n"
