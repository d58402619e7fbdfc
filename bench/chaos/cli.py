"""`trilemma bench chaos`: faults injected into a running app under steady load, counted."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from bench.app_ready import wait_until_serving
from bench.chaos.faults import Fault, Target
from bench.chaos.run import markdown, run_fault, to_json
from bench.cli_common import add_output_args, command_line, fail, shown_path
from bench.result_files import write_json
from core.config import ConfigError, TrilemmaConfig
from core.config_base import parse_overrides

DEFAULT_FAULTS = "kill-engine,kill-replica,kill-router,kill-controller,clients-leave"


def add_chaos_command(sub: argparse._SubParsersAction) -> None:
    chaos = sub.add_parser("chaos", help="faults injected into a running app under steady load: "
                                         "failed, hung, time to serving again, processes left")
    chaos.add_argument("--url", default="http://127.0.0.1:8000", help="the running app (without /v1)")
    chaos.add_argument("--config", help="the config the app runs (its app name; needed by redeploy and scale-down)")
    chaos.add_argument("--set", action="append", default=[], metavar="DOTTED.KEY=VALUE",
                       help="an override the app runs with (as given to `trilemma serve --set`); repeatable")
    chaos.add_argument("--pool", default="short", help="the pool whose parts die")
    chaos.add_argument("--faults", default=DEFAULT_FAULTS,
                       help=f"comma-separated, in order, from: {', '.join(Fault.registry)}")
    chaos.add_argument("--rate", type=float, default=0.5, help="steady chat requests per second")
    chaos.add_argument("--before-s", type=float, default=20.0, help="load before each fault")
    chaos.add_argument("--settle-s", type=float, default=20.0, help="load after the pool serves again")
    chaos.add_argument("--recover-timeout-s", type=float, default=600.0)
    chaos.add_argument("--hang-s", type=float, default=120.0, help="no answer within this: hung")
    chaos.add_argument("--clients-leaving", type=int, default=1000, help="for the clients-leave fault")
    chaos.add_argument("--serve-pid", type=int, help="the `trilemma serve` process (for sigterm)")
    chaos.add_argument("--ready-timeout-s", type=float, default=900.0,
                       help="how long to wait for every pool to have a replica serving")
    add_output_args(chaos, "chaos")
    chaos.set_defaults(func=bench_chaos)


def bench_chaos(args: argparse.Namespace) -> int:
    names = [name.strip() for name in args.faults.split(",") if name.strip()]
    unknown = sorted(set(names) - set(Fault.registry))
    if unknown:
        return fail(ValueError(f"unknown faults {unknown}; known: {sorted(Fault.registry)}"))
    config = None
    if args.config:
        try:
            config = TrilemmaConfig.from_yaml(args.config).with_overrides(parse_overrides(args.set), source="--set")
        except ConfigError as error:
            return fail(error)
    app = config.app_name if config else "trilemma"
    try:
        model = wait_until_serving(args.url, args.ready_timeout_s)
    except ValueError as error:
        return fail(error)
    target = Target(app=app, url=args.url, model=model, pool=args.pool, serve_pid=args.serve_pid,
                    config=config, clients_leaving=args.clients_leaving)
    results = []
    for name in names:
        print(f"fault {name} ...", flush=True)
        result = asyncio.run(run_fault(
            Fault.registry[name](), target, rate_rps=args.rate, before_s=args.before_s,
            settle_s=args.settle_s, recover_timeout_s=args.recover_timeout_s, hang_s=args.hang_s,
        ))
        print(f"  {result.action}; {result.answered_after}/{result.sent_after} answered, "
              f"{result.hung} hung, serving again after {result.seconds_to_serving} s", flush=True)
        results.append(result)
    name = args.name or "chaos"
    meta = {"name": name, "command": command_line(args), "url": args.url, "pool": args.pool,
            "rate_rps": args.rate, "hang_s": args.hang_s}
    json_path = write_json(to_json(results, meta), Path(args.out), name)
    md_path = json_path.with_suffix(".md")
    md_path.write_text(markdown(results, meta))
    print(f"results: {shown_path(json_path)}, {shown_path(md_path)}")
    return 0
