"""`trilemma bench autoscale simulate|simulate-split|live`."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from bench.autoscale.bursty_trace import arrivals
from bench.autoscale.replica_model import CalibrationError, ReplicaModel
from bench.autoscale.report import simulation_markdown, timeline_png
from bench.autoscale.simulate import DayShape, compare
from bench.cli_common import add_app_args, add_output_args, app_config, command_line, fail, shown_path
from bench.result_files import write_json
from cluster.pricing import pool_rates, resolve_catalog
from core.config import ConfigError, TrilemmaConfig

DEFAULT_CONFIG = Path("serve_app/configs/autoscale-cpu.yaml")
SPLIT_CONFIG = Path("serve_app/configs/traffic-split-h200.yaml")


def add_commands(sub: argparse._SubParsersAction) -> None:
    autoscale = sub.add_parser("autoscale", help="the autoscaler on a simulated bursty day, or live")
    modes = autoscale.add_subparsers(dest="autoscale_mode", required=True)

    simulate = modes.add_parser("simulate", allow_abbrev=False,
                                help="replay a bursty day through Ray Serve's policy code against static pools")
    add_app_args(simulate, default_config=DEFAULT_CONFIG)
    simulate.add_argument("--pool", default="short")
    simulate.add_argument("--calibration", type=Path, required=True,
                          help="a `python -m bench.engine_alone` result: the replica's latency model")
    simulate.add_argument("--startup-s", type=float, required=True, help="seconds from a replica's launch to serving")
    simulate.add_argument("--wake-s", type=float,
                          help="seconds from waking a sleeping replica to serving: the pool sleeps when idle, "
                          "and a scale-down puts a replica to sleep instead of stopping it")
    simulate.add_argument("--quiet-rate", type=float, default=0.3, help="requests/s at night")
    simulate.add_argument("--peak-rate", type=float, default=5.0, help="requests/s in the spike")
    simulate.add_argument("--day-s", type=float, default=3600.0, help="the day, compressed into this many seconds")
    simulate.add_argument("--prompt-tokens", default="60,300", help="MIN,MAX prompt tokens per request")
    simulate.add_argument("--output-tokens", default="32,128", help="MIN,MAX output tokens per request")
    simulate.add_argument("--seed", type=int, default=0)
    add_output_args(simulate, "autoscale-sim")
    simulate.set_defaults(func=bench_simulate)

    split = modes.add_parser("simulate-split", allow_abbrev=False,
                             help="replay a trace through both pools and the traffic split against static splits")
    add_app_args(split, default_config=SPLIT_CONFIG)
    split.add_argument("--trace", type=Path, required=True, help="a request trace (azure CSV, mooncake or ours)")
    split.add_argument("--start", type=float, default=0.0, help="trace seconds to start the replay at")
    split.add_argument("--duration", type=float, help="replay seconds (default: to the trace's end)")
    split.add_argument("--rate-scale", type=float, default=1.0,
                       help="k times the trace's rate: its seconds replayed in 1/k of the time")
    split.add_argument("--calibration", type=Path, required=True,
                       help="a `python -m bench.engine_alone` result: every replica's latency model (each pool "
                       "with its own max_num_seqs)")
    split.add_argument("--startup-s", type=float, required=True, help="seconds from a replica's launch to serving")
    add_output_args(split, "split-sim")
    split.set_defaults(func=bench_simulate_split)

    live = modes.add_parser("live", allow_abbrev=False,
                            help="deploy the app and serve quiet, a burst and quiet again; timeline and decisions")
    add_app_args(live, default_config=DEFAULT_CONFIG)
    live.add_argument("--pool", default="short")
    live.add_argument("--scenario", default="chat")
    live.add_argument("--quiet-rate", type=float, default=0.3)
    live.add_argument("--burst-rate", type=float, default=3.0)
    live.add_argument("--quiet-s", type=float, default=60.0)
    live.add_argument("--burst-s", type=float, default=150.0)
    live.add_argument("--after-s", type=float, default=240.0, help="quiet after the burst, to see the scale-down")
    live.add_argument("--output-tokens", type=int, default=64, help="tokens per answer (ignore_eos)")
    live.add_argument("--seed", type=int, default=0)
    add_output_args(live, "autoscale-live")
    live.set_defaults(func=bench_live)


def _pair(text: str, flag: str) -> tuple[int, int]:
    try:
        low, high = (int(part) for part in text.split(","))
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: expected MIN,MAX") from None
    if not 0 < low <= high:
        raise ConfigError(f"{flag} {text!r}: expected 0 < MIN <= MAX")
    return low, high


def _price(config: TrilemmaConfig, pool: str) -> float:
    if pool not in config.pools:
        raise ConfigError(f"pool {pool!r} is not configured; configured: {sorted(config.pools)}")
    rates = pool_rates(config, resolve_catalog(config.costs, [config.pools[pool].accelerator]))
    return rates[pool].usd_per_hour


def bench_simulate(args: argparse.Namespace) -> int:
    try:
        config = app_config(args)
        model = ReplicaModel.from_engine_run(args.calibration, startup_s=args.startup_s, wake_s=args.wake_s)
        day = DayShape(args.quiet_rate, args.peak_rate, args.day_s, _pair(args.prompt_tokens, "--prompt-tokens"),
                       _pair(args.output_tokens, "--output-tokens"), seed=args.seed)
        result = compare(config, args.pool, model, _price(config, args.pool), day)
    except (ConfigError, CalibrationError) as error:
        return fail(error)
    name = args.name or "autoscale-sim"
    result = {"name": name, "command": command_line(args), **result}
    result["model"]["source"] = shown_path(Path(result["model"]["source"]))
    offered = _offered(day)
    png = timeline_png(result["timeline"], result["slo"]["ttft_ms"], args.out / f"{name}.png",
                       f"{name}: autoscaled pool over the simulated day", offered=offered)
    write_json(result, args.out, name)
    (args.out / f"{name}.md").write_text(simulation_markdown(result, png.name))
    print((args.out / f"{name}.md").read_text())
    return 0 if all(result["verdict"].values()) else 1


def bench_simulate_split(args: argparse.Namespace) -> int:
    from bench.autoscale.split_compare import SplitSetup, compare_split, trace_requests
    from bench.autoscale.split_report import split_markdown, split_timeline_png
    from bench.replay.trace import ReplayWindow, TraceFormatError, read_trace

    try:
        config = app_config(args)
        model = ReplicaModel.from_engine_run(args.calibration, startup_s=args.startup_s)
        window = ReplayWindow(start_s=args.start, duration_s=args.duration, rate_scale=args.rate_scale)
        trace = read_trace(args.trace)
        setup = SplitSetup.of(config, model, {pool: _price(config, pool) for pool in config.split_pools()})
        requests, capped = trace_requests(trace, window, config)
        result = compare_split(setup, requests)
    except (ConfigError, CalibrationError, TraceFormatError, ValueError) as error:
        return fail(error)
    name = args.name or "split-sim"
    last = requests[-1].at if requests else 0.0
    result = {"name": name, "command": command_line(args),
              "trace": {"source": shown_path(args.trace), "summary": trace.describe().text().replace("\n", "; "),
                        "window": f"from trace second {args.start:g}, "
                                  + (f"{args.duration:g} s" if args.duration else "to its end")
                                  + f", at {args.rate_scale:g}x its rate",
                        "replay_s": last, "capped": capped},
              **result}
    for model_dict in result["models"].values():
        model_dict["source"] = shown_path(Path(model_dict["source"]))
    png = split_timeline_png(result, args.out / f"{name}.png", f"{name}: the self-tuning split over the replay")
    write_json(result, args.out, name)
    (args.out / f"{name}.md").write_text(split_markdown(result, png.name))
    print((args.out / f"{name}.md").read_text())
    return 0 if result["verdict"]["tuned_meets_target"] else 1


def _offered(day: DayShape, bin_s: float = 60.0) -> list[tuple[float, float]]:
    counts: dict[int, int] = {}
    for request in arrivals(day.phases(), prompt_tokens=day.prompt_tokens, output_tokens=day.output_tokens,
                            seed=day.seed):
        counts[int(request.at // bin_s)] = counts.get(int(request.at // bin_s), 0) + 1
    return [((b + 0.5) * bin_s, counts.get(b, 0) / bin_s) for b in range(int(day.seconds // bin_s))]


def bench_live(args: argparse.Namespace) -> int:
    from autoscaling.bounds import pool_bounds
    from bench.autoscale.live import burst_phases, live_verdicts, run_live
    from bench.autoscale.report import live_markdown
    from bench.runner import resolve_model
    from serve_app.launcher import deployed

    try:
        config = app_config(args)
        usd_per_hour = _price(config, args.pool)
        slo = pool_bounds(config)[args.pool].slo_ttft_s
        if not config.autoscaling.enabled or args.pool not in config.autoscaling.pools or slo is None:
            raise ConfigError(f"pool {args.pool!r} must be autoscaled (autoscaling.enabled, autoscaling.pools) "
                              "and serve a scenario with slo_ttft_ms")
    except ConfigError as error:
        return fail(error)
    phases = burst_phases(args.quiet_rate, args.burst_rate, args.quiet_s, args.burst_s, args.after_s)
    with deployed(config) as url:
        run = asyncio.run(run_live(config, url, resolve_model(url), args.pool, phases, output_tokens=args.output_tokens,
                                   scenario=args.scenario, usd_per_hour=usd_per_hour, seed=args.seed))
    name = args.name or "autoscale-live"
    verdicts = live_verdicts(run, phases, slo)
    result = {"name": name, "command": command_line(args), "kind": "autoscale_live", "pool": args.pool,
              "slo_ttft_ms": slo * 1000, "usd_per_hour": usd_per_hour, "phases": [vars(p) for p in phases],
              "verdict": verdicts, "timeline": run["timeline"], "decisions": run["decisions"],
              "records": [r.to_dict() for r in run["records"]]}
    png = timeline_png(run["timeline"], slo * 1000, args.out / f"{name}.png",
                       f"{name}: pool {args.pool} under a burst, live")
    write_json(result, args.out, name)
    (args.out / f"{name}.md").write_text(live_markdown(result, png.name))
    print((args.out / f"{name}.md").read_text())
    print(json.dumps(verdicts, indent=1))
    ok = verdicts["scale_up_within_30s_of_crossing"] and verdicts["scaled_down_after_burst"] and not verdicts["failed"]
    return 0 if ok else 1
