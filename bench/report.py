"""`trilemma bench report`: result files in, one markdown report with its plots out.

A result file is what `bench run`, `bench sweep` or `bench quality` wrote. Each load point
of a run and each setting of a sweep is one configuration: a row of the table and a point on
the cost-vs-p99 picture. Each pool of a quality result is one pool at one precision: a row of
the quality table and a point on the three-corners picture, where perplexity is the third axis.
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


# What the quality table and plot read from each pool of a `bench quality` result.
QUALITY_POOL_KEYS = frozenset({"pool", "precision_label", "perplexity", "task_right", "task_total",
                               "usd_per_1m_tokens", "ttft_ms", "perplexity_added", "saving"})


class ReportError(ValueError):
    """A result file cannot be read as a benchmark result."""


@dataclass(frozen=True)
class Configuration:
    source: str  # the result file's name
    label: str
    summary: dict[str, Any]


@dataclass(frozen=True)
class QualityPoint:
    source: str  # the result file's name
    reference: str | None  # the pool its perplexity added and saving are set against
    pool: dict[str, Any]

    @property
    def label(self) -> str:
        # Two quality files often score the same pool name: the file tells them apart.
        return f"{self.pool['pool']} ({self.pool['precision_label']}), {self.source}"


def is_quality_result(result: Any) -> bool:
    pools = result.get("pools") if isinstance(result, dict) else None
    return (isinstance(pools, list) and bool(pools)
            and all(isinstance(pool, dict) and "perplexity" in pool for pool in pools))


def load_result(path: Path) -> dict[str, Any]:
    try:
        result = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ReportError(f"{path}: cannot read a result: {error}") from None
    if is_quality_result(result):
        missing = {key for pool in result["pools"] for key in QUALITY_POOL_KEYS - set(pool)}
        if missing:
            raise ReportError(f"{path}: a bench quality result whose pools lack {', '.join(sorted(missing))}")
        return result
    if not isinstance(result, dict) or not ({"points", "settings"} & set(result)):
        raise ReportError(f"{path}: not a bench run, sweep or quality result (expected 'points', 'settings', "
                          "or a 'pools' list with each pool's 'perplexity')")
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


def quality_points(path: Path, result: dict[str, Any]) -> list[QualityPoint]:
    return [QualityPoint(Path(path).stem, result.get("reference"), pool) for pool in result["pools"]]


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


def quality_table(points: list[QualityPoint]) -> str:
    lines = [
        "| result | pool | precision | perplexity | task score | $/1M tok | TTFT p99 | perplexity added "
        "| saving | against |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for point in points:
        p = point.pool
        added = "-" if p["perplexity_added"] is None else f"{p['perplexity_added']:+.2f}"
        saving = "-" if p["saving"] is None else f"{p['saving']:.0%}"
        lines.append(
            f"| {point.source} | {p['pool']} | {p['precision_label']} | {fmt(p['perplexity'], 2)} "
            f"| {p['task_right']}/{p['task_total']} | {fmt(p['usd_per_1m_tokens'], 4)} "
            f"| {fmt(p['ttft_ms']['p99'], 0)} | {added} | {saving} | {fmt(point.reference)} |"
        )
    return "\n".join(lines) + "\n"


def quality_sections(points: list[QualityPoint], out_dir: Path) -> list[str]:
    corners = plots.three_corners([(point.label, point.pool) for point in points], out_dir / "three-corners.png")
    unplotted = [point.label for point in points if not plots.on_three_corners(point.pool)]
    sections = [
        "\n## Quality, the third corner\n",
        "Each pool of each `bench quality` result at its precision: perplexity on held-out text and "
        "the task score beside $ per 1M tokens (what the app billed) and TTFT p99 (ms). Perplexity "
        "added and saving are against the result's reference pool (`against`).\n",
        f"![three corners]({corners.name})\n",
    ]
    if unplotted:
        sections.append(f"Not on the plot (no price or no latency): {'; '.join(unplotted)}.\n")
    return sections + [quality_table(points)]


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


def run_and_sweep_sections(results: list[tuple[Path, dict[str, Any]]], out_dir: Path) -> list[str]:
    configs = [c for path, result in results for c in configurations(path, result)]
    series: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in configs:
        series[c.source].append(c.summary)
    latency = plots.latency_vs_throughput(list(series.items()), out_dir / "latency-vs-throughput.png")
    frontier = plots.cost_vs_p99([(c.label, c.summary) for c in configs], out_dir / "cost-vs-p99.png")
    sections = []
    for path, result in results:
        if "settings" in result:
            curves = plots.sweep_curves(result, _slo_lines(result), out_dir / f"sweep-{path.stem}.png")
            sections.append(f"\n## Sweep `{result['knob']}` ({path.name})\n")
            sections.append(sweep_summary(result, curves.name))
    return sections + [
        "\n## Latency against throughput\n", f"![latency]({latency.name})\n",
        "\n## Cost against p99 TTFT\n",
        "$ per 1M tokens is what the server billed when it reports cost, otherwise what the "
        "pools' replicas cost over the run (price x replica time, busy and idle).\n",
        f"![frontier]({frontier.name})\n",
        "\n## Table\n", "Times in ms.\n", table(configs),
    ]


def write_report(paths: list[Path], out_dir: Path, title: str = "Benchmark report",
                 command: str | None = None) -> Path:
    """Writes `report.md` and its PNGs into `out_dir`; returns the markdown's path."""
    results = [(Path(p), load_result(p)) for p in paths]
    out_dir.mkdir(parents=True, exist_ok=True)
    runs_and_sweeps = [(path, result) for path, result in results if not is_quality_result(result)]
    points = [point for path, result in results if is_quality_result(result)
              for point in quality_points(path, result)]
    sections = [f"# {title}\n"]
    if command:
        sections.append(f"Made by `{command}`.\n")
    sections.append("## Sources\n")
    for path, result in results:
        sections.append(f"- `{path.name}`: `{result.get('command', '(no command stored)')}`")
    # A report of quality files alone has no configuration to plot or tabulate.
    if runs_and_sweeps:
        sections += run_and_sweep_sections(runs_and_sweeps, out_dir)
    if points:
        sections += quality_sections(points, out_dir)
    report = out_dir / "report.md"
    report.write_text("\n".join(sections))
    return report
