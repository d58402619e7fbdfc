"""Writes a run's results as JSON (everything) and markdown (the table people read)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any


def fmt(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def busy_fractions(summary: dict[str, Any]) -> str:
    """`short 83%, long 2%`: each pool's engine busy share of the run, where measured."""
    pools = summary.get("pools") or {}
    measured = [(name, pool["busy_fraction"]) for name, pool in pools.items() if pool["busy_fraction"] is not None]
    return ", ".join(f"{name} {fraction * 100:.0f}%" for name, fraction in measured) or "-"


def markdown_table(points: list[dict[str, Any]]) -> str:
    header = (
        "| load | round | ok/sent | req/s | out tok/s | goodput req/s | TTFT p50 | TTFT p99 "
        "| TPOT p50 | TPOT p99 | ITL p50 | ITL p99 | E2E p50 | E2E p99 | pool busy | $/1M tok | errors |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
    )
    rows = []
    for point in points:
        s = point["summary"]
        rows.append(
            f"| {point['load']} | {point['round']} | {s['succeeded']}/{s['requests']} "
            f"| {fmt(s['request_throughput_rps'], 2)} | {fmt(s['output_token_throughput_tps'])} "
            f"| {fmt(s['goodput_rps'], 2)} "
            f"| {fmt(s['ttft_ms']['p50'], 0)} | {fmt(s['ttft_ms']['p99'], 0)} "
            f"| {fmt(s['tpot_ms']['p50'])} | {fmt(s['tpot_ms']['p99'])} "
            f"| {fmt(s['itl_ms']['p50'])} | {fmt(s['itl_ms']['p99'])} "
            f"| {fmt(s['e2e_ms']['p50'], 0)} | {fmt(s['e2e_ms']['p99'], 0)} "
            f"| {busy_fractions(s)} | {fmt(s['usd_per_1m_tokens'] or s.get('provisioned_usd_per_1m_tokens'), 4)} "
            f"| {sum(s['errors'].values()) or ''} |"
        )
    return header + "\n".join(rows) + "\n"


# A list of numbers only (per-token gaps, per-second series): written on one line, not one
# number a line, which made a replay's records several times larger.
_NUMBER_LIST = re.compile(r"\[\s*(-?[0-9][-+0-9.eE]*(?:,\s*-?[0-9][-+0-9.eE]*)*)\s*\]")


def to_json(result: dict[str, Any]) -> str:
    text = json.dumps(result, indent=2, default=str)
    return _NUMBER_LIST.sub(lambda match: "[" + ", ".join(n.strip() for n in match.group(1).split(",")) + "]", text)


def write_json(result: dict[str, Any], out_dir: Path, name: str) -> Path:
    """`out_dir/name.json`, everything a command measured; its markdown goes beside it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    path.write_text(to_json(result) + "\n")
    return path


def write_results(result: dict[str, Any], out_dir: Path, name: str) -> tuple[Path, Path]:
    json_path = write_json(result, out_dir, name)
    md_path = out_dir / f"{name}.md"
    md_path.write_text(
        f"# {name}\n\nCommand: `{result['command']}`\n\n"
        f"Endpoint {result['config']['url']}, model {result['config']['model']}, dataset "
        f"{result['config']['dataset']} ({result['config']['num_prompts']} prompts a round, "
        f"{result['config']['warmup']} warm-up requests first). Times in ms.\n\n"
        + markdown_table(result["points"])
    )
    return json_path, md_path
