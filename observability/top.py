"""`trilemma top`: the board in a terminal, refreshed, for those with no Grafana at hand.

Two tables: per pool and scenario (requests/s, TTFT and TPOT p50/p99 against the SLOs), and
per pool (engine busy, in engine, waiting, sheds/s, $/hour busy and idle, $ per request). They
come from one of two sources:
- `PrometheusSource`: the same PromQL as the dashboard (observability/promql.py) over a window;
- `ExporterSource`: the app's own metrics endpoint (Ray's exporter) read twice, the figures
  being what changed in between, for when no Prometheus runs either.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Protocol

import httpx

from core import wire
from core.config import TrilemmaConfig
from core.prometheus_text import Labels, histogram_buckets, quantile, samples, total_by
from observability import promql
from observability.rules import ANSWERED, LATENCIES, slo_scenarios

PoolScenario = tuple[str, str]
QUANTILES = (50, 99)


class Source(Protocol):
    def refresh(self) -> None:
        """Take a new reading (a source that reads at each query has nothing to do)."""

    @property
    def ready(self) -> bool:
        """It has what its figures need."""

    def scenario_figures(self) -> dict[PoolScenario, dict[str, float]]: ...

    def pool_figures(self) -> dict[str, dict[str, float]]: ...


def _seconds(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 10 else f"{value:.1f} s"


def _usd(value: float) -> str:
    return f"${value:.6f}" if value < 0.01 else f"${value:.2f}"


SCENARIO_COLUMNS: dict[str, Callable[[float], str]] = {
    "req/s": lambda v: f"{v:.2f}",
    **{f"{kind.upper()} p{q}": _seconds for kind, _, _ in LATENCIES for q in QUANTILES},
}
POOL_COLUMNS: dict[str, Callable[[float], str]] = {
    "busy": lambda v: f"{v:.0%}", "in engine": lambda v: f"{v:.0f}", "waiting": lambda v: f"{v:.0f}",
    "shed/s": lambda v: f"{v:.2f}", "$/h busy": _usd, "$/h idle": _usd, "$/request": _usd,
}


class PrometheusSource:
    def __init__(self, url: str, window: str = "1m", client: httpx.Client | None = None) -> None:
        self._url = url.rstrip("/")
        self._window = window
        self._client = client or httpx.Client(timeout=10)

    def refresh(self) -> None:
        pass  # Prometheus is asked at each query

    ready = True

    def scenario_figures(self) -> dict[PoolScenario, dict[str, float]]:
        w, by = self._window, promql.BY_POOL_SCENARIO
        exprs = {"req/s": promql.requests_per_s(w, by, ANSWERED)}
        for kind, histogram, _ in LATENCIES:
            exprs.update({f"{kind.upper()} p{q}": promql.quantile(q / 100, histogram, w, by) for q in QUANTILES})
        return _by_row({name: self.query(expr, ("pool", "scenario")) for name, expr in exprs.items()})

    def pool_figures(self) -> dict[str, dict[str, float]]:
        w = self._window
        exprs = {
            "busy": promql.busy_fraction(w),
            "in engine": f"sum by (pool) ({wire.REQUESTS_IN_ENGINE})",
            "waiting": f"sum by (pool) ({wire.REQUESTS_WAITING})",
            "shed/s": promql.rate(wire.REQUESTS_SHED_TOTAL, w, "pool"),
            "$/h busy": f"{promql.rate(wire.POOL_BUSY_USD_TOTAL, w, 'pool')} * 3600",
            "$/h idle": f"{promql.rate(wire.POOL_IDLE_USD_TOTAL, w, 'pool')} * 3600",
            "$/request": f"{promql.pool_usd_per_s(w)} / {promql.requests_per_s(w, 'pool', ANSWERED)}",
        }
        figures = _by_row({name: self.query(expr, ("pool",)) for name, expr in exprs.items()})
        return {pool: values for (pool,), values in figures.items()}

    def query(self, expr: str, keys: tuple[str, ...]) -> dict[tuple[str, ...], float]:
        """Instant query; each series by the values of `keys`. A bad expression raises with
        Prometheus's own reason."""
        response = self._client.get(f"{self._url}/api/v1/query", params={"query": expr})
        body = response.json()
        if body.get("status") != "success":
            raise ValueError(f"Prometheus refused {expr!r}: {body.get('error', response.text)}")
        return {tuple(series["metric"].get(key, "") for key in keys): float(series["value"][1])
                for series in body["data"]["result"]}


