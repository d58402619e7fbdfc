"""The simulated comparison: one bursty day served by the autoscaled pool and by static
pools of every size up to its max_replicas; static peak provisioning is the smallest static
pool that meets the SLO target on the day."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from autoscaling.bounds import pool_bounds
from bench.autoscale.bursty_trace import Phase, TraceRequest, arrivals, bursty_day
from bench.autoscale.replica_model import ReplicaModel
from bench.autoscale.simulator import PoolSimulation, SimResult, percentile, simulated_policy
from core.config import ConfigError, TrilemmaConfig

SLO_TARGET = 0.99  # the share of requests that must meet every SLO of the pool
SAVINGS_TARGET = 0.30


@dataclass(frozen=True)
class DayShape:
    quiet_rate: float
    peak_rate: float
    seconds: float
    prompt_tokens: tuple[int, int]
    output_tokens: tuple[int, int]
    seed: int = 0

    def phases(self) -> list[Phase]:
        return bursty_day(self.quiet_rate, self.peak_rate, seconds=self.seconds)

    def trace(self) -> list[TraceRequest]:
        return arrivals(self.phases(), prompt_tokens=self.prompt_tokens, output_tokens=self.output_tokens,
                        seed=self.seed)


def summarize(name: str, result: SimResult, usd_per_hour: float, slo_ttft_s: float | None,
              slo_tpot_s: float | None) -> dict[str, Any]:
    requests = result.requests
    met = sum((slo_ttft_s is None or r.ttft_s <= slo_ttft_s)
              and (slo_tpot_s is None or r.tpot_s is None or r.tpot_s <= slo_tpot_s) for r in requests)
    ttft = [r.ttft_s * 1000 for r in requests]
    tpot = [r.tpot_s * 1000 for r in requests if r.tpot_s is not None]
    replica_s = result.replica_seconds()
    return {
        "arm": name, "requests": len(requests), "slo_attainment": met / len(requests),
        "replica_seconds": replica_s, "usd": replica_s * usd_per_hour / 3600,
        "peak_replicas": max(sample["replicas"] for sample in result.timeline),
        "ttft_ms": {"p50": percentile(ttft, 50), "p99": percentile(ttft, 99)},
        "tpot_ms": {"p50": percentile(tpot, 50), "p99": percentile(tpot, 99)},
        "seconds": result.ended_at,
        "asleep_seconds": result.asleep_seconds,
    }


def compare(config: TrilemmaConfig, pool: str, model: ReplicaModel, usd_per_hour: float,
            day: DayShape) -> dict[str, Any]:
    if pool not in config.autoscaling.pools or not config.autoscaling.enabled:
        raise ConfigError(f"the config does not autoscale pool {pool!r}: set autoscaling.enabled and "
                          f"autoscaling.pools.{pool}")
    bounds = pool_bounds(config)[pool]
    if bounds.slo_ttft_s is None and bounds.slo_tpot_s is None:
        raise ConfigError(f"no scenario that pool {pool!r} serves has an SLO (slo_ttft_ms or slo_tpot_ms)")
    trace = day.trace()
    if not trace:
        raise ConfigError("the day has no request: raise --quiet-rate or --peak-rate")
    # The policy logs each decision; a simulated day makes thousands.
    logging.getLogger("ray.serve").setLevel(logging.WARNING)
    raw = config.model_dump(mode="json")
    start = max(bounds.min_replicas, min(bounds.max_replicas, config.pools[pool].replicas))
    auto_sim = PoolSimulation(model, usd_per_hour, replicas=start, period_s=config.autoscaling.period_s,
                              policy=simulated_policy(raw, pool, usd_per_hour))
    auto_result = auto_sim.run(trace)
    autoscaled = summarize("autoscaled", auto_result, usd_per_hour, bounds.slo_ttft_s, bounds.slo_tpot_s)
    statics = [summarize(f"static {n}", PoolSimulation(model, usd_per_hour, replicas=n).run(trace),
                         usd_per_hour, bounds.slo_ttft_s, bounds.slo_tpot_s)
               for n in range(max(1, bounds.min_replicas), bounds.max_replicas + 1)]
    meeting = [arm for arm in statics if arm["slo_attainment"] >= SLO_TARGET]
    peak = meeting[0] if meeting else statics[-1]
    savings = 1 - autoscaled["replica_seconds"] / peak["replica_seconds"]
    # Asleep, a replica's GPU memory serves other work but the GPU stays held: were nothing
    # else to use it, its time asleep would be paid too.
    savings_if_asleep_paid = 1 - (autoscaled["replica_seconds"] + auto_result.asleep_seconds) / peak["replica_seconds"]
    return {
        "kind": "autoscale_simulation",
        "pool": pool,
        "slo": {"ttft_ms": bounds.slo_ttft_s and bounds.slo_ttft_s * 1000,
                "tpot_ms": bounds.slo_tpot_s and bounds.slo_tpot_s * 1000, "target": SLO_TARGET},
        "model": model.to_dict(),
        "usd_per_hour": usd_per_hour,
        "day": {"phases": [vars(p) for p in day.phases()], "requests": len(trace),
                "prompt_tokens": day.prompt_tokens, "output_tokens": day.output_tokens, "seed": day.seed},
        "autoscaled": autoscaled,
        "static": statics,
        "static_peak": peak["arm"],
        "savings": savings,
        "savings_if_asleep_paid": savings_if_asleep_paid,
        "verdict": {
            "savings_at_least_30pct": savings >= SAVINGS_TARGET,
            "attainment_at_least_99pct": autoscaled["slo_attainment"] >= SLO_TARGET,
            "static_peak_meets_slo": bool(meeting),
        },
        "timeline": auto_result.timeline,
        "decisions": [{k: d[k] for k in ("at", "from", "to", "policy", "reason") if k in d}
                      for d in auto_result.decisions],
    }
