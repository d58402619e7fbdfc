"""`trilemma observe ...` and `trilemma top`: the operator's view of a running app, written from
its config (dashboard, rules) and started against it (Prometheus)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from core.config import DEFAULT_CONFIG_PATH, TrilemmaConfig
from observability import prometheus_setup
from observability.grafana import dashboard
from observability.top import ExporterSource, PrometheusSource, render

DEFAULT_PROMETHEUS_URL = "http://127.0.0.1:9090"


def add_commands(commands: argparse._SubParsersAction) -> None:
    observe = commands.add_parser("observe", help="Grafana dashboard, Prometheus rules, and a Prometheus for the app")
    sub = observe.add_subparsers(dest="observe_command", required=True)
    rules = sub.add_parser("rules", help="write the recording and alert rules for a config")
    board = sub.add_parser("dashboard", help="write the Grafana dashboard (JSON) for a config")
    for command in (rules, board):
        command.add_argument("--config", default=str(DEFAULT_CONFIG_PATH), help="YAML config")
        command.add_argument("--out", help="file to write; default: print it")
    rules.add_argument("--format", choices=["file", "prometheus-rule"], default="file",
                       help="a rules file (Prometheus's rule_files), or a PrometheusRule for the Prometheus Operator")
    rules.set_defaults(func=_rules)
    board.set_defaults(func=_dashboard)
    prometheus = sub.add_parser("prometheus", help="start Prometheus against the running app, rules loaded")
    prometheus.add_argument("--config", default=str(DEFAULT_CONFIG_PATH), help="YAML config")
    prometheus.add_argument("--dir", default="build/prometheus", help="its config, rules and data")
    prometheus.add_argument("--port", type=int, default=9090)
    prometheus.add_argument("--ray-temp-dir", default="/tmp/ray",
                            help="the Ray head's temp dir, where Ray lists its metrics endpoints")
    prometheus.add_argument("--target", action="append", default=[], metavar="HOST:PORT",
                            help="scrape these instead of the endpoints Ray lists; repeatable")
    prometheus.add_argument("--write-only", action="store_true", help="write its config and rules, do not start it")
    prometheus.set_defaults(func=_prometheus)
    top = commands.add_parser("top", help="the board in the terminal, from Prometheus or the app, refreshed")
    top.add_argument("--config", default=str(DEFAULT_CONFIG_PATH), help="YAML config (SLOs, app name)")
    source = top.add_mutually_exclusive_group()
    source.add_argument("--prometheus", default=DEFAULT_PROMETHEUS_URL, help="Prometheus that scrapes the app")
    source.add_argument("--metrics-url", help="the app's own metrics endpoint instead (Ray's exporter, "
                                              "http://<node>:<local_ray.metrics_export_port>/metrics)")
    top.add_argument("--window", default="1m", help="Prometheus: rates and percentiles over this window")
    top.add_argument("--every", type=float, default=5.0, help="seconds between refreshes")
    top.add_argument("--once", action="store_true", help="print once and exit")
    top.set_defaults(func=_top)


def _write(text: str, out: str | None) -> int:
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text)
        print(f"wrote {out}")
    else:
        sys.stdout.write(text)
    return 0


def _rules(args: argparse.Namespace) -> int:
    config = TrilemmaConfig.from_yaml(args.config)
    if args.format == "prometheus-rule":
        return _write(prometheus_setup.prometheus_rule_yaml(config), args.out)
    return _write(prometheus_setup.rules_yaml(config), args.out)


def _dashboard(args: argparse.Namespace) -> int:
    return _write(json.dumps(dashboard(TrilemmaConfig.from_yaml(args.config)), indent=2) + "\n", args.out)


def _prometheus(args: argparse.Namespace) -> int:
    config = TrilemmaConfig.from_yaml(args.config)
    setup = prometheus_setup.write_setup(config, Path(args.dir), ray_temp_dir=Path(args.ray_temp_dir),
                                         targets=args.target or None)
    checked = prometheus_setup.check_rules(setup.rules_file)
    if checked.returncode != 0:
        print(f"trilemma: the rules do not load: {checked.stdout}{checked.stderr}", file=sys.stderr)
        return 1
    print(f"Prometheus config {setup.config_file}, rules {setup.rules_file}")
    if args.write_only:
        return 0
    process = prometheus_setup.start(setup, args.port)
    print(f"Prometheus at http://127.0.0.1:{args.port} (targets: /targets, alerts: /alerts); "
          f"the board in a terminal: trilemma top --prometheus http://127.0.0.1:{args.port}", flush=True)
    try:
        return process.wait()
    except KeyboardInterrupt:
        process.terminate()
        return process.wait()


def _top(args: argparse.Namespace) -> int:
    config = TrilemmaConfig.from_yaml(args.config)
    if args.metrics_url:
        source, where = ExporterSource(args.metrics_url), args.metrics_url
        heading = f"what changed between two reads of {where}, {args.every:g} s apart"
    else:
        source, where = PrometheusSource(args.prometheus, args.window), args.prometheus
        heading = f"from {where}, rates over {args.window}"
    while True:
        try:
            source.refresh()
            if args.once and not source.ready:  # the exporter's figures need a second reading
                time.sleep(args.every)
                source.refresh()
            board = render(source, config, heading)
        except Exception as error:  # noqa: BLE001 - an unreachable source is shown, and retried
            board = f"trilemma top: cannot read {where}: {error}"
            if args.once:
                print(board, file=sys.stderr)
                return 1
        if args.once:
            print(board)
            return 0
        print("\033[2J\033[H" + board + f"\n\n(every {args.every:g} s; Ctrl-C ends)", flush=True)
        try:
            time.sleep(args.every)
        except KeyboardInterrupt:
            return 0
