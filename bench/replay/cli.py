"""`trilemma bench replay TRACE`: a request trace replayed at its own times against the app, the
app with one shared pool, plain `vllm serve`, or any OpenAI-compatible URL, arm after arm."""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from bench import machine
from bench.cli_common import add_api_key_arg, add_output_args, app_config, command_line, fail, shown_path
from bench.replay.arms import Arm, serving
from bench.replay.figures import LENGTH_BUCKETS, arm_figures, config_slos, fleet_usd_per_hour
from bench.replay.prefix_cache import hit_rates, read_counts
from bench.replay.prompts import PromptBuilder, PromptLengthError
from bench.replay.report import compare, markdown, plot
from bench.replay.send import ENDPOINTS, ReplayRequest, build_requests, replay
from bench.replay.trace import ReplayWindow, ScheduledRequest, TraceFormatError, read_trace, schedule
from bench.result_files import write_json
from core.config import DEFAULT_CONFIG_PATH, ConfigError


def add_replay_command(sub: argparse._SubParsersAction) -> None:
    replay_parser = sub.add_parser(
        "replay", allow_abbrev=False,
        help="replay a request trace (Azure CSV, Mooncake JSONL, plain JSONL) at its own times against the "
             "app, the app with one shared pool, plain vLLM or any URL; goodput, SLOs, latency and $ per arm")
    replay_parser.add_argument("trace", type=Path, help="the trace file; bench/replay/samples has small ones")
    replay_parser.add_argument("--format", default="auto", choices=("auto", "azure", "mooncake", "jsonl"))
    replay_parser.add_argument("--arms", default="app,shared,vllm",
                               help="comma-separated: app, shared, vllm (started here, one after another), "
                                    "or NAME=URL (a server already running)")
    replay_parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG_PATH,
                               help="the app's config: the arms started here, SLOs, prices")
    replay_parser.add_argument("--set", action="append", default=[], metavar="DOTTED.KEY=VALUE",
                               help="override one config key (read as YAML); repeatable")
    add_api_key_arg(replay_parser)
    window = replay_parser.add_argument_group("the window (ReplayWindow)")
    window.add_argument("--start", type=float, default=0.0, help="where in the trace to start (trace seconds)")
    window.add_argument("--duration", type=float, help="seconds of replay (default: to the trace's end)")
    window.add_argument("--rate-scale", default="1",
                        help="k times the trace's request rate (k x duration of trace in duration); "
                             "comma-separated for several, each replayed on the same start of an arm")
    window.add_argument("--speed", type=float, default=1.0, help="the replay's clock s times the trace's "
                        "(a slower machine: below 1)")
    window.add_argument("--token-scale", type=float, default=1.0,
                        help="prompt and output lengths times f (a smaller machine: below 1)")
    window.add_argument("--max-requests", type=int, help="send at most this many")
    replay_parser.add_argument("--endpoint", choices=tuple(ENDPOINTS), default="completions",
                               help="completions: the prompt has exactly the trace's tokens; chat: the "
                                    "chat template's tokens included, at least its own")
    replay_parser.add_argument("--scenario", help="X-Scenario of requests the trace gives none "
                               "(default: the config's default scenario)")
    replay_parser.add_argument("--tokenizer", help="the served model's tokenizer (default: the config's model)")
    replay_parser.add_argument("--rounds", type=int, default=1, help="rounds of every arm, ABAB order")
    replay_parser.add_argument("--warmup", type=int, default=4,
                               help="requests of the window sent at once, uncounted, before each arm's replay")
    replay_parser.add_argument("--seed", type=int, default=0, help="the prompts' words")
    replay_parser.add_argument("--with", dest="with_results", action="append", default=[], type=Path,
                               metavar="JSON", help="an earlier replay's result (same trace, window and rate "
                               "scales) whose arms join this one's, for hosts that limit how long a command runs")
    add_output_args(replay_parser, "replay")
    replay_parser.set_defaults(func=bench_replay)


