"""Writes a run's results as JSON (everything) and markdown (the table people read)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def markdown_table(points: list[dict[str, Any]]) -> str:
    header = (
        "| load | round | ok/sent | req/s | out tok/s | goodput req/s | TTFT p50 | TTFT p99 "
        "| TPOT p50 | TPOT p99 | ITL p50 | ITL p99 | E2E p50 | E2E p99 | $/1M tok | errors |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
    )
    rows = []
    for point in points:
        s = point["summary"]
        rows.append(
            f"| {point['load']} | {point['round']} | {s['succeeded']}/{s['requests']} "
            f"| {_fmt(s['request_throughput_rps'], 2)} | {_fmt(s['output_token_throughput_tps'])} "
            f"| {_fmt(s['goodput_rps'], 2)} "
            f"| {_fmt(s['ttft_ms']['p50'], 0)} | {_fmt(s['ttft_ms']['p99'], 0)} "
            f"| {_fmt(s['tpot_ms']['p50'])} | {_fmt(s['tpot_ms']['p99'])} "
            f"| {_fmt(s['itl_ms']['p50'])} | {_fmt(s['itl_ms']['p99'])} "
            f"| {_fmt(s['e2e_ms']['p50'], 0)} | {_fmt(s['e2e_ms']['p99'], 0)} "
            f"| {_fmt(s['usd_per_1m_tokens'], 4)} | {sum(s['errors'].values()) or ''} |"
        )
    return header + "\n".join(rows) + "\n"


def write_results(result: dict[str, Any], out_dir: Path, name: str) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / f"{name}.json", out_dir / f"{name}.md"
    json_path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    md_path.write_text(
        f"# {name}\n\nCommand: `{result['command']}`\n\n"
        f"Endpoint {result['config']['url']}, model {result['config']['model']}, dataset "
        f"{result['config']['dataset']} ({result['config']['num_prompts']} prompts a round, "
        f"{result['config']['warmup']} warm-up requests first). Times in ms.\n\n"
        + markdown_table(result["points"])
    )
    return json_path, md_path
