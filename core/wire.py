"""The app's wire contract, named once: HTTP headers, its own paths, metric names, and the stats
a pool replica reports to the autoscaler. Clients (the batch job, the benchmark, the CLI) and
the app read the same names from here."""

from __future__ import annotations

from typing import TypedDict

# Request headers a client may send.
SCENARIO_HEADER = "x-scenario"                   # picks a scenario on /v1/*
POOL_HEADER = "x-trilemma-pool"                  # pins a pool (debugging); in answers: the pool that served
BATCH_DOCUMENT_HEADER = "x-trilemma-batch-document"  # the summarize job's document, for logs and tracing
TIMING_HEADER = "x-trilemma-timing"              # "1": a stream's usage event carries its hop times

# Response headers: where a request went and why, and what it cost.
SCENARIO_ANSWER_HEADER = "x-trilemma-scenario"
ROUTE_REASON_HEADER = "x-trilemma-route-reason"
PROMPT_TOKENS_HEADER = "x-trilemma-prompt-tokens"  # also router -> replica: the count, or its estimate
ADJUSTMENTS_HEADER = "x-trilemma-adjustments"
COST_PROFILE_HEADER = "x-trilemma-cost-profile"
COST_HEADER = "x-trilemma-cost-usd"              # whole answers; a stream's cost is in its usage
TTFT_HEADER = "x-trilemma-ttft-ms"               # streams: headers leave with the first token

# Router -> pool replica: the scenario's priority class, which the replica's queue orders by;
# answers carry it too.
PRIORITY_HEADER = "x-trilemma-priority"

# The app's own path beside the OpenAI API: every replica's busy clock and each pool's price.
POOLS_PATH = "/trilemma/pools"

# Metric names as the app records them; Ray's exporter serves each as `ray_<name>`.
TOKENS_TOTAL = "trilemma_tokens_total"
REQUEST_COST_USD_TOTAL = "trilemma_request_cost_usd_total"
REQUESTS_TOTAL = "trilemma_requests_total"
REQUEST_COST_USD = "trilemma_request_cost_usd"
TTFT_SECONDS = "trilemma_ttft_seconds"
TPOT_SECONDS = "trilemma_tpot_seconds"
PROMPT_TOKENS_SAVED_TOTAL = "trilemma_prompt_tokens_saved_total"
ROUTE_MOVES_TOTAL = "trilemma_route_moves_total"
ENGINE_BUSY_SECONDS_TOTAL = "trilemma_engine_busy_seconds_total"
ENGINE_STAGE_SECONDS_TOTAL = "trilemma_engine_stage_seconds_total"
ENGINE_STAGE_REQUESTS_TOTAL = "trilemma_engine_stage_requests_total"
REPLICA_SECONDS_TOTAL = "trilemma_replica_seconds_total"
POOL_BUSY_USD_TOTAL = "trilemma_pool_busy_usd_total"
POOL_IDLE_USD_TOTAL = "trilemma_pool_idle_usd_total"
REQUESTS_SHED_TOTAL = "trilemma_requests_shed_total"
REQUESTS_IN_ENGINE = "trilemma_requests_in_engine"
REQUESTS_WAITING = "trilemma_requests_waiting"
ENGINE_ASLEEP = "trilemma_engine_asleep"
ENGINE_WAKE_SECONDS = "trilemma_engine_wake_seconds"
SCALING_DECISIONS_TOTAL = "trilemma_scaling_decisions_total"
TARGET_REPLICAS = "trilemma_target_replicas"
TENANT_DAILY_BUDGET_USD = "trilemma_tenant_daily_budget_usd"
# The batch job's progress, per run (its output).
BATCH_DOCUMENTS = "trilemma_batch_documents"
BATCH_TOKENS_TOTAL = "trilemma_batch_tokens_total"
BATCH_COST_USD_TOTAL = "trilemma_batch_cost_usd_total"

# The latency histograms' bucket boundaries (seconds), the same for every app and config: Ray's
# metrics agent registers a histogram once per node with the first boundaries it is sent and
# drops every later point whose boundaries differ, so boundaries that followed a config (its
# SLOs) would silently empty a histogram after a redeploy. Dense where SLOs usually sit; the burn
# rules count a request above its SLO from the largest boundary at or below it (promql.py).
TTFT_BUCKETS_S = (0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0,
                  7.5, 10.0, 15.0, 20.0, 30.0, 60.0)
TPOT_BUCKETS_S = (0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.06, 0.075, 0.1, 0.125, 0.15, 0.2, 0.25,
                  0.3, 0.4, 0.5, 0.75, 1.0)


def exported(metric: str) -> str:
    """The name Prometheus scrapes for one of the app's metrics."""
    return f"ray_{metric}"


class ReplicaStats(TypedDict, total=False):
    """What a pool replica returns from `record_autoscaling_stats()`; a figure it has not
    measured yet is absent."""

    ttft_p50_s: float
    ttft_p99_s: float
    tpot_p50_s: float
    tpot_p99_s: float
    requests_per_s: float
    tokens_per_s: float
    waiting: float
    running: float
    kv_cache_usage: float
    utilization: float
    batch_occupancy: float
    usd_per_hour: float
    max_in_engine: float


# The sizes (prompt + max_tokens, as the router routes them) a replica counts its finished
# requests by, so that the autoscaler sees the traffic's length distribution and the traffic
# split can tell how much work a move of the routing threshold would carry: steps of the square
# root of 2, so that a threshold moves by about 41% at the least, and every power of 2 is an edge.
SIZE_BUCKET_EDGES = tuple(round(128 * 2 ** (k / 2)) for k in range(19))  # 128 .. 65536


def size_bucket_keys(kind: str) -> tuple[str, ...]:
    """A replica's stat keys of one kind ("rps": requests/s, "tps": prompt and output tokens/s) by
    size bucket: one per edge (at or below it, above the one before), then one above the last."""
    return (*(f"size_{kind}_le_{edge}" for edge in SIZE_BUCKET_EDGES), f"size_{kind}_gt_{SIZE_BUCKET_EDGES[-1]}")


SIZE_REQUESTS_KEYS, SIZE_TOKENS_KEYS = size_bucket_keys("rps"), size_bucket_keys("tps")
REPLICA_STAT_KEYS = (*ReplicaStats.__annotations__, *SIZE_REQUESTS_KEYS, *SIZE_TOKENS_KEYS)


def deployment_name(pool_name: str) -> str:
    """The Serve deployment of a pool: the router finds its replicas by it, the app names it."""
    return f"pool-{pool_name}"
