"""The wire contract's names are what clients already use: changing one is a breaking change,
so each is pinned here to its literal."""

from __future__ import annotations

from core import wire


def test_headers_and_paths_are_the_published_ones():
    assert (wire.SCENARIO_HEADER, wire.POOL_HEADER, wire.BATCH_DOCUMENT_HEADER, wire.TIMING_HEADER) == (
        "x-scenario", "x-trilemma-pool", "x-trilemma-batch-document", "x-trilemma-timing")
    assert (wire.SCENARIO_ANSWER_HEADER, wire.ROUTE_REASON_HEADER, wire.PROMPT_TOKENS_HEADER,
            wire.ADJUSTMENTS_HEADER, wire.COST_PROFILE_HEADER, wire.COST_HEADER, wire.TTFT_HEADER,
            wire.PRIORITY_HEADER) == (
        "x-trilemma-scenario", "x-trilemma-route-reason", "x-trilemma-prompt-tokens", "x-trilemma-adjustments",
        "x-trilemma-cost-profile", "x-trilemma-cost-usd", "x-trilemma-ttft-ms", "x-trilemma-priority")
    assert wire.POOLS_PATH == "/trilemma/pools"


def test_metric_names_are_the_exported_ones():
    names = {value for key, value in vars(wire).items() if key.isupper() and isinstance(value, str)
             and value.startswith("trilemma_")}
    assert names == {
        "trilemma_tokens_total", "trilemma_request_cost_usd_total", "trilemma_requests_total",
        "trilemma_request_cost_usd", "trilemma_ttft_seconds", "trilemma_tpot_seconds",
        "trilemma_prompt_tokens_saved_total", "trilemma_route_moves_total", "trilemma_engine_busy_seconds_total",
        "trilemma_engine_stage_seconds_total", "trilemma_engine_stage_requests_total",
        "trilemma_replica_seconds_total", "trilemma_pool_busy_usd_total", "trilemma_pool_idle_usd_total",
        "trilemma_requests_shed_total", "trilemma_requests_in_engine", "trilemma_requests_waiting",
        "trilemma_engine_asleep", "trilemma_engine_wake_seconds",
        "trilemma_scaling_decisions_total", "trilemma_target_replicas", "trilemma_tenant_daily_budget_usd",
        "trilemma_batch_documents", "trilemma_batch_tokens_total", "trilemma_batch_cost_usd_total",
    }
    assert wire.exported(wire.TTFT_SECONDS) == "ray_trilemma_ttft_seconds"


def test_the_stats_keys_are_the_ones_the_autoscaler_reads():
    edges = (128, 181, 256, 362, 512, 724, 1024, 1448, 2048, 2896, 4096, 5793, 8192, 11585, 16384, 23170, 32768,
             46341, 65536)
    assert wire.SIZE_BUCKET_EDGES == edges
    by_size = [f"size_{kind}_{bucket}" for kind in ("rps", "tps")
               for bucket in (*(f"le_{edge}" for edge in edges), "gt_65536")]
    assert wire.REPLICA_STAT_KEYS == (
        "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "requests_per_s", "tokens_per_s", "waiting",
        "running", "kv_cache_usage", "utilization", "batch_occupancy", "usd_per_hour", "max_in_engine", *by_size)
