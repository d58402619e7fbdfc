"""Prometheus recording and alert rules, written from a config so that thresholds and SLOs
cannot drift from what the app and its autoscaler hold.

Three alerts come from the trilemma itself: a scenario's p99 above its SLO while it is busy
(latency), a pool whose engines idle while few requests come (utilization), a pool whose
requests cost more than a ceiling (cost). Burn-rate alerts (the multi-window pairs of Google's
SRE workbook) tell how fast each scenario spends its error budget: the share of requests
allowed above its SLO.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core import wire
from core.config import TrilemmaConfig
from observability import promql

# (alert suffix, long window, short window, burn rate, severity): spending a 30-day budget in
# 2 days pages; in 5 days opens a ticket.
BURN_WINDOWS = (("Fast", "1h", "5m", 14.4, "page"), ("Slow", "6h", "30m", 6.0, "ticket"))
# Requests that were served (a 429 or 503 bought nothing).
ANSWERED = '{status="200"}'
LATENCIES = (("ttft", wire.TTFT_SECONDS, "time to first token"), ("tpot", wire.TPOT_SECONDS, "time per output token"))
BUCKETS = {"ttft": wire.TTFT_BUCKETS_S, "tpot": wire.TPOT_BUCKETS_S}


@dataclass(frozen=True)
class Names:
    """The recording rules' names for a window (`level:metric:operation`)."""

    window: str

    def requests_per_s(self, level: str) -> str:
        return f"{level}:trilemma_requests:rate{self.window}"

    def latency_p(self, kind: str, q: int, level: str = "pool_scenario") -> str:
        return f"{level}:trilemma_{kind}_seconds:p{q}_{self.window}"

    @property
    def busy_fraction(self) -> str:
        return f"pool:trilemma_engine_busy:ratio_{self.window}"

    @property
    def usd_per_hour(self) -> str:
        return f"pool:trilemma_replica_usd:per_hour_{self.window}"

    @property
    def usd_per_request(self) -> str:
        return f"pool:trilemma_usd_per_request:{self.window}"

    @staticmethod
    def over_slo(kind: str, window: str) -> str:
        return f"scenario:trilemma_{kind}_over_slo:ratio_{window}"


def names_for(config: TrilemmaConfig) -> Names:
    return Names(f"{config.alerts.window_minutes}m")


def rules_for(config: TrilemmaConfig) -> dict[str, Any]:
    """The rules file (as Prometheus reads it) for a config."""
    return {"groups": [
        {"name": "trilemma-recording", "rules": recording_rules(config)},
        {"name": "trilemma-alerts", "rules": alert_rules(config)},
    ]}


def slo_scenarios(config: TrilemmaConfig, kind: str) -> dict[str, float]:
    """Scenario -> its SLO in seconds, for those that set one of this kind."""
    slos = {name: getattr(s, f"slo_{kind}_ms") for name, s in config.scenarios.items()}
    return {name: ms / 1000 for name, ms in slos.items() if ms}


def recording_rules(config: TrilemmaConfig) -> list[dict[str, str]]:
    names, window = names_for(config), f"{config.alerts.window_minutes}m"
    rules = [
        _record(names.requests_per_s("pool_scenario"), promql.requests_per_s(window, promql.BY_POOL_SCENARIO)),
        _record(names.requests_per_s("scenario"), promql.requests_per_s(window, "scenario")),
        _record(names.requests_per_s("pool"), promql.requests_per_s(window, "pool")),
    ]
    for kind, histogram, _ in LATENCIES:
        for q in (50, 99):
            rules.append(_record(names.latency_p(kind, q), promql.quantile(q / 100, histogram, window, promql.BY_POOL_SCENARIO)))
        rules.append(_record(names.latency_p(kind, 99, "scenario"), promql.quantile(0.99, histogram, window, "scenario")))
    rules += [
        _record(names.busy_fraction, promql.busy_fraction(window)),
        _record(names.usd_per_hour, f"{promql.pool_usd_per_s(window)} * 3600"),
        _record(names.usd_per_request,
                f"{promql.pool_usd_per_s(window)} / {promql.requests_per_s(window, 'pool', ANSWERED)}"),
    ]
    windows = sorted({w for _, long, short, _, _ in BURN_WINDOWS for w in (long, short)}, key=_minutes)
    for kind, histogram, _ in LATENCIES:
        for scenario, slo_s in slo_scenarios(config, kind).items():
            bucket_s = promql.slo_bucket(BUCKETS[kind], slo_s)
            for w in windows:
                rules.append({**_record(names.over_slo(kind, w), promql.over_slo_fraction(histogram, bucket_s, w, scenario)),
                              "labels": {"slo_seconds": _number(slo_s), "counted_from_seconds": _number(bucket_s)}})
    return rules


