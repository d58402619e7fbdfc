"""`trilemma bench board`: the dashboard's main panels drawn from a real Prometheus over a time
window, with the same PromQL as the Grafana board (observability/panels.py), into a PNG.

For a run's record where no Grafana runs: start Prometheus against the app (`trilemma observe
prometheus`), run a benchmark, then draw the window it covered.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import httpx
import matplotlib

matplotlib.use("Agg")  # files only: benchmarks run on headless machines

import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from bench.cli_common import command_line, fail, shown_path  # noqa: E402
from core.config import DEFAULT_CONFIG_PATH, ConfigError, TrilemmaConfig  # noqa: E402
from observability.panels import Panel, board, concrete  # noqa: E402

# The panels drawn, by title: one per corner of the trade and what drives it.
MAIN_PANELS = (
    "TTFT p50 / p99 by pool and scenario", "TPOT p50 / p99 by pool and scenario",
    "Requests/s by pool, scenario and status", "Tokens/s by pool and direction",
    "Engine busy fraction", "Admission queue depth",
    "$/hour by pool, busy and idle", "$ per request and per 1M tokens", "Replicas: target and running",
)
RATE_WINDOW = "1m"
# Panels whose lines differ by orders of magnitude ($ per request beside $ per 1M tokens).
LOG_SCALE = {"$ per request and per 1M tokens"}


def add_board_command(sub: argparse._SubParsersAction) -> None:
    board_cmd = sub.add_parser("board", help="the dashboard's main panels from Prometheus over a window, as a PNG")
    board_cmd.add_argument("--prometheus", default="http://127.0.0.1:9090", help="Prometheus that scraped the app")
    board_cmd.add_argument("--config", default=str(DEFAULT_CONFIG_PATH), help="the app's config (SLOs, app name)")
    board_cmd.add_argument("--start", type=float, help="window start, Unix seconds; default: --minutes before now")
    board_cmd.add_argument("--end", type=float, help="window end, Unix seconds; default: now")
    board_cmd.add_argument("--minutes", type=float, default=15.0)
    board_cmd.add_argument("--title", default="", help="what ran in the window, for the picture's title")
    board_cmd.add_argument("--out", default="bench/results", help="folder for the PNG and the JSON of its series")
    board_cmd.add_argument("--name", default="board")
    board_cmd.set_defaults(func=bench_board)


def bench_board(args: argparse.Namespace) -> int:
    try:
        config = TrilemmaConfig.from_yaml(args.config)
    except ConfigError as error:
        return fail(error)
    end = args.end or time.time()
    start = args.start or end - args.minutes * 60
    step = max(5.0, (end - start) / 240)
    panels = {panel.title: panel for panel in board(config)}
    series: dict[str, list[dict]] = {}
    try:
        for title in MAIN_PANELS:
            series[title] = [
                {"legend": target.legend, "result": query_range(args.prometheus, concrete(
                    target.expr, rate_window=RATE_WINDOW, app=config.app_name), start, end, step)}
                for target in panels[title].targets
            ]
    except (httpx.HTTPError, ValueError) as error:
        return fail(ValueError(f"cannot read {args.prometheus}: {error}"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    png = out / f"{args.name}.png"
    draw([panels[t] for t in MAIN_PANELS], series, start, png, args.title or f"{config.app_name}")
    record = {"command": command_line(args), "start": start, "end": end, "step_s": step, "panels": series}
    (out / f"{args.name}.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"board: {shown_path(png)}")
    return 0


def query_range(prometheus: str, expr: str, start: float, end: float, step: float) -> list[dict]:
    response = httpx.get(f"{prometheus.rstrip('/')}/api/v1/query_range",
                         params={"query": expr, "start": start, "end": end, "step": step}, timeout=60)
    body = response.json()
    if body.get("status") != "success":
        raise ValueError(f"Prometheus refused {expr!r}: {body.get('error')}")
    return body["data"]["result"]


def draw(panels: list[Panel], series: dict[str, list[dict]], start: float, path: Path, title: str) -> Path:
    columns = 3
    rows = math.ceil(len(panels) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(16, 3.6 * rows), squeeze=False)
    for axis, panel in zip(axes.flat, panels):
        for target in series[panel.title]:
            for result in target["result"]:
                points = [(float(t) - start, float(v)) for t, v in result["values"] if math.isfinite(float(v))]
                if points:
                    xs, ys = zip(*points)
                    axis.plot([x / 60 for x in xs], ys, label=_legend(target["legend"], result["metric"]), lw=1.2)
        for legend, value in panel.thresholds.items():
            axis.axhline(value, color="red", linestyle=":", lw=1, label=legend)
        if panel.title in LOG_SCALE and axis.lines:
            axis.set_yscale("log")
        axis.set_title(panel.title, fontsize=9)
        axis.set_xlabel("minutes", fontsize=8)
        axis.set_ylabel(_UNITS.get(panel.unit, ""), fontsize=8)
        axis.tick_params(labelsize=7)
        axis.grid(alpha=0.3)
        if axis.lines:
            axis.legend(fontsize=6, loc="upper left", ncol=2)
    for axis in list(axes.flat)[len(panels):]:
        axis.set_visible(False)
    figure.suptitle(title, fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


_UNITS = {"s": "seconds", "reqps": "requests/s", "percentunit": "share", "currencyUSD": "$", "short": ""}


def _legend(template: str, labels: dict[str, str]) -> str:
    text = template
    for key, value in labels.items():
        text = text.replace(f"{{{{{key}}}}}", value)
    return text
