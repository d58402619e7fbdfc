"""Reads the Prometheus text exposition format: the samples of one metric, by label set."""

from __future__ import annotations

import re

# name{label="value",...} value   (values may be in exponent form; labels may be absent)
_SAMPLE = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)')
_LABEL = re.compile(r'(?P<key>[a-zA-Z_][a-zA-Z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')

Labels = tuple[tuple[str, str], ...]


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
