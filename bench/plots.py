"""The benchmark's pictures, drawn with matplotlib into PNG files (no display needed).

Every function takes summaries as `bench.metrics.summarize` (plus `bench.pool_activity`)
writes them, so a plot can be redrawn from any stored result file.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: benchmarks run on headless machines

import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

Series = tuple[str, list[dict[str, Any]]]  # a label and its summaries, in load order


def usd_per_1m_tokens(summary: dict[str, Any]) -> float | None:
    """What the server billed when it reports cost, else what the pools cost over the run."""
    return summary.get("usd_per_1m_tokens") or summary.get("provisioned_usd_per_1m_tokens")


def latency_vs_throughput(series: list[Series], path: Path) -> Path:
    """TTFT and TPOT percentiles against output token throughput, one line per series."""
    figure, (ttft_axis, tpot_axis) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, summaries in series:
        throughput = [s["output_token_throughput_tps"] for s in summaries]
        for axis, metric in ((ttft_axis, "ttft_ms"), (tpot_axis, "tpot_ms")):
            line, = axis.plot(throughput, [s[metric]["p50"] for s in summaries], "o-", label=f"{label} p50")
            axis.plot(throughput, [s[metric]["p99"] for s in summaries], "s--", color=line.get_color(),
                      label=f"{label} p99")
    for axis, title in ((ttft_axis, "Time to first token"), (tpot_axis, "Time per output token")):
        axis.set_title(title)
        axis.set_xlabel("output tokens/s")
        axis.set_ylabel("ms")
        axis.grid(alpha=0.3)
    ttft_axis.set_yscale("log")
    tpot_axis.legend(fontsize=7, loc="best")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def pareto_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats on both axes (lower is better on each)."""
    front, best_y = [], float("inf")
    for x, y in sorted(points):
        if y < best_y:
            front.append((x, y))
            best_y = y
    return front


def draw_front(axis: Any, placed: list[tuple[float, float]], **style: Any) -> None:
    front = pareto_front(placed)
    if front:
        axis.plot(*zip(*front), "k--", linewidth=1, label="frontier (lower-left is better)", **style)
        axis.legend(fontsize=8)


def label_points(axis: Any, labels: list[str], xs: list[float], ys: list[float]) -> None:
    """Labels staggered up and down so that points close together keep readable labels, and
    right-aligned in the right half so that none runs off the panel. The stagger follows the
    points' order by height within each half: points of one height side by side (the same
    perplexity at several prices) get labels on lines of their own."""
    middle = (min(xs) + max(xs)) / 2 if xs else 0
    halves = {False: [], True: []}
    for index, x in enumerate(xs):
        halves[x > middle].append(index)
    for right, indices in halves.items():
        for rank, index in enumerate(sorted(indices, key=lambda i: (ys[i], xs[i]))):
            axis.annotate(labels[index], (xs[index], ys[index]), fontsize=7, textcoords="offset points",
                          ha="right" if right else "left", xytext=(-6 if right else 6, 4 - 11 * (rank % 4)))


