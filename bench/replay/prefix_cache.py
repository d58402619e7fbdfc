"""The prefix cache's prompt tokens looked up and found, per pool, as the engines count them:
the app's replicas report vLLM's counts on the pools path; plain vLLM exports them on /metrics."""

from __future__ import annotations

from typing import Any

import httpx

from bench.pool_activity import read_pool_activity
from core.prometheus_text import samples

PLAIN_POOL = "vllm"  # plain vLLM's one engine, named as a pool
_QUERIES, _HITS = "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"

Counts = dict[str, tuple[float, float]]  # pool -> (tokens looked up, tokens found)


def read_counts(base_url: str) -> Counts | None:
    """One reading: the app's, else plain vLLM's; None where the server has neither."""
    pools = read_pool_activity(base_url)
    if pools is not None:
        counts = {}
        for name, pool in pools.items():
            replicas = pool.get("replicas", [])
            queries = [r.get("prefix_cache_queries") for r in replicas]
            if replicas and all(value is not None for value in queries):
                counts[name] = (sum(queries), sum(r.get("prefix_cache_hits") or 0 for r in replicas))
        return counts
    try:
        text = httpx.get(f"{base_url}/metrics", timeout=30).text
    except httpx.HTTPError:
        return None
    queries, hits = samples(text, _QUERIES), samples(text, _HITS)
    return {PLAIN_POOL: (sum(queries.values()), sum(hits.values()))} if queries else None


def hit_rates(before: Counts | None, after: Counts | None) -> dict[str, dict[str, Any]] | None:
    """Per pool, between two readings: prompt tokens looked up, found, and the share found. A
    replica that restarted in between makes its pool's counts go back; such a pool is left out."""
    if before is None or after is None:
        return None
    rates = {}
    for pool, (queries, hits) in after.items():
        queries_before, hits_before = before.get(pool, (0.0, 0.0))
        looked_up, found = queries - queries_before, hits - hits_before
        if looked_up < 0 or found < 0:
            continue
        rates[pool] = {"queried_tokens": looked_up, "hit_tokens": found,
                       "hit_rate": found / looked_up if looked_up else None}
    return rates