def bench_replay(args: argparse.Namespace) -> int:
    from core.model_store import resolve_model_source

    try:
        config = app_config(args)
        arms = [Arm.parse(spec.strip()) for spec in args.arms.split(",") if spec.strip()]
        if not arms or args.rounds < 1:
            raise ValueError("give at least one arm and one round")
        if any(arm.url is None and arm.name != "app" for arm in arms):
            from bench.isolation import shared_pool_config

            shared_pool_config(config)  # a config that has no shared pool says so now, before any arm runs
        trace = read_trace(args.trace, args.format)
        rates = [text.strip() for text in args.rate_scale.split(",")]
        windows = {rate: ReplayWindow(start_s=args.start, duration_s=args.duration, rate_scale=float(rate),
                                      speed=args.speed, max_requests=args.max_requests, token_scale=args.token_scale)
                   for rate in rates}
        scheduled = {rate: schedule(trace, window) for rate, window in windows.items()}
        scenario = args.scenario or config.routing.default_scenario
        if scenario not in config.scenarios:
            raise ValueError(f"--scenario {scenario!r} is not a scenario of the config; {sorted(config.scenarios)}")
        model = config.default_model
        source = args.tokenizer or resolve_model_source(config.pool_model(config.pools_serving(model)[0]).source)
        builder = PromptBuilder.for_model(source, block_size=trace.block_size or 512, seed=args.seed)
        # The warm-up's words are its own: the measured requests find none of them in a prefix cache.
        warm_builder = PromptBuilder(builder.tokenizer, block_size=trace.block_size or 512, seed=args.seed + 1)
        block = windows[rates[0]].block_size(trace) or None
        bodies = {rate: build_requests(items, builder, model=model, endpoint=args.endpoint,
                                       default_scenario=scenario, block_size=block)
                  for rate, items in scheduled.items()}
        warm_ups = {rate: build_requests(items[:args.warmup], warm_builder, model=model, endpoint=args.endpoint,
                                         default_scenario=scenario, block_size=block)
                    for rate, items in scheduled.items()}
        from cluster.pricing import pool_rates, resolve_catalog

        catalog = resolve_catalog(config.costs, sorted({pool.accelerator for pool in config.pools.values()}))
        usd_per_hour = fleet_usd_per_hour(config, {n: r.usd_per_hour for n, r in pool_rates(config, catalog).items()})
    except (ConfigError, ValueError, TraceFormatError, PromptLengthError, OSError) as error:
        return fail(error)
    slos = config_slos(config)
    figures: dict[str, dict[str, list[dict[str, Any]]]] = {}
    records: dict[str, dict[str, list[list[dict[str, Any]]]]] = {}
    earlier_runs: list[dict[str, Any]] = []  # the commands that measured the joined arms
    try:
        for path in args.with_results:
            earlier_runs += _join_earlier(path, args, rates, figures, records)
    except (OSError, ValueError, KeyError) as error:
        return fail(error)
    for arm in arms:
        if arm.name in figures:
            return fail(ValueError(f"arm {arm.name!r} is both run here and in a --with result"))
        figures[arm.name], records[arm.name] = {rate: [] for rate in rates}, {rate: [] for rate in rates}
    workdir = Path("build/replay")
    try:
        for index in range(args.rounds):
            for arm in arms if index % 2 == 0 else list(reversed(arms)):
                print(f"round {index + 1}: {arm.name}", flush=True)
                with serving(arm, config, workdir) as url:
                    for rate in rates:
                        _warm_up(url, warm_ups[rate], args.api_key)
                        before = read_counts(url)
                        sent, duration = asyncio.run(replay(url, bodies[rate], api_key=args.api_key,
                                                            progress=not args.no_progress,
                                                            label=f"{arm.name} {rate}x"))
                        # Rates and dollars over the window's length, the same for every arm; the
                        # run's own length (to its last answer) is kept beside them.
                        figures[arm.name][rate].append({
                            **arm_figures(sent, window_seconds(windows[rate], scheduled[rate]), slos, usd_per_hour,
                                          hit_rates(before, read_counts(url))),
                            "run_s": duration})
                        records[arm.name][rate].append([stored_record(asdict(r)) for r in sent])
    finally:
        if any(arm.url is None and arm.name != "vllm" for arm in arms):  # the app's Ray, started here
            from serve_app.launcher import shutdown_local_ray

            shutdown_local_ray()
    summary = trace.describe()
    result = {
        "kind": "replay", "command": command_line(args), "machine": machine.describe(),
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "trace": {"source": shown_path(args.trace), "format": trace.format, "summary": summary.text(),
                  "figures": asdict(summary)},
        "window": {key: value for key, value in asdict(windows[rates[0]]).items() if key != "rate_scale"},
        "rate_scales": rates, "endpoint": args.endpoint, "rounds": args.rounds, "chat_scenario": scenario,
        "seed": args.seed, "warmup": args.warmup,
        "slos": {name: asdict(slo) for name, slo in slos.items()}, "fleet_usd_per_hour": usd_per_hour,
        "length_buckets": [name for _, name in LENGTH_BUCKETS], "arms": figures,
        "comparison": compare(figures, scenario), "earlier_runs": earlier_runs, "records": records,
    }
    name = args.name or f"replay-{time.strftime('%Y%m%d-%H%M%S')}"
    json_path = write_json(result, args.out, name)
    md_path = args.out / f"{name}.md"
    md_path.write_text(markdown(result))
    png_path = plot(result, records, args.out / f"{name}.png")
    print(md_path.read_text())
    print(f"wrote {shown_path(json_path)}, {shown_path(md_path)}, {shown_path(png_path)}")
    return 0


