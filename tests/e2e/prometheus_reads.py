"""Reading a counter through the e2e tier's Prometheus, which sees a request only after Ray's
exporter (every 10 s) and a scrape (every 3 s): poll until a reading arrives or settles."""

from __future__ import annotations

import time

import httpx


def query(prometheus: str, promql: str) -> float:
    """The first series' value; 0 while there is none."""
    result = httpx.get(f"{prometheus}/api/v1/query", params={"query": promql}, timeout=10).json()
    series = result["data"]["result"]
    return float(series[0]["value"][1]) if series else 0.0


def wait_for(prometheus: str, promql: str, at_least: float, timeout_s: float = 90) -> float:
    deadline = time.monotonic() + timeout_s
    while (value := query(prometheus, promql)) < at_least and time.monotonic() < deadline:
        time.sleep(1)
    return value


def settled(prometheus: str, queries: tuple[str, ...], quiet_s: float = 12) -> dict[str, float]:
    """Readings that stayed the same for `quiet_s`: earlier requests' counts may still be on
    their way through Ray's exporter."""
    readings = {q: query(prometheus, q) for q in queries}
    stable_since = time.monotonic()
    while time.monotonic() - stable_since < quiet_s:
        time.sleep(1)
        now = {q: query(prometheus, q) for q in queries}
        if now != readings:
            readings, stable_since = now, time.monotonic()
    return readings