def cost_vs_p99(points: list[tuple[str, dict[str, Any]]], path: Path) -> Path:
    """The trilemma on one picture: each configuration at its p99 TTFT and $ per 1M tokens,
    its marker sized by throughput; the frontier joins the ones nothing else beats."""
    figure, axis = plt.subplots(figsize=(7.5, 5))
    placed = []
    for label, summary in points:
        cost, p99 = usd_per_1m_tokens(summary), summary["ttft_ms"]["p99"]
        if cost is None or p99 != p99:  # no price, or no successful request
            continue
        size = 20 + 4 * summary["output_token_throughput_tps"]
        axis.scatter(p99, cost, s=size, alpha=0.7)
        axis.annotate(label, (p99, cost), fontsize=7, xytext=(4, 4), textcoords="offset points")
        placed.append((p99, cost))
    draw_front(axis, placed)
    axis.set_xscale("log")
    axis.set_xlabel("TTFT p99 (ms)")
    axis.set_ylabel("$ per 1M tokens")
    axis.set_title("Cost against tail latency (marker size: output tokens/s)")
    axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def sweep_curves(sweep: dict[str, Any], slo_ms: dict[str, float], path: Path) -> Path:
    """Goodput per $ and p99 latencies along the knob, SLO lines, the knee marked."""
    settings = sweep["settings"]
    labels = [str(s["value"]) for s in settings]
    x = range(len(settings))
    figure, (merit_axis, latency_axis) = plt.subplots(1, 2, figsize=(11, 4.2))
    per_usd = [s["summary"].get("good_requests_per_usd") for s in settings]
    if all(v is not None for v in per_usd):
        merit_axis.plot(x, per_usd, "o-", label="good requests per $")
        merit_axis.set_ylabel("good requests per $")
    else:
        merit_axis.plot(x, [s["summary"]["goodput_rps"] for s in settings], "o-", label="goodput req/s")
        merit_axis.set_ylabel("goodput req/s")
    throughput_axis = merit_axis.twinx()
    throughput_axis.plot(x, [s["summary"]["output_token_throughput_tps"] for s in settings], "^:",
                         color="gray", label="output tokens/s")
    throughput_axis.set_ylabel("output tokens/s")
    for metric, marker in (("ttft_ms", "o-"), ("tpot_ms", "s-")):
        latency_axis.plot(x, [s["summary"][metric]["p99"] for s in settings], marker,
                          label=f"{metric[:4].upper()} p99")
    for name, limit in slo_ms.items():
        latency_axis.axhline(limit, linestyle="--", linewidth=1, color="red")
        latency_axis.annotate(f"SLO {name}", (0, limit), fontsize=7, color="red",
                              xytext=(2, 2), textcoords="offset points")
    knee = sweep["knee"]["value"]
    for axis in (merit_axis, latency_axis):
        axis.set_xticks(list(x), labels)
        axis.set_xlabel(sweep["knob"])
        axis.grid(alpha=0.3)
        if knee is not None:
            axis.axvline(labels.index(str(knee)), color="green", linewidth=2, alpha=0.4, label="knee")
    latency_axis.set_yscale("log")
    latency_axis.set_ylabel("ms")
    latency_axis.legend(fontsize=8)
    merit_axis.legend(fontsize=8, loc="upper left")
    merit_axis.set_title("What each setting buys")
    latency_axis.set_title("What it costs in tail latency")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def quality_corners(pools: list[dict[str, Any]], path: Path) -> Path:
    """The three corners per pool and precision: p99 TTFT against $ per 1M tokens, coloured by
    perplexity (left), and what the quality costs, perplexity against $ per 1M tokens (right)."""
    figure, (trade_axis, quality_axis) = plt.subplots(1, 2, figsize=(11, 4.2))
    priced = [p for p in pools if p["usd_per_1m_tokens"] is not None]
    if priced:
        dots = trade_axis.scatter([p["ttft_ms"]["p99"] for p in priced], [p["usd_per_1m_tokens"] for p in priced],
                                  c=[p["perplexity"] for p in priced], cmap="viridis_r", s=80)
        figure.colorbar(dots, ax=trade_axis, label="perplexity (lower is better)")
        quality_axis.scatter([p["usd_per_1m_tokens"] for p in priced], [p["perplexity"] for p in priced], s=80)
    for p in priced:
        label = f"{p['pool']} ({p['precision_label']})"
        trade_axis.annotate(label, (p["ttft_ms"]["p99"], p["usd_per_1m_tokens"]), fontsize=7,
                            xytext=(4, 4), textcoords="offset points")
        quality_axis.annotate(f"{label}, task {p['task_score']:.0%}", (p["usd_per_1m_tokens"], p["perplexity"]),
                              fontsize=7, xytext=(4, 4), textcoords="offset points")
    trade_axis.set_xlabel("TTFT p99 (ms)")
    trade_axis.set_ylabel("$ per 1M tokens")
    trade_axis.set_title("Latency and cost, coloured by quality")
    quality_axis.set_xlabel("$ per 1M tokens")
    quality_axis.set_ylabel("perplexity on held-out text")
    quality_axis.set_title("What the quality costs (lower-left is better)")
    for axis in (trade_axis, quality_axis):
        axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def on_three_corners(pool: dict[str, Any]) -> bool:
    """Whether `three_corners` can place a quality pool: it needs a price, a p99 and a perplexity."""
    values = (pool["usd_per_1m_tokens"], pool["ttft_ms"]["p99"], pool["perplexity"])
    return all(isinstance(v, (int, float)) and math.isfinite(v) for v in values)


def three_corners(points: list[tuple[str, dict[str, Any]]], path: Path) -> Path:
    """Every pool and precision of `bench quality` results on the trilemma's three axes: p99 TTFT
    against $ per 1M tokens coloured by perplexity (left), perplexity against $ per 1M tokens
    (right), each with the frontier of its two axes. A pool with no price is left off."""
    figure, (latency_axis, quality_axis) = plt.subplots(1, 2, figsize=(12, 4.8))
    placed = [(label, pool) for label, pool in points if on_three_corners(pool)]
    costs = [pool["usd_per_1m_tokens"] for _, pool in placed]
    p99s = [pool["ttft_ms"]["p99"] for _, pool in placed]
    perplexities = [pool["perplexity"] for _, pool in placed]
    if placed:
        dots = latency_axis.scatter(costs, p99s, c=perplexities, cmap="viridis_r", s=80)
        figure.colorbar(dots, ax=latency_axis, label="perplexity (lower is better)")
        # The same colours on the right, so a pool reads as one colour across both panels.
        quality_axis.scatter(costs, perplexities, c=perplexities, cmap=dots.cmap, norm=dots.norm, s=80)
        # Rings mark the front's points: a front of one point draws no line.
        ring = {"marker": "o", "markersize": 13, "markerfacecolor": "none"}
        draw_front(latency_axis, list(zip(costs, p99s)), **ring)
        draw_front(quality_axis, list(zip(costs, perplexities)), **ring)
    labels = [label for label, _ in placed]
    label_points(latency_axis, labels, costs, p99s)
    label_points(quality_axis, [f"{label}, task {pool['task_score']:.0%}" for label, pool in placed],
                 costs, perplexities)
    latency_axis.set_ylabel("TTFT p99 (ms)")
    latency_axis.set_title("Cost and tail latency, coloured by perplexity")
    quality_axis.set_ylabel("perplexity on held-out text")
    quality_axis.set_title("What the quality costs")
    for axis in (latency_axis, quality_axis):
        axis.set_xlabel("$ per 1M tokens")
        axis.margins(0.08, 0.15)  # room for the staggered labels at the edges
        axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
