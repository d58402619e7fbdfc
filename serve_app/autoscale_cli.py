"""`trilemma autoscale explain`: the autoscaler's last decisions per pool, with their reasons."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from core.config import DEFAULT_CONFIG_PATH, ConfigError, TrilemmaConfig


def add_commands(commands: argparse._SubParsersAction) -> None:
    autoscale = commands.add_parser("autoscale", help="the autoscaler's decisions")
    sub = autoscale.add_subparsers(dest="autoscale_command", required=True)
    explain = sub.add_parser("explain", help="the last decisions per pool of a running app")
    explain.add_argument("--config", type=Path, default=DEFAULT_CONFIG_PATH, help="the app's config")
    explain.add_argument("--last", type=int, default=5, help="decisions shown per pool")
    explain.add_argument("--address", default="auto", help="the Ray cluster the app runs on")
    explain.set_defaults(func=explain_decisions)


def read_decisions(app: str, pools: list[str]) -> dict[str, list[dict]]:
    """Needs a connected Ray; the policy keeps each pool's recent decisions in Ray's KV store."""
    from autoscaling.control_board import RayControlBoard, decisions_key

    board = RayControlBoard()
    return {pool: board.get(decisions_key(app, pool)) or [] for pool in pools}


def read_split(app: str) -> dict | None:
    """The traffic split's threshold in force and its latest reason; None where none runs."""
    from autoscaling.control_board import RayControlBoard, split_key

    return RayControlBoard().get(split_key(app))


def format_split(split: dict | None) -> str:
    if not split:
        return "traffic split: off, or no decision yet (the routers use routing.short_context_threshold_tokens)"
    threshold = f"threshold {split['threshold']} tokens" if split.get("threshold") else "the configured threshold"
    return f"traffic split: {threshold}; {split['reason']}"


def format_decisions(decisions: dict[str, list[dict]], last: int) -> str:
    lines = []
    for pool, records in decisions.items():
        if not records:
            lines.append(f"pool {pool}: no decision yet (autoscaling off for it, or the app just started)")
            continue
        lines.append(f"pool {pool}:")
        for record in records[-last:]:
            at = time.strftime("%H:%M:%S", time.localtime(record["at"]))
            change = f"{record['current']} -> {record['target']}" if record["direction"] != "hold" else f"holds {record['current']}"
            repeated = f" (x{record['repeated']} until {time.strftime('%H:%M:%S', time.localtime(record['until']))})" \
                if record.get("repeated") else ""
            lines.append(f"  {at} {change} [{record['policy']}] {record['reason']}{repeated}"
                         + ("  (cost profile on)" if record.get("cost_profile") else ""))
            if record.get("concurrency"):
                lines.append(f"           engine concurrency {record['concurrency']}")
            if record.get("split"):
                lines.append(f"           traffic split {record['split']}")
    return "\n".join(lines)


def explain_decisions(args: argparse.Namespace) -> int:
    from serve_app.ray_driver import init_ray

    try:
        config = TrilemmaConfig.from_yaml(args.config)
    except ConfigError as error:
        print(f"error: {error}")
        return 2
    init_ray(address=args.address, logging_level="ERROR")
    print(format_decisions(read_decisions(config.app_name, sorted(config.pools)), args.last))
    if config.autoscaling.split.enabled:
        print(format_split(read_split(config.app_name)))
    return 0
