"""`trilemma bench soak`: mixed load on a running app for a long while, every serving
process's memory sampled throughout, a verdict per target."""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import asdict
from pathlib import Path

from pydantic import ValidationError

from bench import machine
from bench.app_ready import wait_until_serving
from bench.cli_common import add_output_args, command_line, fail, shown_path
from bench.result_files import write_json
from bench.soak.mixed_load import SoakPlan
from bench.soak.run import markdown, run_soak

FLAGS = {"minutes": "minutes", "chat_rate": "chat_rps", "long_rate": "long_rps", "batch_rate": "batch_rps",
         "leave_rate": "leave_rps", "sample_s": "sample_s", "window_min": "window_min"}


def add_soak_command(sub: argparse._SubParsersAction) -> None:
    soak = sub.add_parser("soak", help="mixed load for a long while on a running app: errors, memory "
                                       "growth of every serving process, engines orphaned")
    soak.add_argument("--url", default="http://127.0.0.1:8000", help="the running app (without /v1)")
    soak.add_argument("--serve-pid", type=int, help="the `trilemma serve` process, to watch its memory too")
    for flag, key in FLAGS.items():
        field = SoakPlan.model_fields[key]
        soak.add_argument(f"--{flag.replace('_', '-')}", type=float, help=f"{field.description} "
                          f"(default {field.default})")
    soak.add_argument("--ready-timeout-s", type=float, default=900.0,
                      help="how long to wait for every pool to have a replica serving")
    add_output_args(soak, "soak")
    soak.set_defaults(func=bench_soak)


def bench_soak(args: argparse.Namespace) -> int:
    try:
        plan = SoakPlan(**{key: getattr(args, flag) for flag, key in FLAGS.items() if getattr(args, flag) is not None})
    except ValidationError as error:
        return fail(ValueError(str(error)))
    try:
        model = wait_until_serving(args.url, args.ready_timeout_s)
    except ValueError as error:
        return fail(error)
    print(f"soak: {plan.minutes:.0f} min on {args.url} ...", flush=True)
    result = asyncio.run(run_soak(args.url, model, plan, args.serve_pid))
    name = args.name or "soak"
    meta = {"name": name, "command": command_line(args), "url": args.url, "machine": machine.describe()}
    json_path = write_json({**meta, **asdict(result)}, Path(args.out), name)
    md_path = json_path.with_suffix(".md")
    md_path.write_text(markdown(result, meta))
    print(json.dumps(result.verdicts, indent=2))
    print(f"results: {shown_path(json_path)}, {shown_path(md_path)}")
    return 0 if all(result.verdicts.values()) else 1
