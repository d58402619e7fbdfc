"""`trilemma bench quality`: every pool's perplexity and task score beside its $ per 1M tokens
and first-token time, one row and one point per pool and precision.

The app is the config's (deployed here, or already serving it at `--app-url`): the config
says which model and precision each pool's engine runs. Each pool is set against the
reference pool (`--reference`, default the first): its quality loss (perplexity added, task
points lost) beside its saving, the trade the cost profile is asked to make.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import statistics
from pathlib import Path
from typing import Any

import httpx

from bench import machine, plots
from bench.app_ready import wait_until_serving
from bench.cli_common import add_app_args, add_output_args, app_config, command_line, fail, shown_path
from bench.quality.run import BURST_TOKENS, PoolClient, score_pool
from bench.quality.scores import heldout_passages, tasks
from bench.result_files import fmt, write_json
from core.config import ConfigError, TrilemmaConfig
from core.model_store import resolve_model_source


def pool_precision(config: TrilemmaConfig, pool: str, source: str) -> dict[str, Any]:
    """The pool engine's weights and KV cache precision, as the app starts it (on a CPU, the
    dtype the pool picks for this CPU)."""
    from bench.vs_vllm import pool_engine  # Ray Serve LLM: loaded when a run starts

    engine_kwargs, _ = pool_engine(config, pool, source)
    # The pool's own name for it: `w8a8-int8` reaches vLLM as the checkpoint's format.
    quantization = config.pools[pool].quantization or engine_kwargs.get("quantization")
    return {"dtype": str(engine_kwargs.get("dtype", "auto")), "quantization": quantization,
            "kv_cache_dtype": str(engine_kwargs.get("kv_cache_dtype", "auto"))}


def scoring_scenario(config: TrilemmaConfig, pool: str) -> str | None:
    """The scenario a pool is scored in: one that may use the pool and serves its model, with the
    loosest max_tokens cap (a cap would cut the summaries), then one that leaves the prompts as
    they are, then the most urgent. None when no scenario reaches the pool."""
    model = config.pool_model(pool).name
    reaching = [name for name, scenario in config.scenarios.items() if pool in config.pools_serving(model, scenario)]
    if not reaching:
        return None
    return min(reaching, key=lambda name: (-(config.scenarios[name].max_tokens_cap or math.inf),
                                           config.scenarios[name].normalize_whitespace,
                                           config.scenarios[name].priority))


def precision_label(precision: dict[str, Any]) -> str:
    parts = [precision["quantization"] or precision["dtype"]]
    if precision["kv_cache_dtype"] != "auto":
        parts.append(f"KV {precision['kv_cache_dtype']}")
    return ", ".join(parts)


def against_reference(pools: list[dict[str, Any]], reference: str) -> None:
    """Adds to each pool what it gives up and saves against the reference pool."""
    ref = next(p for p in pools if p["pool"] == reference)
    for p in pools:
        p["perplexity_added"] = p["perplexity"] - ref["perplexity"]
        p["task_points_lost"] = (ref["task_score"] - p["task_score"]) * 100
        both_priced = p["usd_per_1m_tokens"] is not None and ref["usd_per_1m_tokens"]
        p["saving"] = 1 - p["usd_per_1m_tokens"] / ref["usd_per_1m_tokens"] if both_priced else None


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"# {result['name']}", "", f"Command: `{result['command']}`", "",
        f"On {result['machine']}, models `{result['model']}`. Perplexity over {result['passages']} held-out "
        f"passages (bench/quality/heldout.txt, the engine's prompt log-probabilities); task: "
        f"{result['task_total']} questions with exact answers (bench/quality/tasks.jsonl), greedy. $ per 1M "
        "tokens: what the app billed these requests (prompt and answer tokens); TTFT: the task's streamed "
        f"questions, one at a time; speed: {result['pools'][0]['burst_in_flight']} completions of "
        f"{result['burst_tokens']} tokens at once; summary tokens: the greedy summary of each passage, the "
        "median and the longest (what the cost profile's token cap would cut of them). "
        f"Against pool `{result['reference']}`.", "",
        "| pool | model | precision | perplexity | task score | $/1M tokens | TTFT p50 / p99 (ms) "
        "| out tok/s at a burst | summary tokens p50 / max | perplexity added | task points lost | saving |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p in result["pools"]:
        saving = "-" if p["saving"] is None else f"{p['saving']:.0%}"
        usd = "-" if p["usd_per_1m_tokens"] is None else f"{p['usd_per_1m_tokens']:.4f}"
        lines.append(
            f"| {p['pool']} | {p.get('model', result['model'])} | {p['precision_label']} | {p['perplexity']:.2f} "
            f"| {p['task_right']}/{p['task_total']} "
            f"| {usd} | {fmt(p['ttft_ms']['p50'], 0)} / {fmt(p['ttft_ms']['p99'], 0)} "
            f"| {fmt(p['burst_output_tokens_per_s'])} | {_answer_lengths(p)} "
            f"| {p['perplexity_added']:+.2f} | {p['task_points_lost']:+.1f} | {saving} |")
    lines += ["", f"![quality]({result['plot']})", ""]
    return "\n".join(lines)


def _answer_lengths(pool: dict[str, Any]) -> str:
    lengths = pool.get("answer_tokens") or []
    return f"{statistics.median(lengths):.0f} / {max(lengths)}" if lengths else "-"


def add_quality_command(sub: argparse._SubParsersAction) -> None:
    quality = sub.add_parser("quality", help="every pool's perplexity and task score beside its cost and "
                                             "first-token time", allow_abbrev=False)
    add_app_args(quality)
    quality.add_argument("--app-url", help="an app already serving this config (default: deploy it here)")
    quality.add_argument("--pools", help="comma-separated pools to score (default: every pool)")
    quality.add_argument("--reference", help="the pool the others are set against (default: the first)")
    quality.add_argument("--burst-in-flight", type=int, default=8,
                         help="completions sent at once for each pool's speed (default 8; more on a GPU)")
    quality.add_argument("--answer-max-tokens", type=int, default=256,
                         help="measure each pool's summaries of the passages up to this many tokens: what the "
                              "cost profile's token cap would cut (default 256; 0 skips)")
    quality.add_argument("--ready-timeout-s", type=float, default=900.0)
    add_output_args(quality, "quality")
    quality.set_defaults(func=bench_quality)


def bench_quality(args: argparse.Namespace) -> int:
    try:
        config = app_config(args)
        pools = args.pools.split(",") if args.pools else list(config.pools)
        unknown = sorted(set(pools) - set(config.pools))
        if unknown:
            raise ConfigError(f"no pools {unknown}; pools: {sorted(config.pools)}")
        reference = args.reference or pools[0]
        scenarios = {pool: scoring_scenario(config, pool) for pool in pools}
        unreached = sorted(pool for pool, scenario in scenarios.items() if scenario is None)
        if unreached:
            raise ConfigError(f"no scenario may use pools {unreached} with their models: they cannot be scored")
        if args.burst_in_flight < 1:
            raise ConfigError(f"--burst-in-flight must be at least 1, got {args.burst_in_flight}")
        if reference not in pools:
            raise ConfigError(f"the reference pool {reference!r} is not among the scored pools {pools}")
    except (ConfigError, ValueError) as error:
        return fail(error)
    passages, questions = heldout_passages(), tasks()
    scored = []
    with contextlib.ExitStack() as stack:
        try:
            if args.app_url:
                url = args.app_url.rstrip("/")
            else:
                from serve_app.launcher import deployed, shutdown_local_ray

                stack.callback(shutdown_local_ray)
                url = stack.enter_context(deployed(config))
            wait_until_serving(url, args.ready_timeout_s)
            for pool in pools:
                print(f"quality: pool {pool} ...", flush=True)
                model, scenario = config.pool_model(pool), scenarios[pool]
                # A summary longer than the scenario's cap would be cut there: measured up to the cap.
                cap = config.scenarios[scenario].max_tokens_cap
                answer_max_tokens = min(args.answer_max_tokens, cap) if cap else args.answer_max_tokens
                row = score_pool(PoolClient(url, model.name, pool, args.api_key, scenario), passages, questions,
                                 in_flight=args.burst_in_flight, answer_max_tokens=answer_max_tokens)
                row["model"], row["scenario"] = model.name, scenario
                row["precision"] = pool_precision(config, pool, resolve_model_source(model.source))
                row["precision_label"] = precision_label(row["precision"])
                print(f"quality: pool {pool}: perplexity {row['perplexity']:.2f}, task {row['task_right']}/"
                      f"{row['task_total']}", flush=True)
                scored.append(row)
        except (ValueError, httpx.HTTPError) as error:
            return fail(error)
    against_reference(scored, reference)
    name = args.name or "quality"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plot = plots.quality_corners(scored, out / f"{name}.png")
    result = {"name": name, "command": command_line(args), "machine": machine.describe(),
              "model": ", ".join(dict.fromkeys(row["model"] for row in scored)),
              "passages": len(passages), "task_total": len(questions), "reference": reference,
              "burst_tokens": BURST_TOKENS, "plot": plot.name, "pools": scored}
    json_path = write_json(result, out, name)
    md_path = json_path.with_suffix(".md")
    md_path.write_text(markdown(result))
    print(md_path.read_text())
    print(f"results: {shown_path(json_path)}, {shown_path(md_path)}, {shown_path(plot)}")
    return 0
