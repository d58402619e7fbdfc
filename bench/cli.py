"""`trilemma bench ...`: the benchmark commands."""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path

import httpx

from bench.arrivals import LoadShape
from bench.datasets import DatasetError, load_dataset
from bench.load_generator import run_load
from bench.metrics import Slo, summarize
from bench.results import markdown_table, write_results

RESULTS_DIR = Path("bench/results")


def add_commands(commands: argparse._SubParsersAction) -> None:
    bench = commands.add_parser("bench", help="measure an OpenAI-compatible endpoint")
    sub = bench.add_subparsers(dest="bench_command", required=True)
    run = sub.add_parser("run", help="load an endpoint and report latency, throughput, goodput, cost")
    run.add_argument("--url", default="http://127.0.0.1:8000", help="base URL (without /v1)")
    run.add_argument("--model", help="model name; default: the first one /v1/models lists")
    run.add_argument("--dataset", default="docs", choices=["docs", "random", "shared-prefix", "jsonl"])
    run.add_argument("--dataset-path", type=Path, help="the JSONL file for --dataset jsonl")
    run.add_argument("--num-prompts", type=int, default=50, help="requests per round")
    load = run.add_mutually_exclusive_group()
    load.add_argument("--rate", type=str, help="Poisson request rate(s), comma-separated for a sweep")
    load.add_argument("--concurrency", type=str, help="requests in flight, comma-separated for a sweep")
    run.add_argument("--rounds", type=int, default=1, help="rounds per load point")
    run.add_argument("--warmup", type=int, default=2, help="requests sent first and not counted")
    run.add_argument("--scenario", help="X-Scenario for every request (default: the server's)")
    run.add_argument("--slo", action="append", default=[], metavar="SCENARIO:ttft_ms=N,tpot_ms=N",
                     help="an SLO for goodput; repeat per scenario")
    run.add_argument("--ignore-eos", action="store_true",
                     help="generate exactly max_tokens per request (vLLM's ignore_eos)")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--out", type=Path, default=RESULTS_DIR, help="results folder")
    run.add_argument("--name", help="results file name (default: bench-<time>)")
    run.add_argument("--no-progress", action="store_true")
    run.set_defaults(func=bench_run)
    export = sub.add_parser("dataset", help="write a prompt set as JSONL (for other clients too)")
    export.add_argument("--dataset", default="docs", choices=["docs", "random", "shared-prefix"])
    export.add_argument("--num-prompts", type=int, default=50)
    export.add_argument("--seed", type=int, default=0)
    export.add_argument("--out", type=Path, required=True, help="JSONL file to write")
    export.set_defaults(func=bench_dataset)


def bench_dataset(args: argparse.Namespace) -> int:
    """One {"prompt", "max_tokens", "kind"} line per prompt: the shape `vllm bench serve
    --dataset-name custom` reads, and `--dataset jsonl` here."""
    prompts = load_dataset(args.dataset, args.num_prompts, seed=args.seed)
    with args.out.open("w") as out:
        for prompt in prompts:
            text = "\n\n".join(m["content"] for m in prompt.messages)
            out.write(json.dumps({"prompt": text, "max_tokens": prompt.max_tokens, "kind": prompt.kind}) + "\n")
    print(f"wrote {len(prompts)} prompts to {args.out}")
    return 0


def parse_slo(spec: str) -> tuple[str, Slo]:
    """`chat:ttft_ms=500,tpot_ms=100` -> ("chat", Slo(0.5, 0.1))."""
    try:
        scenario, limits = spec.split(":", 1)
        values = dict(part.split("=", 1) for part in limits.split(","))
        unknown = set(values) - {"ttft_ms", "tpot_ms", "e2e_ms"}
        if unknown:
            raise ValueError(f"unknown limits {sorted(unknown)}")
        return scenario, Slo(**{k.removesuffix("_ms") + "_s": float(v) / 1000 for k, v in values.items()})
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"bad --slo {spec!r}: {error}") from None


def _loads(args: argparse.Namespace) -> list[LoadShape]:
    if args.rate:
        return [LoadShape(rate_rps=float(r)) for r in args.rate.split(",")]
    if args.concurrency:
        return [LoadShape(concurrency=int(c)) for c in args.concurrency.split(",")]
    return [LoadShape(concurrency=1)]


def bench_run(args: argparse.Namespace) -> int:
    try:
        slos = dict(parse_slo(spec) for spec in args.slo)
        loads = _loads(args)
        prompts = load_dataset(args.dataset, args.num_prompts * args.rounds + args.warmup,
                               path=args.dataset_path, seed=args.seed)
    except (argparse.ArgumentTypeError, DatasetError, ValueError) as error:
        print(f"trilemma bench: {error}", file=sys.stderr)
        return 2
    extra = {"ignore_eos": True} if args.ignore_eos else {}
    prompts = [replace(p, scenario=args.scenario or p.scenario, extra={**p.extra, **extra}) for p in prompts]
    try:
        model = args.model or httpx.get(f"{args.url}/v1/models", timeout=30).json()["data"][0]["id"]
    except (httpx.HTTPError, ValueError, KeyError, IndexError) as error:
        print(f"trilemma bench: cannot list models at {args.url}/v1/models: {error!r}", file=sys.stderr)
        return 2
    command = "trilemma " + shlex.join(args.argv)
    warmup, measured = prompts[: args.warmup], prompts[args.warmup:]
    if warmup:
        asyncio.run(run_load(args.url, warmup, LoadShape(concurrency=len(warmup)), model=model,
                             progress=False))
    points = []
    for shape in loads:
        for round_index in range(args.rounds):
            batch = measured[round_index * args.num_prompts:(round_index + 1) * args.num_prompts]
            records, duration = asyncio.run(run_load(
                args.url, batch, shape, model=model, seed=args.seed + round_index,
                progress=not args.no_progress, label=f"{shape.describe()} round {round_index + 1}",
            ))
            points.append({
                "load": shape.describe(), "round": round_index + 1,
                "summary": summarize(records, duration, slos),
                "records": [r.to_dict() for r in records],
            })
    result = {
        "command": command,
        "config": {
            "url": args.url, "model": model, "dataset": args.dataset, "num_prompts": args.num_prompts,
            "rounds": args.rounds, "warmup": args.warmup, "scenario": args.scenario, "seed": args.seed,
            "ignore_eos": args.ignore_eos,
            "slos": {name: vars(slo) for name, slo in slos.items()},
        },
        "points": points,
    }
    name = args.name or time.strftime("bench-%Y%m%d-%H%M%S")
    json_path, md_path = write_results(result, args.out, name)
    print(markdown_table(points))
    print(f"wrote {json_path} and {md_path}")
    return 0
