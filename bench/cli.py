"""`trilemma bench ...`: the benchmark commands."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Callable

from bench.adapter_isolation import add_adapter_isolation_command
from bench.adapter_mix import add_adapters_command
from bench.arrivals import LoadShape
from bench.autoscale.cli import add_commands as add_autoscale_commands
from bench.board_png import add_board_command
from bench.chaos.cli import add_chaos_command
from bench.cli_common import (
    RESULTS_DIR,
    add_api_key_arg,
    add_app_args,
    add_output_args,
    app_config,
    command_line,
    fail,
    shown_path,
)
from bench.colocate import add_command as add_colocate_command
from bench.datasets import DATASETS, DatasetError, load_dataset
from bench.hops import add_hops_command
from bench.metrics import Slo
from bench.parity.cli import add_parity_command
from bench.quality.cli import add_quality_command
from bench.replay.cli import add_replay_command
from bench.report import ReportError, write_report, write_sweep
from bench.result_files import markdown_table, write_json, write_results
from bench.runner import EndpointError, Workload, resolve_model, run_point, warm_up
from bench.soak.cli import add_soak_command
from bench.start_time import add_start_command
from bench.stops.cli import add_stops_command
from bench.sweep import Knob, SweepError, parse_values, run_sweep
from bench.vs_vllm import add_vs_vllm_command
from bench.wake import add_wake_command
from core.config import ConfigError, TrilemmaConfig


def _add_workload_args(parser: argparse.ArgumentParser, *, single_load: bool) -> None:
    """What is sent: the prompts, the load shape, rounds, SLOs."""
    parser.add_argument("--dataset", default="docs", choices=DATASETS)
    parser.add_argument("--dataset-path", type=Path, help="the JSONL file for --dataset jsonl")
    parser.add_argument("--num-prompts", type=int, default=50, help="requests per round")
    load = parser.add_mutually_exclusive_group()
    several = "" if single_load else ", comma-separated for several load points"
    load.add_argument("--rate", type=str, help=f"Poisson request rate{several}")
    load.add_argument("--concurrency", type=str, help=f"requests in flight{several}")
    parser.add_argument("--rounds", type=int, default=1, help="rounds per load point")
    parser.add_argument("--warmup", type=int, default=2, help="requests sent first and not counted")
    parser.add_argument("--scenario", help="X-Scenario for every request (default: the server's)")
    parser.add_argument("--slo", action="append", default=[], metavar="SCENARIO:ttft_ms=N,tpot_ms=N",
                        help="an SLO for goodput; repeat per scenario")
    parser.add_argument("--ignore-eos", action="store_true",
                        help="generate exactly max_tokens per request (vLLM's ignore_eos)")
    parser.add_argument("--seed", type=int, default=0)


def add_commands(commands: argparse._SubParsersAction) -> None:
    bench = commands.add_parser("bench", help="measure an OpenAI-compatible endpoint")
    sub = bench.add_subparsers(dest="bench_command", required=True)

    # No abbreviations: `--api` for `--api-key` would slip the key past the results' masking.
    run = sub.add_parser("run", help="load an endpoint and report latency, throughput, goodput, cost",
                         allow_abbrev=False)
    run.add_argument("--url", default="http://127.0.0.1:8000", help="base URL (without /v1)")
    run.add_argument("--model", help="model name; default: the first one /v1/models lists")
    add_api_key_arg(run)
    _add_workload_args(run, single_load=False)
    add_output_args(run, "bench")
    run.set_defaults(func=bench_run)

    sweep = sub.add_parser("sweep", help="one config knob over a grid, the app restarted per point; "
                                         "finds the knee", allow_abbrev=False)
    add_app_args(sweep)
    sweep.add_argument("--knob", required=True, metavar="DOTTED.PATH",
                       help="e.g. pools.short.max_num_seqs, pools.short.max_ongoing_requests, "
                            "pools.short.replicas, routing.short_context_threshold_tokens")
    sweep.add_argument("--values", required=True, help="comma-separated settings, e.g. 1,2,4,8")
    _add_workload_args(sweep, single_load=True)
    add_output_args(sweep, "sweep")
    sweep.set_defaults(func=bench_sweep)

    overhead = sub.add_parser("overhead", help="the same workload straight to a pool and through "
                                               "the router, interleaved", allow_abbrev=False)
    add_app_args(overhead)
    overhead.add_argument("--pool", default="short", help="the pool both paths reach")
    overhead.add_argument("--num-prompts", type=int, default=24, help="requests per arm per round")
    overhead.add_argument("--rounds", type=int, default=8, help="rounds per arm (ABBA order)")
    overhead.add_argument("--concurrency", type=int, default=4)
    overhead.add_argument("--max-tokens", type=int, default=64, help="tokens every request generates")
    overhead.add_argument("--warmup", type=int, default=4)
    overhead.add_argument("--seed", type=int, default=0)
    add_output_args(overhead, "overhead")
    overhead.set_defaults(func=bench_overhead)

    isolation = sub.add_parser("isolation", help="short-request latency under long documents: split "
                                                 "pools with priority against one shared pool", allow_abbrev=False)
    add_app_args(isolation)
    isolation.add_argument("--rate", type=float, default=1.0, help="Poisson arrivals per second, all kinds")
    isolation.add_argument("--num-prompts", type=int, default=120, help="requests of the mixed load")
    isolation.add_argument("--long-fraction", type=float, default=0.05, help="share of arrivals that are long documents")
    isolation.add_argument("--long-words", type=int, default=3000, help="words per long document")
    isolation.add_argument("--short-scenario", default="chat")
    isolation.add_argument("--long-scenario", default="batch")
    isolation.add_argument("--overload-rate", type=float, default=6.0,
                           help="Poisson rate of the overload phase (short chat and batch alternating); 0 skips it")
    isolation.add_argument("--overload-prompts", type=int, default=60)
    isolation.add_argument("--arm", choices=("both", "split", "shared"), default="both",
                           help="deploy only one side (for hosts that limit how long a command runs)")
    isolation.add_argument("--with", dest="with_result", type=Path, metavar="JSON",
                           help="an earlier run's result whose phases complete this one")
    isolation.add_argument("--warmup-s", type=float, default=30.0,
                           help="seconds of the mixed schedule each deployment serves uncounted first")
    isolation.add_argument("--ignore-eos", action="store_true",
                           help="generate exactly max_tokens per request (for random weights)")
    isolation.add_argument("--seed", type=int, default=0)
    add_output_args(isolation, "isolation")
    isolation.set_defaults(func=bench_isolation)

    add_hops_command(sub)
    add_vs_vllm_command(sub)
    add_start_command(sub)
    add_quality_command(sub)
    add_wake_command(sub)
    add_parity_command(sub)
    add_adapters_command(sub)
    add_adapter_isolation_command(sub)
    add_replay_command(sub)
    add_stops_command(sub)
    add_chaos_command(sub)
    add_soak_command(sub)
    add_board_command(sub)
    report = sub.add_parser("report", help="result files -> markdown report with PNG plots")
    report.add_argument("results", nargs="+", type=Path, help="JSON files from bench run, sweep or quality")
    report.add_argument("--out", type=Path, default=RESULTS_DIR / "report", help="report folder")
    report.add_argument("--title", default="Benchmark report")
    report.set_defaults(func=bench_report)

    export = sub.add_parser("dataset", help="write a prompt set as JSONL (for other clients too)")
    export.add_argument("--dataset", default="docs", choices=[d for d in DATASETS if d != "jsonl"])
    export.add_argument("--num-prompts", type=int, default=50)
    export.add_argument("--seed", type=int, default=0)
    export.add_argument("--out", type=Path, required=True, help="JSONL file to write")
    export.set_defaults(func=bench_dataset)

    add_autoscale_commands(sub)
    add_colocate_command(sub)


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


def _workload(args: argparse.Namespace, slos: dict[str, Slo]) -> Workload:
    return Workload.build(
        args.dataset, num_prompts=args.num_prompts, rounds=args.rounds, warmup=args.warmup,
        slos=slos, seed=args.seed, path=args.dataset_path, scenario=args.scenario,
        ignore_eos=args.ignore_eos,
    )


def bench_run(args: argparse.Namespace) -> int:
    try:
        slos = dict(parse_slo(spec) for spec in args.slo)
        loads = _loads(args)
        workload = _workload(args, slos)
        model = args.model or resolve_model(args.url)
    except (argparse.ArgumentTypeError, DatasetError, EndpointError, ValueError) as error:
        return fail(error)
    warm_up(args.url, workload, model, args.api_key)
    points = [
        point
        for shape in loads
        for point in run_point(args.url, workload, shape, model=model, progress=not args.no_progress,
                               api_key=args.api_key)
    ]
    result = {
        "command": command_line(args),
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


def bench_sweep(args: argparse.Namespace) -> int:
    # Imported here: Ray Serve LLM loads vLLM, seconds that the other commands need not pay.
    from serve_app.launcher import deployed, shutdown_local_ray

    try:
        config = app_config(args)
        knob, values = Knob(args.knob), parse_values(args.values)
        slos = dict(parse_slo(spec) for spec in args.slo)
        loads = _loads(args)
        if len(loads) != 1:
            raise SweepError("a sweep measures every setting at one load: give one --rate or --concurrency")
        shape = loads[0]
        workload = _workload(args, slos)
    except (argparse.ArgumentTypeError, ConfigError, DatasetError, SweepError, ValueError) as error:
        return fail(error)

    def measure(point_config: TrilemmaConfig) -> list[dict]:
        with deployed(point_config) as url:
            warm_up(url, workload, point_config.model.name, args.api_key)
            return run_point(url, workload, shape, model=point_config.model.name, api_key=args.api_key,
                             progress=not args.no_progress)

    try:
        sweep = run_sweep(config, knob, values, measure, slos)
    except (ConfigError, SweepError) as error:
        return fail(error)
    finally:
        shutdown_local_ray()
    result = {
        "kind": "sweep",
        "command": command_line(args),
        "config": {
            "app_config": shown_path(args.config), "load": shape.describe(), "dataset": args.dataset,
            "num_prompts": args.num_prompts, "rounds": args.rounds, "warmup": args.warmup,
            "seed": args.seed, "slos": {name: vars(slo) for name, slo in slos.items()}, "set": args.set,
        },
        **sweep,
    }
    name = args.name or time.strftime("sweep-%Y%m%d-%H%M%S")
    json_path, md_path = write_sweep(result, args.out, name)
    print(md_path.read_text())
    print(f"wrote {json_path} and {md_path}")
    return 0


def bench_overhead(args: argparse.Namespace) -> int:
    from bench.overhead import markdown as overhead_markdown
    from bench.overhead import measure_overhead
    from serve_app.launcher import shutdown_local_ray

    try:
        config = app_config(args)
        if args.pool not in config.pools:
            raise ValueError(f"--pool {args.pool!r} is not in {args.config}; pools: {sorted(config.pools)}")
    except (ConfigError, ValueError) as error:
        return fail(error)
    try:
        result = measure_overhead(
            config, pool=args.pool, num_prompts=args.num_prompts, rounds=args.rounds,
            concurrency=args.concurrency, warmup=args.warmup, max_tokens=args.max_tokens,
            seed=args.seed, progress=not args.no_progress, api_key=args.api_key,
        )
    finally:
        shutdown_local_ray()
    settings = ("pool", "num_prompts", "rounds", "concurrency", "max_tokens", "warmup", "seed", "set")
    return _write_app_result("overhead", args, settings, result, overhead_markdown)


def bench_isolation(args: argparse.Namespace) -> int:
    from bench.isolation import markdown as isolation_markdown
    from bench.isolation import measure_isolation, mixed_load, overload, warmup_load
    from serve_app.launcher import shutdown_local_ray

    try:
        config = app_config(args)
        for option in ("short_scenario", "long_scenario"):
            if getattr(args, option) not in config.scenarios:
                raise ValueError(f"--{option.replace('_', '-')} {getattr(args, option)!r} is not a scenario "
                                 f"of {args.config}; scenarios: {sorted(config.scenarios)}")
        if not 0 < args.long_fraction < 1:
            raise ValueError(f"--long-fraction must be between 0 and 1, got {args.long_fraction}")
        load = mixed_load(args.num_prompts, rate_rps=args.rate, long_fraction=args.long_fraction,
                          long_words=args.long_words, short_scenario=args.short_scenario,
                          long_scenario=args.long_scenario, seed=args.seed, ignore_eos=args.ignore_eos)
        earlier = _earlier_arm(args)
        surge = (overload(args.overload_prompts, rate_rps=args.overload_rate,
                          scenarios=(args.short_scenario, args.long_scenario), seed=args.seed,
                          ignore_eos=args.ignore_eos)
                 if args.overload_rate > 0 else None)
    except (ConfigError, ValueError, DatasetError, OSError) as error:
        return fail(error)
    try:
        result = measure_isolation(
            config, load, short_scenario=args.short_scenario, overload_load=surge,
            progress=not args.no_progress, api_key=args.api_key,
            metrics_url=f"http://127.0.0.1:{config.local_ray.metrics_export_port}/metrics",
            warmup=warmup_load(load, args.warmup_s),
            arms=("split", "shared") if args.arm == "both" else (args.arm,), earlier=earlier,
        )
    finally:
        shutdown_local_ray()
    settings = ("rate", "num_prompts", "long_fraction", "long_words", "short_scenario", "long_scenario",
                "overload_rate", "overload_prompts", "warmup_s", "ignore_eos", "seed", "set", "arm")
    return _write_app_result("isolation", args, settings, result, isolation_markdown)


def _earlier_arm(args: argparse.Namespace) -> dict | None:
    """The split arm's result that `--with` names, checked to be of the same load and config."""
    if args.with_result is None:
        return None
    if args.arm != "shared":
        raise ValueError("--with completes an earlier split-arm run: use it with --arm shared")
    earlier = json.loads(args.with_result.read_text())
    same = ("rate", "num_prompts", "long_fraction", "long_words", "short_scenario", "long_scenario",
            "warmup_s", "ignore_eos", "seed", "set")
    differing = [key for key in same if earlier.get("config", {}).get(key) != getattr(args, key)]
    if earlier.get("config", {}).get("app_config") != shown_path(args.config):
        differing.append("config")
    if differing:
        raise ValueError(f"--with {args.with_result}: its run differs in {differing}; both arms need the same")
    return earlier


def _write_app_result(kind: str, args: argparse.Namespace, settings: tuple[str, ...], result: dict,
                      markdown: Callable[[dict], str]) -> int:
    """JSON and markdown of a command that deployed the app, each with its command and settings."""
    result = {"kind": kind, "command": command_line(args),
              "config": {"app_config": shown_path(args.config), **{k: getattr(args, k) for k in settings}},
              **result}
    name = args.name or time.strftime(f"{kind}-%Y%m%d-%H%M%S")
    json_path, md_path = write_json(result, args.out, name), args.out / f"{name}.md"
    md_path.write_text(f"# {name}\n\nCommand: `{result['command']}`\n\n{markdown(result)}")
    print(markdown(result))
    print(f"wrote {json_path} and {md_path}")
    return 0


def bench_report(args: argparse.Namespace) -> int:
    try:
        path = write_report(args.results, args.out, title=args.title, command=command_line(args))
    except ReportError as error:
        return fail(error)
    print(f"wrote {path} and its plots")
    return 0
