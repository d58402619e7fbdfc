"""LoRA multiplexing on one GPU, at the engine: vLLM's AsyncLLM with random-weight adapters in
rotation against base-only requests, closed-loop, and what a million output tokens costs.

    python -m bench.adapters_gpu run --model FOLDER --rank 8 --name NAME [--out DIR]
    python -m bench.adapters_gpu run --model FOLDER --rank 0 --name NAME   # the engine without LoRA
    python -m bench.adapters_gpu table RUN.json ... [--out DIR --name NAME]

`run` starts one engine (LoRA on with max_lora_rank = --rank, or off with --rank 0), writes
--count random adapters of that rank in peft's layout (bench/synthetic_adapters.py) into
--adapter-dir, and measures, for each number of adapters in rotation (--adapters; 0 is base-only
requests on this engine) and each concurrency (--concurrency): output tokens/s, requests/s,
TTFT median and p99, TPOT median and p99, closed-loop (each of C clients sends its next request
when its last one ends), fixed prompt length (random token ids, a fresh prompt per request) and
fixed output (ignore_eos). A mixed cell (--mixed N) sends every other request to the base and
the rest to N adapters in rotation, so base and adapter requests share the engine's batches; its
base and adapter requests are summarized apart as well. Before the cells it times each adapter's
first request against its next ones (one request at a time: the load from disk into the GPU's
slot shows in the first).
Every cell is preceded by a warm-up wave. The JSON is rewritten after each cell, so a run cut
short keeps what it measured.

`table` joins the runs of several engines into one markdown table (bench/adapters_gpu_tables.py),
each cell priced from the catalog (core/prices.yaml) for the GPU the run names, and each set
against base-only requests on the engine without LoRA at the same concurrency.

The pure parts (arguments, statistics, prices, tables) import without vLLM or a GPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.adapters_gpu_tables import accelerator_for, combine, hourly_prices, table_markdown, usd_per_1m_tokens
from bench.result_files import write_json

RESULTS_DIR = Path("bench/results/adapters-h200")
# Attention's projections: the modules LoRA fine-tunes most often target.
DEFAULT_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
# Token ids the random prompts are drawn from: below Llama-3's special tokens (128000 on), so no
# prompt holds a control token, and inside the model's vocabulary (random_prompts clips to it).
PROMPT_ID_RANGE = (1000, 100_000)


# --- arguments -------------------------------------------------------------------------------

def int_list(text: str) -> list[int]:
    """`1,8,32` -> [1, 8, 32]; each a whole number >= 0, no repeats."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of whole numbers: {text!r}") from None
    if not values or any(v < 0 for v in values) or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"want distinct whole numbers >= 0: {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.adapters_gpu", description=__doc__.splitlines()[0],
                                     allow_abbrev=False)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="one engine's cells (needs vLLM and a GPU)", allow_abbrev=False)
    run.add_argument("--model", type=Path, required=True, help="model folder (config.json and tokenizer)")
    run.add_argument("--load-format", default="dummy", help="`dummy`: random weights (the default)")
    run.add_argument("--rank", type=int, required=True,
                     help="the adapters' rank and the engine's max_lora_rank; 0: an engine without LoRA")
    run.add_argument("--adapters", type=int_list, default=[0, 1, 8, 32],
                     help="adapters in rotation per cell, comma-separated; 0: base-only requests")
    run.add_argument("--mixed", type=int_list, default=[],
                     help="mixed cells: every other request to the base, the rest to N adapters in rotation")
    run.add_argument("--concurrency", type=int_list, default=[16, 128], help="requests in flight, comma-separated")
    run.add_argument("--max-loras", type=int, default=32, help="adapters a batch may hold (GPU slots)")
    run.add_argument("--max-cpu-loras", type=int, help="adapters kept in CPU memory (default: all of them)")
    run.add_argument("--modules", default=",".join(DEFAULT_MODULES), help="the adapters' target modules")
    run.add_argument("--adapter-dir", type=Path, default=Path("/tmp/adapters-gpu"),
                     help="where the random adapters are written (not kept)")
    run.add_argument("--prompt-tokens", type=int, default=512)
    run.add_argument("--output-tokens", type=int, default=128)
    run.add_argument("--rounds", type=int, default=3, help="measured requests per cell: concurrency x rounds, ...")
    run.add_argument("--min-requests", type=int, default=64, help="... and at least this many")
    run.add_argument("--warmup-tokens", type=int, default=16, help="output tokens of each warm-up request")
    run.add_argument("--max-model-len", type=int, default=1024)
    run.add_argument("--max-num-seqs", type=int, default=128)
    run.add_argument("--max-num-batched-tokens", type=int, default=8192,
                     help="vllm serve's default on an H100 or H200")
    run.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    run.add_argument("--engine-kwargs", help="more engine arguments, as JSON")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--out", type=Path, default=RESULTS_DIR)
    run.add_argument("--name", required=True)
    table = commands.add_parser("table", help="join runs into one priced table (no GPU)", allow_abbrev=False)
    table.add_argument("runs", nargs="+", type=Path, help="JSON files that `run` wrote")
    table.add_argument("--accelerator", help="price as this catalog accelerator (default: the runs' GPU)")
    table.add_argument("--purchase", choices=("on_demand", "spot"), default="on_demand")
    table.add_argument("--catalog", type=Path, help="price catalog (default core/prices.yaml)")
    table.add_argument("--out", type=Path, help="write NAME.json and NAME.md here")
    table.add_argument("--name", default="adapters-gpu")
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "run":
        if args.rank < 0:
            parser.error("--rank must be >= 0")
        if args.rank == 0 and (any(args.adapters) or args.mixed):
            parser.error("an engine without LoRA (--rank 0) serves base-only requests only: --adapters 0")
        if 0 in args.mixed:
            parser.error("a mixed cell needs at least one adapter: --mixed 1 or more")
        if args.rank and args.max_loras < 1:
            parser.error("--max-loras must be >= 1")
        needed = max(args.adapters + args.mixed)
        if args.max_cpu_loras is None:
            args.max_cpu_loras = max(needed, args.max_loras)
        if args.rank and args.max_cpu_loras < max(needed, args.max_loras):
            parser.error(f"--max-cpu-loras must be >= the adapters in rotation and --max-loras ({needed})")
        args.modules = tuple(m for m in args.modules.split(",") if m)
        if args.prompt_tokens + args.output_tokens > args.max_model_len:
            parser.error("--prompt-tokens + --output-tokens exceed --max-model-len")
        if max(args.concurrency) > args.max_num_seqs:
            parser.error("a concurrency above --max-num-seqs would queue in the engine, not run")
    return args


