"""`trilemma bench sweep`: one config knob over a grid, the app restarted per point, the knee.

The knee is the setting a team should run: among the points whose p99 latencies stay within
every SLO (and that failed no request), the one with the most SLO-meeting requests per
dollar. Goodput per dollar rather than raw throughput, because a setting that doubles
throughput by breaking the SLO for half the requests has bought nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import yaml

from bench.metrics import RequestRecord, Slo, percentile, summarize
from bench.pool_activity import capacity_cost
from core.config import TrilemmaConfig


class SweepError(ValueError):
    """The sweep cannot be set up as asked (no values, not one load)."""


@dataclass(frozen=True)
class Knob:
    """A dotted path into the config, e.g. `pools.short.max_num_seqs`."""

    path: str

    def apply(self, config: TrilemmaConfig, value: Any) -> TrilemmaConfig:
        """A copy of `config` with the knob set (`StrictModel.with_overrides`)."""
        return config.with_overrides({self.path: value}, source=f"{self.path}={value!r}")


def parse_values(text: str) -> list[Any]:
    """`1,2,4,8` -> [1, 2, 4, 8]; each value is read as YAML, so numbers stay numbers."""
    values = [yaml.safe_load(part) for part in text.split(",") if part.strip()]
    if not values:
        raise SweepError("--values needs at least one value")
    return values


def records_of(points: list[dict[str, Any]]) -> list[RequestRecord]:
    fields = RequestRecord.__dataclass_fields__
    return [
        RequestRecord(**{k: v for k, v in record.items() if k in fields})
        for point in points
        for record in point["records"]
    ]


def merge_rounds(points: list[dict[str, Any]], slos: dict[str, Slo]) -> dict[str, Any]:
    """One summary over every round of a setting: pooled records, summed pool windows."""
    duration = sum(p["summary"]["duration_s"] for p in points)
    summary = summarize(records_of(points), duration, slos)
    pools: dict[str, dict[str, Any]] | None = None
    if all(p["summary"].get("pools") for p in points):
        pools = {}
        for point in points:
            for name, pool in point["summary"]["pools"].items():
                total = pools.setdefault(name, {"replicas": pool["replicas"], "busy_replica_s": 0.0,
                                                "replica_s": 0.0, "busy_usd": 0.0, "idle_usd": 0.0})
                for key in ("busy_replica_s", "replica_s", "busy_usd", "idle_usd"):
                    total[key] += pool[key]
        for pool in pools.values():
            pool["busy_fraction"] = pool["busy_replica_s"] / pool["replica_s"] if pool["replica_s"] else None
    return {**summary, "pools": pools, **capacity_cost(summary, pools)}


def slo_check(records: list[RequestRecord], slos: dict[str, Slo]) -> list[str]:
    """Why a setting misses its SLOs at p99 (empty when it meets them)."""
    misses = [f"{sum(not r.ok for r in records)} requests failed"] if any(not r.ok for r in records) else []
    for scenario, slo in sorted(slos.items()):
        served = [r for r in records if r.scenario == scenario and r.ok]
        for metric, limit in (("ttft", slo.ttft_s), ("tpot", slo.tpot_s), ("e2e", slo.e2e_s)):
            values = [v for v in (getattr(r, f"{metric}_s") for r in served) if v is not None]
            if limit is None or not values:
                continue
            p99 = percentile(values, 99)
            if p99 > limit:
                misses.append(f"{scenario} {metric.upper()} p99 {p99 * 1000:.0f} ms > {limit * 1000:.0f} ms")
    return misses


def merit(summary: dict[str, Any]) -> float:
    """Good requests per dollar; good requests per second when the pools have no price."""
    per_usd = summary.get("good_requests_per_usd")
    return per_usd if per_usd is not None else summary["goodput_rps"]


def find_knee(settings: list[dict[str, Any]]) -> dict[str, Any]:
    """The best setting within SLO, and why; `settings` carry `value`, `summary`, `slo_misses`."""
    eligible = [s for s in settings if not s["slo_misses"]]
    if not eligible:
        # Still say where to look: the setting that bought the most, and what it missed by.
        nearest = max(settings, key=lambda s: merit(s["summary"]))
        return {"value": None, "reason": f"no setting kept p99 within the SLO; the most per $ was "
                                         f"{nearest['value']} ({'; '.join(nearest['slo_misses'])})"}
    # Ties (settings that all served the offered load within SLO) go to the lower tail latency.
    best = max(eligible, key=lambda s: (merit(s["summary"]), -s["summary"]["ttft_ms"]["p99"]))
    unit = "good requests per $" if best["summary"].get("good_requests_per_usd") is not None else "goodput req/s"
    return {
        "value": best["value"],
        "reason": f"most {unit} ({merit(best['summary']):.4g}) among "
                  f"{len(eligible)} of {len(settings)} settings within the SLO at p99",
    }


def run_sweep(
    config: TrilemmaConfig,
    knob: Knob,
    values: list[Any],
    measure: Callable[[TrilemmaConfig], list[dict[str, Any]]],
    slos: dict[str, Slo],
) -> dict[str, Any]:
    """Calls `measure(config_with_value)` per value (it deploys, loads, tears down) and
    finds the knee. Every config is validated before the first, slow, deployment."""
    configs = [knob.apply(config, value) for value in values]
    settings = []
    for value, point_config in zip(values, configs):
        points = measure(point_config)
        summary = merge_rounds(points, slos)
        settings.append({
            "value": value, "summary": summary, "slo_misses": slo_check(records_of(points), slos),
            "points": points,
        })
    return {"knob": knob.path, "settings": settings, "knee": find_knee(settings)}
