"""Reads the app's metrics in the Prometheus text exposition format: the samples of one
metric by label set, and the router's own TTFT and TPOT histograms over a phase.

The client measures what a user sees; the router measures from the request's arrival to the
engine's first token. Reading both shows where time went. Prometheus histograms are
cumulative, so a phase's distribution is the difference of two scrapes, and its quantiles
are interpolated within buckets as PromQL's `histogram_quantile` does.
"""

from __future__ import annotations

import math
import re
import time

import httpx

from core.wire import TPOT_SECONDS, TTFT_SECONDS, exported

# name{label="value",...} value   (values may be in exponent form; labels may be absent)
_SAMPLE = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)')
_LABEL = re.compile(r'(?P<key>[a-zA-Z_][a-zA-Z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')

Labels = tuple[tuple[str, str], ...]

# Ray's metrics agent takes up to its report interval (10 s) to expose a recorded value.
EXPORT_DELAY_S = 12.0
HISTOGRAMS = {"ttft": exported(TTFT_SECONDS), "tpot": exported(TPOT_SECONDS)}


def samples(text: str, name: str) -> dict[Labels, float]:
    """`name`'s samples, keyed by their sorted (label, value) pairs."""
    found: dict[Labels, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match or match["name"] != name:
            continue
        labels = tuple(sorted((m["key"], m["value"]) for m in _LABEL.finditer(match["labels"] or "")))
        found[labels] = float(match["value"])
    return found


def total_by(series: dict[Labels, float], *keys: str, where: dict[str, str] | None = None) -> dict[tuple[str, ...], float]:
    """Sums samples grouped by `keys` (like PromQL's `sum by`), keeping those matching `where`."""
    grouped: dict[tuple[str, ...], float] = {}
    for labels, value in series.items():
        as_dict = dict(labels)
        if where and any(as_dict.get(k) != v for k, v in where.items()):
            continue
        group = tuple(as_dict.get(k, "") for k in keys)
        grouped[group] = grouped.get(group, 0.0) + value
    return grouped


def scrape(url: str | None) -> str | None:
    if url is None:
        return None
    try:
        response = httpx.get(url, timeout=10)
        response.raise_for_status()
        return response.text
    except httpx.HTTPError:
        return None


def settled_scrape(url: str | None) -> str | None:
    """A scrape taken once everything recorded so far has reached the exporter."""
    if url is None:
        return None
    time.sleep(EXPORT_DELAY_S)
    return scrape(url)


def histogram_buckets(text: str, metric: str, keys: tuple[str, ...]) -> dict[tuple[str, ...], dict[float, float]]:
    """Cumulative bucket counts by upper bound, summed per group of `keys`."""
    grouped: dict[tuple[str, ...], dict[float, float]] = {}
    series: dict[Labels, float] = samples(text, f"{metric}_bucket")
    for labels, count in series.items():
        as_dict = dict(labels)
        group = tuple(as_dict.get(key, "") for key in keys)
        bound = math.inf if as_dict["le"] == "+Inf" else float(as_dict["le"])
        per_bound = grouped.setdefault(group, {})
        per_bound[bound] = per_bound.get(bound, 0.0) + count
    return grouped


def quantile(buckets: dict[float, float], q: float) -> float:
    """The q-quantile (0..1) of cumulative bucket counts, linear within a bucket."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0.0
    if total <= 0:
        return math.nan
    rank, lower, below = q * total, 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):  # above the last finite bound: report that bound, as PromQL does
                return lower
            return lower + (bound - lower) * (rank - below) / max(count - below, 1e-12)
        lower, below = bound, count
    return lower


def phase_latency(before: str | None, after: str | None, keys: tuple[str, ...] = ("scenario", "priority")
                  ) -> dict[str, dict[str, float]] | None:
    """{"chat/0": {"ttft_count": n, "ttft_p50_ms": ..., "ttft_p99_ms": ..., "tpot_...": ...}}; None
    when the metrics could not be read."""
    if before is None or after is None:
        return None
    figures: dict[str, dict[str, float]] = {}
    for short, metric in HISTOGRAMS.items():
        earlier = histogram_buckets(before, metric, keys)
        for group, later in histogram_buckets(after, metric, keys).items():
            delta = {bound: count - earlier.get(group, {}).get(bound, 0.0) for bound, count in later.items()}
            total = delta.get(math.inf, 0.0)
            if total <= 0:
                continue
            entry = figures.setdefault("/".join(group), {})
            entry[f"{short}_count"] = total
            entry[f"{short}_p50_ms"] = quantile(delta, 0.5) * 1000
            entry[f"{short}_p99_ms"] = quantile(delta, 0.99) * 1000
    return figures