def alert_rules(config: TrilemmaConfig) -> list[dict[str, Any]]:
    alerts, names = config.alerts, names_for(config)
    hold = f"{alerts.for_minutes:g}m"
    rules = []
    for kind, _, words in LATENCIES:
        for scenario, slo_s in slo_scenarios(config, kind).items():
            rules.append({
                "alert": f"Trilemma{kind.upper()}AboveSLO",
                "expr": (f'{names.latency_p(kind, 99, "scenario")}{{scenario="{scenario}"}} > {_number(slo_s)} '
                         f'and on (scenario) {names.requests_per_s("scenario")} > {_number(alerts.busy_requests_per_s)}'),
                "for": hold,
                "labels": {"severity": "page", "scenario": scenario},
                "annotations": {
                    "summary": f"Scenario {scenario}: p99 {words} above its SLO while busy",
                    "description": (f"p99 {words} of {scenario} over {names.window} is above its SLO of "
                                    f"{_number(slo_s)} s while it serves more than "
                                    f"{_number(alerts.busy_requests_per_s)} req/s. Add replicas, raise the "
                                    f"engine concurrency, or shed lower priorities."),
                },
            })
            for suffix, long, short, burn, severity in BURN_WINDOWS:
                threshold = _number(burn * alerts.slo_error_budget)
                rules.append({
                    "alert": f"Trilemma{kind.upper()}SLOBurn{suffix}",
                    "expr": (f'{names.over_slo(kind, long)}{{scenario="{scenario}"}} > {threshold} '
                             f'and {names.over_slo(kind, short)}{{scenario="{scenario}"}} > {threshold}'),
                    "labels": {"severity": severity, "scenario": scenario},
                    "annotations": {
                        "summary": f"Scenario {scenario} spends its {words} error budget {burn:g}x too fast",
                        "description": (f"More than {threshold} of {scenario}'s requests took longer than its SLO "
                                        f"of {_number(slo_s)} s over {long} and over {short}; the objective allows "
                                        f"{_number(alerts.slo_error_budget)}."),
                    },
                })
    rules.append({
        "alert": "TrilemmaPoolUnderused",
        "expr": (f"{names.busy_fraction} < {_number(alerts.utilization_below)} "
                 f"unless on (pool) {names.requests_per_s('pool')} >= {_number(alerts.quiet_requests_per_s)}"),
        "for": hold,
        "labels": {"severity": "ticket"},
        "annotations": {
            "summary": "Pool {{ $labels.pool }}: engines mostly idle while few requests come",
            "description": (f"The engines of pool {{{{ $labels.pool }}}} held a request less than "
                            f"{alerts.utilization_below:.0%} of the time over {names.window} while it served "
                            f"fewer than {_number(alerts.quiet_requests_per_s)} req/s: its replicas are paid "
                            f"for idling. Lower its min_replicas or let it scale to zero."),
        },
    })
    rules.append({
        "alert": "TrilemmaCostPerRequestHigh",
        "expr": f"{names.usd_per_request} > {_number(alerts.usd_per_request_above)}",
        "for": hold,
        "labels": {"severity": "ticket"},
        "annotations": {
            "summary": "Pool {{ $labels.pool }}: requests cost more than the ceiling",
            "description": (f"Pool {{{{ $labels.pool }}}}'s replicas cost more than ${_number(alerts.usd_per_request_above)} "
                            f"per request over {names.window}: more "
                            f"replicas than the load needs, or a pool too dear for its requests."),
        },
    })
    return rules


def _record(name: str, expr: str) -> dict[str, str]:
    return {"record": name, "expr": expr}


def _number(value: float) -> str:
    return f"{value:g}"


def _minutes(window: str) -> int:
    return int(window[:-1]) * (60 if window.endswith("h") else 1)
