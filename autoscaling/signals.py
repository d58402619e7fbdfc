"""What the autoscaler knows about a pool, parsed once from its replicas' reports."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from core import wire


@dataclass(frozen=True)
class PoolSignals:
    """One pool at one moment. A figure no replica reported is None: the policies hold
    steady on what they cannot see rather than guess."""

    pool: str
    replicas: int  # the target: replicas serving, and those decided and still starting
    ttft_p99_s: float | None = None  # the worst replica's: the tail a user meets
    tpot_p99_s: float | None = None
    utilization: float | None = None  # mean engine busy fraction over the window
    batch_occupancy: float | None = None  # mean share of the engines' batch slots in use
    requests_per_s: float | None = None  # the pool's total
    waiting: float | None = None  # requests queued, all replicas
    usd_per_hour: float | None = None  # one replica's price
    ttft_p50_s: float | None = None  # the worst replica's median
    tpot_p50_s: float | None = None
    running: float | None = None  # requests in the engines, all replicas
    kv_cache_usage: float | None = None  # the fullest replica's KV cache, 0 to 1
    tokens_per_s: float | None = None  # output tokens, the pool's total
    serving: int | None = None  # replicas that serve now, whose latency the figures are
    # The pool's finished requests and their tokens per second by routed size, one figure per
    # bucket of core.wire.SIZE_BUCKET_EDGES (the last: above them all); None: not reported.
    size_requests_per_s: tuple[float, ...] | None = None
    size_tokens_per_s: tuple[float, ...] | None = None

    @classmethod
    def from_replica_stats(cls, pool: str, replicas: int, stats: list[Mapping[str, Any]]) -> PoolSignals:
        def values(key: str) -> list[float]:
            return [float(s[key]) for s in stats if s.get(key) is not None]

        def worst(key: str) -> float | None:
            found = values(key)
            return max(found) if found else None

        def total(key: str) -> float | None:
            found = values(key)
            return sum(found) if found else None

        def mean(key: str) -> float | None:
            found = values(key)
            return sum(found) / len(found) if found else None

        def by_size(keys: tuple[str, ...]) -> tuple[float, ...] | None:
            if not any(s.get(keys[0]) is not None for s in stats):
                return None
            return tuple(total(key) or 0.0 for key in keys)

        return cls(pool=pool, replicas=replicas, ttft_p99_s=worst("ttft_p99_s"), tpot_p99_s=worst("tpot_p99_s"),
                   utilization=mean("utilization"), batch_occupancy=mean("batch_occupancy"), requests_per_s=total("requests_per_s"),
                   waiting=total("waiting"), usd_per_hour=mean("usd_per_hour"), ttft_p50_s=worst("ttft_p50_s"),
                   tpot_p50_s=worst("tpot_p50_s"), running=total("running"), kv_cache_usage=worst("kv_cache_usage"),
                   tokens_per_s=total("tokens_per_s"), size_requests_per_s=by_size(wire.SIZE_REQUESTS_KEYS),
                   size_tokens_per_s=by_size(wire.SIZE_TOKENS_KEYS))