def stored_record(record: dict[str, Any]) -> dict[str, Any]:
    """A request's record with its numbers to 5 significant digits (10 µs of a 0.1 s gap, 1 ms
    of a minute): the stored replay stays a few MB, and no figure moves."""
    def rounded(value: Any) -> Any:
        if isinstance(value, float):
            return float(f"{value:.5g}")
        if isinstance(value, list):
            return [rounded(item) for item in value]
        return value

    return {key: rounded(value) for key, value in record.items()}


def window_seconds(window: ReplayWindow, scheduled: list[ScheduledRequest]) -> float:
    """The replay's wall length: its duration at its speed, or up to its last send."""
    if window.duration_s is not None:
        return window.duration_s / window.speed
    return max(item.send_at_s for item in scheduled)


def _join_earlier(path: Path, args: argparse.Namespace, rates: list[str], figures: dict[str, Any],
                  records: dict[str, Any]) -> list[dict[str, Any]]:
    """An earlier run's arms, once it is shown to have replayed the same requests the same way;
    the commands that measured them (its own and those it joined), so that the joined result
    says how each arm was made without the earlier files."""
    import json

    earlier = json.loads(Path(path).read_text())
    same = {"trace": shown_path(args.trace), "rate scales": rates, "endpoint": args.endpoint,
            "start": args.start, "duration": args.duration, "speed": args.speed, "token scale": args.token_scale,
            "max requests": args.max_requests, "seed": args.seed, "warm-up": args.warmup}
    found = {"trace": earlier["trace"]["source"], "rate scales": earlier["rate_scales"], "endpoint": earlier["endpoint"],
             "start": earlier["window"]["start_s"], "duration": earlier["window"]["duration_s"],
             "speed": earlier["window"]["speed"], "token scale": earlier["window"]["token_scale"],
             "max requests": earlier["window"]["max_requests"], "seed": earlier.get("seed"),
             "warm-up": earlier.get("warmup")}
    differ = [f"{key} {found[key]!r} there, {same[key]!r} here" for key in same if found[key] != same[key]]
    if differ:
        raise ValueError(f"{path} replayed something else: {'; '.join(differ)}")
    for arm, by_rate in earlier["arms"].items():
        if arm in figures:
            raise ValueError(f"arm {arm!r} is in two --with results")
        figures[arm], records[arm] = by_rate, earlier["records"][arm]
    joined = earlier.get("earlier_runs", [])
    joined_arms = {arm for run in joined for arm in run["arms"]}
    own = {"command": earlier["command"], "measured_at": earlier["measured_at"],
           "arms": [arm for arm in earlier["arms"] if arm not in joined_arms]}
    return [*joined, own]


def _warm_up(url: str, bodies: list[ReplayRequest], api_key: str | None) -> None:
    """The first requests pay for compilation and caches: a few of the window's sizes, sent at once."""
    if not bodies:
        return
    at_once = [replace(body, scheduled=ScheduledRequest(0.0, body.scheduled.request)) for body in bodies]
    asyncio.run(replay(url, at_once, api_key=api_key, progress=False, label="warm-up"))