# --- statistics ------------------------------------------------------------------------------

def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100), linear between the nearest ranks; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def cell_requests(concurrency: int, rounds: int, min_requests: int) -> int:
    """Measured requests of a cell: `rounds` per client, and at least `min_requests`."""
    return max(concurrency * rounds, min_requests)


def rotation(count: int, mixed: bool = False) -> list[int]:
    """Adapter indexes (1-based, as vLLM's lora_int_id) in the order requests name them; [0] is
    the base model alone, and a mixed rotation names the base (0) before each adapter."""
    if mixed:
        return [index for adapter in range(1, count + 1) for index in (0, adapter)]
    return list(range(1, count + 1)) if count else [0]


def latencies_ms(records: Sequence[Mapping[str, Any]]) -> tuple[list[float], list[float]]:
    """Each request's TTFT, and its TPOT where it has more than one token, in milliseconds."""
    ttft = [r["ttft_s"] * 1000 for r in records]
    tpot = [(r["e2e_s"] - r["ttft_s"]) / (r["output_tokens"] - 1) * 1000 for r in records if r["output_tokens"] > 1]
    return ttft, tpot


def summarize(records: Sequence[Mapping[str, Any]], wall_s: float) -> dict[str, Any]:
    """A cell's figures from its requests (each: adapter, ttft_s, e2e_s, output_tokens)."""
    tokens = sum(r["output_tokens"] for r in records)
    ttft, tpot = latencies_ms(records)
    per_adapter: dict[str, int] = {}
    for r in records:
        per_adapter[str(r["adapter"])] = per_adapter.get(str(r["adapter"]), 0) + r["output_tokens"]
    shares = sorted(n / tokens for n in per_adapter.values()) if tokens else []
    return {
        "requests": len(records), "output_tokens": tokens, "seconds": wall_s,
        "output_tokens_per_s": tokens / wall_s if wall_s > 0 else None,
        "requests_per_s": len(records) / wall_s if wall_s > 0 else None,
        "ttft_ms": {"p50": percentile(ttft, 50), "p99": percentile(ttft, 99), "max": max(ttft, default=None)},
        "tpot_ms": {"p50": percentile(tpot, 50), "p99": percentile(tpot, 99)},
        "e2e_ms": {"p50": percentile([r["e2e_s"] * 1000 for r in records], 50)},
        "adapters_served": len(per_adapter),
        "token_share_per_adapter": {"min": shares[0] if shares else None, "max": shares[-1] if shares else None},
    }


