"""The figures of one arm's replay: goodput and SLO attainment (per scenario and per prompt
length), latencies, refusals by reason, throughput, dollars, and the pools' prefix-cache hits."""

from __future__ import annotations

import math
from typing import Any

from bench.metrics import Slo, distribution_ms, summarize
from bench.replay.send import ReplayRecord
from core.config import TrilemmaConfig

# Prompt lengths the attainment is split by: chat turns, documents, long documents.
LENGTH_BUCKETS = ((256, "<=256"), (1024, "257-1K"), (4096, "1K-4K"), (16384, "4K-16K"), (math.inf, ">16K"))


def config_slos(config: TrilemmaConfig) -> dict[str, Slo]:
    """Each scenario's SLO as the config states it (the autoscaler's and the alerts')."""
    return {name: Slo(ttft_s=s.slo_ttft_ms / 1000 if s.slo_ttft_ms else None,
                      tpot_s=s.slo_tpot_ms / 1000 if s.slo_tpot_ms else None)
            for name, s in config.scenarios.items() if s.slo_ttft_ms or s.slo_tpot_ms}


def length_bucket(prompt_tokens: int) -> str:
    return next(name for bound, name in LENGTH_BUCKETS if prompt_tokens <= bound)


def _attainment(records: list[ReplayRecord], slos: dict[str, Slo]) -> dict[str, Any]:
    met = sum(slos.get(r.scenario, Slo()).met_by(r) for r in records)
    return {"requests": len(records), "met": met, "attainment": met / len(records) if records else None}


def fleet_usd_per_hour(config: TrilemmaConfig, rates: dict[str, float]) -> float:
    """What the pools' replicas cost per hour together: the GPU share every arm is given. An
    autoscaled pool is charged its max_replicas, the share it may take whenever it wants it."""
    scaling = config.autoscaling.pools if config.autoscaling.enabled else {}
    return sum(rates[name] * (scaling[name].max_replicas if name in scaling else pool.replicas)
               for name, pool in config.pools.items())


def arm_figures(records: list[ReplayRecord], duration_s: float, slos: dict[str, Slo], usd_per_hour: float,
                prefix_cache: dict[str, dict[str, float]] | None = None) -> dict[str, Any]:
    """Rates are over `duration_s`, the replay window's length (the same for every arm that
    replayed it). Goodput counts requests that met every SLO of their scenario; a refused request meets
    none. Dollars: the GPU share held for the run at its price (the same for every arm on the
    same share), per 1M tokens served and per good request; beside them, what the app's own
    accounting charged the requests (their busy time), where the server reports it."""
    base = summarize(records, duration_s, slos)
    good = base["goodput_rps"] * duration_s
    served_tokens = base["prompt_tokens"] + base["completion_tokens"]
    held_usd = usd_per_hour * duration_s / 3600
    refused: dict[str, int] = {}
    for record in records:
        if record.refused is not None:
            refused[record.refused] = refused.get(record.refused, 0) + 1
    scenarios = sorted({r.scenario for r in records})
    lengths = [name for _, name in LENGTH_BUCKETS]
    late = [max(0.0, r.started_s - r.planned_s) for r in records]
    return {
        **{key: base[key] for key in ("duration_s", "requests", "succeeded", "request_throughput_rps",
                                      "output_token_throughput_tps", "total_token_throughput_tps", "goodput_rps",
                                      "slo_attainment", "prompt_tokens", "completion_tokens", "ttft_ms", "tpot_ms",
                                      "itl_ms", "e2e_ms")},
        "refused": refused,
        "by_scenario": {name: {**_attainment([r for r in records if r.scenario == name], slos),
                               "ttft_ms": distribution_ms([r.ttft_s for r in records
                                                           if r.scenario == name and r.ttft_s is not None])}
                        for name in scenarios},
        "by_prompt_length": {name: _attainment([r for r in records if length_bucket(r.trace_prompt_tokens) == name],
                                               slos) for name in lengths
                             if any(length_bucket(r.trace_prompt_tokens) == name for r in records)},
        "by_pool": {pool: {"requests": sum(r.pool == pool for r in records),
                           "ttft_ms": distribution_ms([r.ttft_s for r in records if r.pool == pool and r.ttft_s])}
                    for pool in sorted({r.pool for r in records if r.pool})},
        "held_usd": held_usd,
        "usd_per_1m_tokens": held_usd / served_tokens * 1e6 if served_tokens else None,
        "usd_per_good_request": held_usd / good if good else None,
        "accounted_usd": base["cost_usd"],
        "accounted_usd_per_good_request": base["cost_usd"] / good if good and base["cost_usd"] else None,
        "prefix_cache": prefix_cache,
        # The client's own lag: sends later than planned mean the client, not the server, was slow.
        "send_lag_ms": distribution_ms(late),
    }
