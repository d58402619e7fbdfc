"""Per-request records and their aggregates: percentiles, throughput, goodput and cost."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class RequestRecord:
    """One request as the client saw it. Times are seconds; `started_s` is from run start."""

    scenario: str
    started_s: float
    e2e_s: float
    ttft_s: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # Gaps between streamed chunks that carried text (a chunk may hold several tokens).
    itl_s: list[float] = field(default_factory=list)
    cost_usd: float | None = None
    pool: str | None = None
    error: str | None = None
    # Milliseconds of the first token's hops through the app, when they were asked for.
    hops_ms: dict[str, float] | None = None
    # With them, the gaps between the items of the engine's stream as the pool replica got them,
    # and between the replica's items as the router got them.
    engine_gaps_s: list[float] = field(default_factory=list)
    router_gaps_s: list[float] = field(default_factory=list)
    # With them too: the gaps between all of this client's events, those without text as well
    # (`itl_s` skips them), and each item's way out: from the replica's receipt of the engine's
    # output to the router's receipt, and from there to this client's (one clock: the client, the
    # router and the replica on one host).
    event_gaps_s: list[float] = field(default_factory=list)
    replica_to_router_s: list[float] = field(default_factory=list)
    router_to_client_s: list[float] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first, the steady decode pace."""
        if self.ttft_s is None or self.completion_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.completion_tokens - 1)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "tpot_s": self.tpot_s}


@dataclass(frozen=True)
class Slo:
    """A scenario's service-level objective; None means the metric is not judged."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    def met_by(self, record: RequestRecord) -> bool:
        if not record.ok:
            return False
        checks = ((self.ttft_s, record.ttft_s), (self.tpot_s, record.tpot_s), (self.e2e_s, record.e2e_s))
        return all(limit is None or (value is not None and value <= limit) for limit, value in checks)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100), interpolated linearly between ranks as numpy does."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def distribution_ms(values_s: list[float]) -> dict[str, float]:
    values = [v * 1000 for v in values_s]
    if not values:
        return {"mean": math.nan, "p50": math.nan, "p90": math.nan, "p99": math.nan, "count": 0}
    return {
        "mean": sum(values) / len(values),
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "count": len(values),
    }


def summarize(
    records: list[RequestRecord], duration_s: float, slos: dict[str, Slo] | None = None
) -> dict[str, Any]:
    """Aggregates of one run. Goodput counts requests that met every SLO of their scenario
    (DistServe's definition); a scenario without an SLO counts every successful request."""
    slos = slos or {}
    ok = [r for r in records if r.ok]
    prompt_tokens = sum(r.prompt_tokens for r in ok)
    completion_tokens = sum(r.completion_tokens for r in ok)
    good = [r for r in ok if slos.get(r.scenario, Slo()).met_by(r)]
    costed = [r for r in ok if r.cost_usd is not None]
    total_cost = sum(r.cost_usd for r in costed) if costed else None
    costed_tokens = sum(r.prompt_tokens + r.completion_tokens for r in costed)
    errors: dict[str, int] = {}
    for record in records:
        if record.error is not None:
            kind = record.error.split(":", 1)[0]
            errors[kind] = errors.get(kind, 0) + 1
    per_scenario = {r.scenario for r in records}
    return {
        "duration_s": duration_s,
        "requests": len(records),
        "succeeded": len(ok),
        "errors": errors,
        "request_throughput_rps": len(ok) / duration_s,
        "output_token_throughput_tps": completion_tokens / duration_s,
        "total_token_throughput_tps": (prompt_tokens + completion_tokens) / duration_s,
        "goodput_rps": len(good) / duration_s,
        "slo_attainment": len(good) / len(records) if records else math.nan,
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "ttft_ms": distribution_ms([r.ttft_s for r in ok if r.ttft_s is not None]),
        "tpot_ms": distribution_ms([r.tpot_s for r in ok if r.tpot_s is not None]),
        "itl_ms": distribution_ms([gap for r in ok for gap in r.itl_s]),
        "e2e_ms": distribution_ms([r.e2e_s for r in ok]),
        "cost_usd": total_cost,
        "usd_per_request": total_cost / len(costed) if costed else None,
        "usd_per_1m_tokens": total_cost / costed_tokens * 1e6 if costed_tokens else None,
        "scenarios": sorted(per_scenario),
    }