def latency_by_kind(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A mixed cell's base requests (adapter 0) and adapter requests, each with its own TTFT and
    TPOT: what each pays for sharing batches with the other."""
    kinds = {"base": [r for r in records if r["adapter"] == 0], "adapter": [r for r in records if r["adapter"] != 0]}
    out = {}
    for kind, chosen in kinds.items():
        ttft, tpot = latencies_ms(chosen)
        out[kind] = {"requests": len(chosen), "output_tokens": sum(r["output_tokens"] for r in chosen),
                     "ttft_ms": {"p50": percentile(ttft, 50), "p99": percentile(ttft, 99)},
                     "tpot_ms": {"p50": percentile(tpot, 50), "p99": percentile(tpot, 99)}}
    return out


# --- the measurement (vLLM, GPU) -------------------------------------------------------------

def random_prompts(count: int, length: int, seed: int, vocab_size: int = PROMPT_ID_RANGE[1]) -> list[list[int]]:
    """`count` prompts of `length` random token ids, the same for the same seed."""
    import numpy as np

    low, high = min(PROMPT_ID_RANGE[0], vocab_size // 2), min(PROMPT_ID_RANGE[1], vocab_size)
    rng = np.random.default_rng(seed)
    return rng.integers(low, high, size=(count, length)).tolist()


def _write_one_adapter(job: tuple[str, dict[str, Any], str, int, tuple[str, ...], int]) -> int:
    from bench.synthetic_adapters import write_random_adapter

    folder, base_config, base_model, rank, modules, seed = job
    path = write_random_adapter(Path(folder), base_config, base_model, rank=rank, modules=modules, seed=seed)
    return (path / "adapter_model.safetensors").stat().st_size


def adapter_jobs(args: argparse.Namespace, base_config: dict[str, Any]) -> list[tuple]:
    count = max(args.adapters + args.mixed)
    root = args.adapter_dir / f"r{args.rank}"
    return [(str(root / f"a{i:02d}"), base_config, str(args.model), args.rank, args.modules, args.seed * 1000 + i)
            for i in range(1, count + 1)]


class Measurement:
    """One engine, its adapters and its cells; the result is rewritten after each step."""

    def __init__(self, args: argparse.Namespace, command: str):
        self.args = args
        self.result: dict[str, Any] = {"kind": "adapters_gpu", "name": args.name, "command": command,
                                       "date": time.strftime("%Y-%m-%d"), "cells": []}
        self.prompt_seed = args.seed * 1_000_003
        self.vocab_size = json.loads((args.model / "config.json").read_text())["vocab_size"]

    def save(self) -> Path:
        return write_json(self.result, self.args.out, self.args.name)

    def next_prompts(self, count: int) -> list[list[int]]:
        self.prompt_seed += 1
        return random_prompts(count, self.args.prompt_tokens, self.prompt_seed, self.vocab_size)

    async def one(self, engine: Any, prompt: list[int], max_tokens: int, lora: Any, request_id: str) -> dict[str, Any]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        params = SamplingParams(max_tokens=max_tokens, min_tokens=max_tokens, ignore_eos=True, temperature=0,
                                output_kind=RequestOutputKind.DELTA)
        started = time.perf_counter()
        first = None
        tokens = 0
        async for output in engine.generate(TokensPrompt(prompt_token_ids=prompt), params, request_id,
                                            lora_request=lora):
            new = len(output.outputs[0].token_ids)
            if new and first is None:
                first = time.perf_counter()
            tokens += new
        ended = time.perf_counter()
        return {"adapter": lora.lora_int_id if lora else 0, "ttft_s": (first or ended) - started,
                "e2e_s": ended - started, "output_tokens": tokens}

    async def closed_loop(self, engine: Any, loras: Sequence[Any], concurrency: int, total: int, max_tokens: int,
                          tag: str) -> tuple[list[dict[str, Any]], float]:
        prompts = self.next_prompts(total)
        next_index = 0
        records: list[dict[str, Any]] = []

        async def client() -> None:
            nonlocal next_index
            while next_index < total:
                index = next_index
                next_index += 1
                lora = loras[index % len(loras)]
                records.append(await self.one(engine, prompts[index], max_tokens, lora, f"{tag}-{index}"))

        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(concurrency)))
        return records, time.perf_counter() - started

    async def first_loads(self, engine: Any, loras: Sequence[Any]) -> dict[str, Any]:
        """Each adapter's first request (it loads the adapter) and its next, one at a time."""
        base = [(await self.one(engine, p, 1, None, f"base-{i}"))["ttft_s"] * 1000
                for i, p in enumerate(self.next_prompts(5))]
        cold, warm = [], []
        for phase, into in (("cold", cold), ("warm", warm)):
            for lora, prompt in zip(loras, self.next_prompts(len(loras))):
                into.append((await self.one(engine, prompt, 1, lora, f"{phase}-{lora.lora_int_id}"))["ttft_s"] * 1000)
        rest = cold[1:] or cold
        return {
            "requests": "one at a time, max_tokens 1; each adapter once (cold: it is loaded), then each again",
            "base_ttft_ms": base, "cold_ttft_ms": cold, "warm_ttft_ms": warm,
            "base_ttft_ms_p50": percentile(base, 50), "first_adapter_cold_ttft_ms": cold[0],
            "cold_ttft_ms_p50": percentile(rest, 50), "cold_ttft_ms_max": max(rest),
            "warm_ttft_ms_p50": percentile(warm, 50),
            "load_cost_ms_p50": percentile([c - w for c, w in zip(cold, warm)], 50),
        }

    async def run(self) -> dict[str, Any]:
        import multiprocessing

        import vllm
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.lora.request import LoRARequest
        from vllm.v1.engine.async_llm import AsyncLLM

        args, result = self.args, self.result
        base_config = json.loads((args.model / "config.json").read_text())
        result["vllm_version"] = vllm.__version__
        result["model"] = args.model.name
        result["workload"] = {"prompt_tokens": args.prompt_tokens, "output_tokens": args.output_tokens,
                              "rounds": args.rounds, "min_requests": args.min_requests,
                              "warmup_tokens": args.warmup_tokens,
                              "prompts": "random token ids, a fresh prompt per request", "closed_loop": True}
        # The adapters are written by a pool of processes while the engine starts (forked
        # before any CUDA use in this process).
        jobs = adapter_jobs(args, base_config) if args.rank else []
        pool = multiprocessing.get_context("fork").Pool(min(len(jobs), os.cpu_count() or 1)) if jobs else None
        writing = pool.map_async(_write_one_adapter, jobs) if pool else None
        writes_began = time.perf_counter()
        engine_kwargs = dict(
            model=str(args.model), load_format=args.load_format, max_model_len=args.max_model_len,
            max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
            gpu_memory_utilization=args.gpu_memory_utilization, enable_prefix_caching=False,
            disable_log_stats=True, seed=args.seed,
            **json.loads(args.engine_kwargs or "{}"))
        if args.rank:
            engine_kwargs.update(enable_lora=True, max_loras=args.max_loras, max_lora_rank=args.rank,
                                 max_cpu_loras=args.max_cpu_loras)
        result["engine"] = {**{k: v for k, v in engine_kwargs.items() if k != "model"},
                            "enable_lora": bool(args.rank), "max_lora_rank": args.rank or None,
                            "enable_prefix_caching": False}
        started = time.perf_counter()
        engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**engine_kwargs))
        result["engine"]["start_s"] = time.perf_counter() - started
        try:
            loras = []
            if writing is not None:
                sizes = writing.get()
                pool.close()
                result["adapter_files"] = {"count": len(jobs), "rank": args.rank, "target_modules": list(args.modules),
                                           "dtype": "float16", "bytes_each": statistics.median(sizes),
                                           "written_by_s": time.perf_counter() - writes_began,
                                           "writer": "bench.synthetic_adapters.write_random_adapter"}
                loras = [LoRARequest(f"r{args.rank}-a{i:02d}", i, job[0]) for i, job in enumerate(jobs, start=1)]
            print(f"engine started in {result['engine']['start_s']:.1f} s", flush=True)
            # Warm the engine itself (first batches of each shape) before anything is timed.
            await self.closed_loop(engine, [None], min(args.concurrency), min(args.concurrency), args.warmup_tokens,
                                   "engine-warmup")
            if loras:
                result["first_load"] = await self.first_loads(engine, loras)
                self.save()
                print("first loads:", json.dumps({k: v for k, v in result["first_load"].items()
                                                  if not isinstance(v, list)}), flush=True)
            plan = [(count, False) for count in args.adapters] + [(count, True) for count in args.mixed]
            for concurrency in args.concurrency:
                for count, mixed in plan:
                    rotating = [loras[index - 1] if index else None for index in rotation(count, mixed)]
                    tag = f"{'mixed-' if mixed else ''}{count}-{concurrency}"
                    await self.closed_loop(engine, rotating, concurrency, concurrency, args.warmup_tokens,
                                           f"warm-{tag}")
                    records, wall = await self.closed_loop(engine, rotating, concurrency,
                                                           cell_requests(concurrency, args.rounds, args.min_requests),
                                                           args.output_tokens, f"cell-{tag}")
                    cell = {"adapters": count, "concurrency": concurrency, "summary": summarize(records, wall)}
                    if mixed:
                        cell["mixed"] = True
                        cell["summary"]["by_kind"] = latency_by_kind(records)
                    result["cells"].append(cell)
                    self.save()
                    s = cell["summary"]
                    print(f"adapters {count:>2}{' mixed' if mixed else ''} in flight {concurrency:>3}: "
                          f"{s['output_tokens_per_s']:.0f} out tok/s, "
                          f"TTFT p50 {s['ttft_ms']['p50']:.1f} p99 {s['ttft_ms']['p99']:.1f} ms, "
                          f"TPOT p50 {s['tpot_ms']['p50']:.2f} ms", flush=True)
        finally:
            engine.shutdown()
            if pool is not None:
                pool.terminate()
        try:
            import torch

            result["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
            result["torch_version"] = torch.__version__
        except Exception as error:  # the figures stand without the name
            result["device"] = f"unknown ({error})"
        accelerator = accelerator_for(result["device"])
        if accelerator:
            try:
                prices = hourly_prices(accelerator)
                result["prices"] = prices
                for cell in result["cells"]:
                    cell["usd_per_1m_tokens"] = usd_per_1m_tokens(prices["gpu_usd_per_hour"],
                                                                  cell["summary"]["output_tokens_per_s"])
            except Exception as error:  # `table` prices the runs again from the catalog
                result["prices"] = f"not priced here: {error}"
        self.save()
        return result


def run_command(args: argparse.Namespace, argv: Sequence[str]) -> int:
    command = "python -m bench.adapters_gpu " + " ".join(argv)
    measurement = Measurement(args, command)
    result = asyncio.run(measurement.run())
    path = measurement.save()
    runs = [result]
    prices = result["prices"] if isinstance(result.get("prices"), dict) else None
    print(table_markdown(combine(runs, prices), runs))
    print(f"wrote {path}")
    return 0


def table_command(args: argparse.Namespace, argv: Sequence[str],
                  price_lookup: Callable[..., dict[str, Any]] = hourly_prices) -> int:
    runs = [json.loads(path.read_text()) for path in args.runs]
    accelerator = args.accelerator or next((a for a in (accelerator_for(r.get("device")) for r in runs) if a), None)
    prices = price_lookup(accelerator, args.purchase, args.catalog) if accelerator else None
    result = {"command": "python -m bench.adapters_gpu " + " ".join(argv), **combine(runs, prices)}
    text = table_markdown(result, runs)
    if args.out:
        write_json(result, args.out, args.name)
        (args.out / f"{args.name}.md").write_text(f"# {args.name}\n\nCommand: `{result['command']}`\n\n{text}")
    print(text)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.command == "run":
        return run_command(args, argv)
    return table_command(args, argv)


if __name__ == "__main__":
    raise SystemExit(main())