class ExporterSource:
    """The app's metrics endpoint (`http://<node>:<local_ray.metrics_export_port>/metrics`): each
    reading is diffed with the one before, so the first figures come one refresh after the start."""

    def __init__(self, url: str, fetch: Callable[[str], str] | None = None) -> None:
        self._url = url
        self._fetch = fetch or (lambda u: httpx.get(u, timeout=10).raise_for_status().text)
        self._before: tuple[float, str] | None = None
        self._now: tuple[float, str] | None = None

    def refresh(self) -> None:
        self._before, self._now = self._now, (time.monotonic(), self._fetch(self._url))

    @property
    def ready(self) -> bool:
        return self._before is not None

    def scenario_figures(self) -> dict[PoolScenario, dict[str, float]]:
        if not self.ready:
            return {}
        keys = ("pool", "scenario")
        figures: dict[str, dict[tuple[str, ...], float]] = {
            "req/s": self._rates(wire.REQUESTS_TOTAL, keys, where={"status": "200"})}
        for kind, histogram, _ in LATENCIES:
            earlier = histogram_buckets(self._before[1], wire.exported(histogram), keys)
            for group, later in histogram_buckets(self._now[1], wire.exported(histogram), keys).items():
                delta = {bound: count - earlier.get(group, {}).get(bound, 0.0) for bound, count in later.items()}
                for q in QUANTILES:
                    value = quantile(delta, q / 100)
                    if not math.isnan(value):
                        figures.setdefault(f"{kind.upper()} p{q}", {})[group] = value
        return _by_row(figures)

    def pool_figures(self) -> dict[str, dict[str, float]]:
        if not self.ready:
            return {}
        pool = ("pool",)
        busy = self._rates(wire.ENGINE_BUSY_SECONDS_TOTAL, pool)
        alive = self._rates(wire.REPLICA_SECONDS_TOTAL, pool)
        busy_usd = self._rates(wire.POOL_BUSY_USD_TOTAL, pool)
        idle_usd = self._rates(wire.POOL_IDLE_USD_TOTAL, pool)
        answered = self._rates(wire.REQUESTS_TOTAL, pool, where={"status": "200"})
        figures = {
            "busy": {k: busy.get(k, 0.0) / v for k, v in alive.items() if v > 0},
            "in engine": self._gauges(wire.REQUESTS_IN_ENGINE),
            "waiting": self._gauges(wire.REQUESTS_WAITING),
            "shed/s": self._rates(wire.REQUESTS_SHED_TOTAL, pool),
            "$/h busy": {k: v * 3600 for k, v in busy_usd.items()},
            "$/h idle": {k: v * 3600 for k, v in idle_usd.items()},
            "$/request": {k: (busy_usd.get(k, 0.0) + idle_usd.get(k, 0.0)) / n for k, n in answered.items() if n > 0},
        }
        return {pool_name: values for (pool_name,), values in _by_row(figures).items()}

    def _rates(self, metric: str, keys: tuple[str, ...], where: dict[str, str] | None = None
               ) -> dict[tuple[str, ...], float]:
        (t0, before), (t1, after) = self._before, self._now
        earlier = total_by(self._samples(before, metric), *keys, where=where)
        later = total_by(self._samples(after, metric), *keys, where=where)
        return {k: max(0.0, v - earlier.get(k, 0.0)) / (t1 - t0) for k, v in later.items()}

    def _gauges(self, metric: str) -> dict[tuple[str, ...], float]:
        return total_by(self._samples(self._now[1], metric), "pool")

    @staticmethod
    def _samples(text: str, metric: str) -> dict[Labels, float]:
        return samples(text, wire.exported(metric)) or samples(text, metric)


def render(source: Source, config: TrilemmaConfig, heading: str) -> str:
    lines = [f"trilemma top: app {config.app_name}, {heading}", ""]
    slos = {kind: slo_scenarios(config, kind) for kind, _, _ in LATENCIES}
    table = [["pool", "scenario", *SCENARIO_COLUMNS, "SLO TTFT/TPOT"]]
    for (pool, scenario), values in sorted(source.scenario_figures().items()):
        slo = " / ".join(_seconds(slos[kind][scenario]) if scenario in slos[kind] else "-" for kind in slos)
        table.append([pool, scenario, *(_cell(show, values.get(name)) for name, show in SCENARIO_COLUMNS.items()), slo])
    lines += _table(table) + [""]
    table = [["pool", *POOL_COLUMNS]]
    for pool, values in sorted(source.pool_figures().items()):
        table.append([pool, *(_cell(show, values.get(name)) for name, show in POOL_COLUMNS.items())])
    return "\n".join(lines + _table(table))


def _by_row(figures: dict[str, dict[tuple[str, ...], float]]) -> dict[tuple[str, ...], dict[str, float]]:
    rows: dict[tuple[str, ...], dict[str, float]] = {}
    for name, values in figures.items():
        for key, value in values.items():
            rows.setdefault(key, {})[name] = value
    return rows


def _cell(show: Callable[[float], str], value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else show(value)


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.rjust(width) if i else cell.ljust(width) for i, (cell, width) in enumerate(zip(row, widths)))
            for row in rows]
