"""`trilemma top`: the board in a terminal, refreshed, for those with no Grafana at hand.

It asks Prometheus the same PromQL as the dashboard (observability/panels.py's figures through
observability/promql.py) over a short window, and prints two tables: per pool and scenario
(requests/s, TTFT and TPOT against the SLO), and per pool (engine busy, queue, replicas, $/hour
busy and idle, $ per request).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import httpx

from core import wire
from core.config import TrilemmaConfig
from observability import promql
from observability.rules import ANSWERED, LATENCIES, slo_scenarios

Labels = tuple[str, ...]


@dataclass(frozen=True)
class Column:
    header: str
    expr: str
    show: Callable[[float], str]


def _seconds(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 10 else f"{value:.1f} s"


def _usd(value: float) -> str:
    return f"${value:.6f}" if value < 0.01 else f"${value:.2f}"


def scenario_columns(window: str) -> list[Column]:
    columns = [Column("req/s", promql.requests_per_s(window, promql.BY_POOL_SCENARIO, ANSWERED), lambda v: f"{v:.2f}")]
    for kind, histogram, _ in LATENCIES:
        for q in (50, 99):
            columns.append(Column(f"{kind.upper()} p{q}", promql.quantile(q / 100, histogram, window,
                                                                          promql.BY_POOL_SCENARIO), _seconds))
    return columns


def pool_columns(window: str) -> list[Column]:
    return [
        Column("busy", promql.busy_fraction(window), lambda v: f"{v:.0%}"),
        Column("in engine", f"sum by (pool) ({wire.REQUESTS_IN_ENGINE})", lambda v: f"{v:.0f}"),
        Column("waiting", f"sum by (pool) ({wire.REQUESTS_WAITING})", lambda v: f"{v:.0f}"),
        Column("shed/s", promql.rate(wire.REQUESTS_SHED_TOTAL, window, "pool"), lambda v: f"{v:.2f}"),
        Column("$/h busy", f"{promql.rate(wire.POOL_BUSY_USD_TOTAL, window, 'pool')} * 3600", _usd),
        Column("$/h idle", f"{promql.rate(wire.POOL_IDLE_USD_TOTAL, window, 'pool')} * 3600", _usd),
        Column("$/request", f"{promql.pool_usd_per_s(window)} / {promql.requests_per_s(window, 'pool', ANSWERED)}",
               _usd),
    ]


class PrometheusReader:
    def __init__(self, url: str, client: httpx.Client | None = None) -> None:
        self._url = url.rstrip("/")
        self._client = client or httpx.Client(timeout=10)

    def query(self, expr: str, keys: Labels) -> dict[Labels, float]:
        """Instant query; each series by the values of `keys`. A bad expression raises with
        Prometheus's own reason."""
        response = self._client.get(f"{self._url}/api/v1/query", params={"query": expr})
        body = response.json()
        if body.get("status") != "success":
            raise ValueError(f"Prometheus refused {expr!r}: {body.get('error', response.text)}")
        values = {}
        for series in body["data"]["result"]:
            value = float(series["value"][1])
            if not math.isnan(value):
                values[tuple(series["metric"].get(key, "") for key in keys)] = value
        return values


def render(reader: PrometheusReader, config: TrilemmaConfig, window: str = "1m") -> str:
    lines = [f"trilemma top: app {config.app_name}, rates over {window}", ""]
    slos = {kind: slo_scenarios(config, kind) for kind, _, _ in LATENCIES}
    by_scenario = [(c, reader.query(c.expr, ("pool", "scenario"))) for c in scenario_columns(window)]
    rows = sorted({key for _, values in by_scenario for key in values})
    table = [["pool", "scenario", *(c.header for c, _ in by_scenario), "SLO TTFT/TPOT"]]
    for pool, scenario in rows:
        slo = " / ".join(_seconds(slos[kind][scenario]) if scenario in slos[kind] else "-" for kind in slos)
        table.append([pool, scenario, *(_cell(c, values.get((pool, scenario))) for c, values in by_scenario), slo])
    lines += _table(table) + [""]
    by_pool = [(c, reader.query(c.expr, ("pool",))) for c in pool_columns(window)]
    table = [["pool", *(c.header for c, _ in by_pool)]]
    for (pool,) in sorted({key for _, values in by_pool for key in values}):
        table.append([pool, *(_cell(c, values.get((pool,))) for c, values in by_pool)])
    lines += _table(table)
    return "\n".join(lines)


def _cell(column: Column, value: float | None) -> str:
    return "-" if value is None or math.isinf(value) else column.show(value)


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.rjust(width) if i else cell.ljust(width) for i, (cell, width) in enumerate(zip(row, widths)))
            for row in rows]
