"""`trilemma bench report`: result files in, one markdown report with its plots out.

A result file is what `bench run` or `bench sweep` wrote. Each load point of a run and
each setting of a sweep is one configuration: a row of the table and a point on the
cost-vs-p99 picture.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import plots
from bench.metrics import Slo
from bench.result_files import busy_fractions, fmt, write_json
from bench.sweep import merge_rounds


class ReportError(ValueError):
    """A result file cannot be read as a benchmark result."""


@dataclass(frozen=True)
class Configuration:
    source: str  # the result file's name
    label: str
    summary: dict[str, Any]


def load_result(path: Path) -> dict[str, Any]:
    try:
        result = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ReportError(f"{path}: cannot read a result: {error}") from None
    if not isinstance(result, dict) or not ({"points", "settings"} & set(result)):
        raise ReportError(f"{path}: not a bench run or sweep result (no 'points' or 'settings')")
    return result


def _slos(result: dict[str, Any]) -> dict[str, Slo]:
    return {name: Slo(**limits) for name, limits in result.get("config", {}).get("slos", {}).items()}


def configurations(path: Path, result: dict[str, Any]) -> list[Configuration]:
    """A run's rounds at one load are merged into one configuration; a sweep's settings are
    its configurations."""
    source = Path(path).stem
    if "settings" in result:
        # Sweeps of one knob under other loads may sit side by side: the label says which.
        load = result.get("config", {}).get("load")
        knob = result["knob"].rsplit(".", 1)[-1]
        return [Configuration(source, f"{knob}={s['value']}" + (f" @ {load}" if load else ""), s["summary"])
                for s in result["settings"]]
    by_load: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for point in result["points"]:
        by_load[point["load"]].append(point)
    slos = _slos(result)
    return [Configuration(source, f"{source} {load}", merge_rounds(points, slos))
            for load, points in by_load.items()]


def table(configs: list[Configuration]) -> str:
    lines = [
        "| configuration | req/s | out tok/s | goodput req/s | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 "
        "| E2E p99 | pool busy | $/1M tok | good req/$ |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in configs:
        s = c.summary
        lines.append(
            f"| {c.label} | {fmt(s['request_throughput_rps'], 2)} | {fmt(s['output_token_throughput_tps'])} "
            f"| {fmt(s['goodput_rps'], 2)} | {fmt(s['ttft_ms']['p50'], 0)} | {fmt(s['ttft_ms']['p99'], 0)} "
            f"| {fmt(s['tpot_ms']['p50'])} | {fmt(s['tpot_ms']['p99'])} | {fmt(s['e2e_ms']['p99'], 0)} "
            f"| {busy_fractions(s)} | {fmt(plots.usd_per_1m_tokens(s), 4)} | {fmt(s.get('good_requests_per_usd'), 0)} |"
        )
    return "\n".join(lines) + "\n"


def _slo_lines(result: dict[str, Any]) -> dict[str, float]:
    """The SLO limits to draw on a p99 latency plot, in ms."""
    return {
        f"{name} {metric.removesuffix('_s').upper()}": limit * 1000
        for name, limits in result.get("config", {}).get("slos", {}).items()
        for metric, limit in limits.items()
        if limit is not None and metric != "e2e_s"
    }


def sweep_summary(result: dict[str, Any], plot_name: str) -> str:
    knee = result["knee"]
    lines = [f"Knee: **{result['knob']} = {knee['value']}**: {knee['reason']}.\n"]
    for setting in result["settings"]:
        lines.append(f"- {setting['value']}: {'; '.join(setting['slo_misses']) or 'within SLO'}")
    lines.append(f"\n![sweep]({plot_name})\n")
    return "\n".join(lines)


def write_sweep(result: dict[str, Any], out_dir: Path, name: str) -> tuple[Path, Path]:
    """A sweep's JSON, its markdown (knee, table) and its plot, side by side."""
    json_path = write_json(result, out_dir, name)
    md_path = out_dir / f"{name}.md"
    curves = plots.sweep_curves(result, _slo_lines(result), out_dir / f"{name}.png")
    configs = configurations(json_path, result)
    md_path.write_text(
        f"# {name}\n\nCommand: `{result['command']}`\n\nLoad {result['config']['load']}, dataset "
        f"{result['config']['dataset']}, {result['config']['num_prompts']} prompts a round, "
        f"{result['config']['rounds']} round(s) per setting; the app restarted per setting.\n\n"
        + sweep_summary(result, curves.name) + "\nTimes in ms.\n\n" + table(configs)
    )
    return json_path, md_path


def write_report(paths: list[Path], out_dir: Path, title: str = "Benchmark report",
                 command: str | None = None) -> Path:
    """Writes `report.md` and its PNGs into `out_dir`; returns the markdown's path."""
    results = [(Path(p), load_result(p)) for p in paths]
    out_dir.mkdir(parents=True, exist_ok=True)
    configs = [c for path, result in results for c in configurations(path, result)]
    series: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in configs:
        series[c.source].append(c.summary)
    latency = plots.latency_vs_throughput(list(series.items()), out_dir / "latency-vs-throughput.png")
    frontier = plots.cost_vs_p99([(c.label, c.summary) for c in configs], out_dir / "cost-vs-p99.png")
    sections = [f"# {title}\n"]
    if command:
        sections.append(f"Made by `{command}`.\n")
    sections.append("## Sources\n")
    for path, result in results:
        sections.append(f"- `{path.name}`: `{result.get('command', '(no command stored)')}`")
    for path, result in results:
        if "settings" in result:
            curves = plots.sweep_curves(result, _slo_lines(result), out_dir / f"sweep-{path.stem}.png")
            sections.append(f"\n## Sweep `{result['knob']}` ({path.name})\n")
            sections.append(sweep_summary(result, curves.name))
    sections += [
        "\n## Latency against throughput\n", f"![latency]({latency.name})\n",
        "\n## Cost against p99 TTFT\n",
        "$ per 1M tokens is what the server billed when it reports cost, otherwise what the "
        "pools' replicas cost over the run (price x replica time, busy and idle).\n",
        f"![frontier]({frontier.name})\n",
        "\n## Table\n", "Times in ms.\n", table(configs),
    ]
    report = out_dir / "report.md"
    report.write_text("\n".join(sections))
    return report
