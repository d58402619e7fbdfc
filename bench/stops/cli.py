"""`trilemma bench stops`: the app stopped every way it is stopped in the field, one start
each, and what each stop left: the seconds until the command ended, how the streams in flight
ended, the processes of its session still alive, whether the port is free, and how long the
next start took to serve (docs/faults.md, "Stops").

Each start is `trilemma serve` (or `make serve` around it) in a terminal of its own; the next
stop's start is the previous stop's next start, and one more start follows the last stop.
`ray stop` ends every Ray of this user on the machine: run this where no other Ray runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict
from pathlib import Path

from bench import machine
from bench.cli_common import add_app_args, add_output_args, app_config, command_line, fail, shown_path
from bench.result_files import write_json
from bench.stops.kinds import LAUNCHERS, STOPS
from bench.stops.measure import SETTLE_S, Setup, StopResult, measure
from core.config import ConfigError
from serve_app.launcher import stop_bound_s

# Beyond the app's own bound on a stop (drain and the Ray session's end).
EXIT_MARGIN_S = 30.0
REPO = Path(__file__).resolve().parents[2]
LOGS = REPO / "build" / "stops"
BENCH_TRACE = REPO / "bench" / "replay" / "samples" / "plain-sample.jsonl"


def add_stops_command(sub: argparse._SubParsersAction) -> None:
    stops = sub.add_parser("stops", help="stop the app every way it is stopped in the field; what each left behind",
                           allow_abbrev=False)
    add_app_args(stops)
    stops.add_argument("--stops", default=",".join(STOPS), help=f"comma-separated, of: {', '.join(STOPS)}")
    stops.add_argument("--launchers", default="serve", help="comma-separated: serve (`trilemma serve`), make "
                                                            "(`make serve` around it; the config's path only), "
                                                            "bench (`trilemma bench replay` of a sample trace, "
                                                            "which starts the app itself)")
    stops.add_argument("--streams", type=int, default=4, help="streams in flight at each stop")
    stops.add_argument("--max-tokens", type=int, default=256, help="tokens of each stream")
    stops.add_argument("--ready-timeout-s", type=float, default=600.0)
    add_output_args(stops, "stops")
    stops.set_defaults(func=bench_stops)


def launch_argv(launcher: str, config_path: Path, overrides: list[str]) -> list[str]:
    if launcher == "make":
        if overrides:
            raise ValueError("`make serve` takes the config's path only: drop --set, or use --launchers serve")
        return ["make", "-C", str(REPO), "serve", f"CONFIG={config_path.resolve()}"]
    if launcher == "bench":
        # A benchmark that starts the app and replays a sample trace against it (slowed and
        # shortened to a light load that lasts minutes): stopped while it replays, it must take
        # its app down as `trilemma serve` does.
        argv = [sys.executable, "-m", "bench", "replay", str(BENCH_TRACE), "--arms", "app", "--speed", "0.1",
                "--token-scale", "0.25", "--no-progress", "--config", str(config_path),
                "--out", str(LOGS / "bench-out")]
    else:
        argv = [sys.executable, "-m", "serve_app.cli", "serve", "--config", str(config_path)]
    for override in overrides:
        argv += ["--set", override]
    return argv


def bench_stops(args: argparse.Namespace) -> int:
    try:
        config = app_config(args)
        stops = [STOPS[name] for name in _names(args.stops, STOPS)]
        launchers = _names(args.launchers, LAUNCHERS)
        runs = [(launcher, stop, launch_argv(launcher, args.config, args.set)) for launcher in launchers for stop in stops]
    except (ConfigError, ValueError) as error:
        return fail(error)
    host = "127.0.0.1" if config.http.host in ("0.0.0.0", "::") else config.http.host
    setup = Setup(url=f"http://{host}:{config.http.port}", host=host, port=config.http.port,
                  model=config.model.name, ready_timeout_s=args.ready_timeout_s,
                  exit_bound_s=stop_bound_s(config) + EXIT_MARGIN_S, streams=args.streams, max_tokens=args.max_tokens)
    results: list[StopResult] = []
    name = args.name or f"stops-{time.strftime('%Y%m%d-%H%M%S')}"
    logs = LOGS / name  # what each start printed: why a stop took long or ended with an error
    logs.mkdir(parents=True, exist_ok=True)
    print(f"stops: each start's output goes to {shown_path(logs)}/", flush=True)
    for index, (launcher, stop, argv) in enumerate(runs):
        print(f"stops: {launcher} / {stop.name}: starting ...", flush=True)
        result = measure(stop, launcher, argv, setup, logs / f"{index}-{launcher}-{stop.name}.log")
        if results:
            results[-1].next_ready_s = _rounded(result.ready_s)
        result.ready_s = _rounded(result.ready_s)
        results.append(result)
        print(f"stops: {launcher} / {stop.name}: {_line(result)}", flush=True)
    print("stops: one more start, after the last stop ...", flush=True)
    final = measure(STOPS["sigterm-serve"], "serve", launch_argv("serve", args.config, args.set), setup,
                    logs / "last-start.log")
    results[-1].next_ready_s = _rounded(final.ready_s)
    result = {"kind": "stops", "command": command_line(args), "machine": machine.describe(),
              "measured_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "streams": args.streams,
              "max_tokens": args.max_tokens, "stops": [asdict(r) for r in results],
              "clean": all(r.clean() for r in results)}
    json_path = write_json(result, args.out, name)
    md_path = args.out / f"{name}.md"
    md_path.write_text(markdown(result))
    print(md_path.read_text())
    print(f"wrote {shown_path(json_path)}, {shown_path(md_path)}")
    return 0 if result["clean"] else 1


def markdown(result: dict) -> str:
    lines = [f"# Stops: {result['machine']}", "", f"`{result['command']}`", "",
             f"{result['streams']} streams of {result['max_tokens']} tokens in flight at each stop; processes "
             f"left: of the command's session, {SETTLE_S:g} s after it ended; all gone: seconds from the stop "
             "until the session's last process ended.", "",
             "| launcher | stop | exit s | status | in flight: answered / refused / closed / hung | processes left "
             "| all gone s | port free | next start ready s |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in result["stops"]:
        flight = row["in_flight"]
        counts = " / ".join(str(flight.get(k, 0)) for k in ("answered", "refused", "closed", "hung")) if flight else "-"
        left = ", ".join(row["left"]) if row["left"] else "0"
        lines.append(f"| {row['launcher']} | {row['stop']} | {_shown(row['exit_s'])} | {_shown(row['exit_code'])} "
                     f"| {counts} | {left} | {_shown(row['gone_s'])} | {_shown(row['port_free'])} "
                     f"| {_shown(row['next_ready_s'])} |")
        if row["error"]:
            lines.append(f"|  | error: {row['error']} |  |  |  |  |  |  |  |")
    return "\n".join(lines) + "\n"


def _line(result: StopResult) -> str:
    return (f"exit {result.exit_s} s (status {result.exit_code}), in flight {result.in_flight}, "
            f"left {result.left or 0}, port free {result.port_free}" + (f", error: {result.error}" if result.error else ""))


def _names(spec: str, known) -> list[str]:
    names = [name.strip() for name in spec.split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise ValueError(f"unknown {', '.join(unknown) or 'empty list'}: expected some of {', '.join(known)}")
    return names


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _shown(value: object) -> str:
    return "-" if value is None else str(value)
