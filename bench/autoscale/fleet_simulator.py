"""The short and the long pool behind the router, under a request trace: each arrival routed by
the threshold in force, each pool scaled by its own `PoolScalingPolicy` (the object Ray Serve
runs) with the traffic split they share, or both held at fixed replicas and threshold.

Each pool is a `PoolSimulation` (its replicas batch continuously and report what a pool replica
reports, its request sizes included); this loop merges their events with the arrivals and the
controller's periods. As in the app, every pool's policy runs the whole fleet's step from the
latest signals of each pool (`PoolScalingPolicy._fleets`), the split decides once a period for
both, and the routers follow the threshold the policy leaves on the control board.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from autoscaling.control_board import MemoryControlBoard, split_key
from autoscaling.serve_policy import PoolScalingPolicy
from bench.autoscale.bursty_trace import TraceRequest
from bench.autoscale.replica_model import ReplicaModel
from bench.autoscale.simulator import APP, LATENCY_WINDOW_S, PoolSimulation, SimReplica, SimRequest, percentile
from core.config import TrilemmaConfig


@dataclass(frozen=True)
class FleetRequest(TraceRequest):
    """A traced request as the router gets it: max_tokens is its output (the replay sends it so,
    with ignore_eos), already capped by its scenario."""

    scenario: str = ""

    @property
    def size(self) -> int:
        """What the router routes by: prompt + max_tokens."""
        return self.prompt_tokens + self.output_tokens


@dataclass(frozen=True)
class SplitRouter:
    """The context-length rule as `router.routing.ContextLengthPolicy` applies it to the two
    pools: at or below the threshold short, above it long; a request no pool's max_model_len
    holds is refused, and one only one pool holds goes there."""

    short: str
    long: str
    max_model_len: dict[str, int]

    @classmethod
    def from_config(cls, config: TrilemmaConfig) -> SplitRouter:
        short, long = config.split_pools()
        return cls(short, long, {name: config.pools[name].max_model_len for name in (short, long)})

    def pool_for(self, size: int, threshold: int) -> str | None:
        fitting = [name for name in (self.short, self.long) if self.max_model_len[name] >= size]
        if not fitting:
            return None
        wanted = self.short if size <= threshold else self.long
        return wanted if wanted in fitting else min(fitting, key=lambda name: self.max_model_len[name])


def fleet_policies(config: TrilemmaConfig, usd_per_hour: dict[str, float],
                   pools: list[str]) -> tuple[dict[str, PoolScalingPolicy], MemoryControlBoard]:
    """Ray Serve's policy object for each pool, on one board in memory, with the simulated app's
    fleet and traffic split reset (they are class-level: an earlier run in this process left its own)."""
    PoolScalingPolicy._fleets.pop(APP, None)
    PoolScalingPolicy._splits.pop(APP, None)
    board, raw = MemoryControlBoard(), config.model_dump(mode="json")
    return {pool: PoolScalingPolicy(raw, pool, usd_per_hour, board=board, export_metrics=False)
            for pool in pools}, board


@dataclass
class FleetResult:
    served: dict[str, list[SimRequest]]  # by pool, in arrival order
    rejected: list[FleetRequest]  # no pool's max_model_len holds them
    replicas: dict[str, list[SimReplica]]
    ended_at: float
    timeline: list[dict[str, Any]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)  # replica changes, with the policy's record
    split_moves: list[dict[str, Any]] = field(default_factory=list)  # threshold changes, with the split's reason
    split_reasons: list[tuple[float, str]] = field(default_factory=list)  # the split's reason each period

    def replica_seconds(self, pool: str) -> float:
        """From each replica's launch to its stop, or to the fleet's last answer."""
        return sum((r.stopped_at if r.stopped_at is not None else self.ended_at) - r.launched_at
                   for r in self.replicas[pool])


class FleetSimulation:
    def __init__(self, router: SplitRouter, models: dict[str, ReplicaModel], usd_per_hour: dict[str, float], *,
                 replicas: dict[str, int], threshold: int, config: TrilemmaConfig | None = None,
                 sample_s: float | None = 10.0) -> None:
        """With `config` (autoscaling and its split on) the pools scale and the threshold moves;
        without, both hold. Only the pools in `replicas` are simulated: a request routed to
        another is a caller's mistake (ValueError)."""
        self.router, self.threshold, self.sample_s = router, threshold, sample_s
        self.pools = {name: PoolSimulation(models[name], usd_per_hour[name], replicas=n)
                      for name, n in replicas.items()}
        self.policies: dict[str, PoolScalingPolicy] = {}
        self.board: MemoryControlBoard | None = None
        self.period_s = math.inf
        if config is not None:
            self.policies, self.board = fleet_policies(config, usd_per_hour, list(self.pools))
            self.period_s = config.autoscaling.period_s
            for name, pool in self.pools.items():
                pool.policy, pool.period_s = self.policies[name], self.period_s

    def run(self, trace: list[FleetRequest]) -> FleetResult:
        arrivals = deque(trace)
        held: dict[str, deque[SimRequest]] = {name: deque() for name in self.pools}
        result = FleetResult({name: [] for name in self.pools}, [],
                             {name: pool.replicas for name, pool in self.pools.items()}, 0.0)
        remaining, now = len(trace), 0.0
        next_decision, next_sample = self.period_s, 0.0 if self.sample_s else math.inf
        while remaining:
            events = [next_decision, next_sample, *(t for pool in self.pools.values() for t in pool.events())]
            if arrivals:
                events.append(arrivals[0].at)
            now = min(events)
            for pool in self.pools.values():
                pool.now = now
                remaining -= len(pool.advance())
            while arrivals and arrivals[0].at <= now:
                remaining -= self._route(arrivals.popleft(), held, result)
            for name, pool in self.pools.items():
                pool.dispatch(held[name])
            if now >= next_sample:
                result.timeline.append(self._sample(now))
                next_sample += self.sample_s
            if now >= next_decision:
                self._decide(now, held, result)
                next_decision += self.period_s
        if self.sample_s:
            result.timeline.append(self._sample(now))  # before the replicas stop with the run
            _add_windows(result, trace)
        for pool in self.pools.values():
            pool.finish()
        result.ended_at = now
        return result

    def _route(self, request: FleetRequest, held: dict[str, deque[SimRequest]], result: FleetResult) -> int:
        """Routes one arrival; 1 when it is refused (no longer to wait for), else 0."""
        pool = self.router.pool_for(request.size, self.threshold)
        if pool is None:
            result.rejected.append(request)
            return 1
        if pool not in self.pools:
            raise ValueError(f"a request of {request.size} tokens routes to pool {pool!r}, which is not simulated")
        simulated = SimRequest(request)
        held[pool].append(simulated)
        result.served[pool].append(simulated)
        return 0

    def _decide(self, now: float, held: dict[str, deque[SimRequest]], result: FleetResult) -> None:
        """Each pool's policy, in turn, as Serve's controller calls them; then the threshold the
        routers read from the board."""
        for name, pool in self.pools.items():
            before = len(result.decisions)
            pool.decide(len(held[name]), result.decisions)
            for decision in result.decisions[before:]:
                decision["pool"] = name
        published = self.board.get(split_key(APP)) if self.board is not None else None
        if not published:
            return
        result.split_reasons.append((now, published.get("reason", "")))
        threshold = published.get("threshold")
        if isinstance(threshold, int) and threshold != self.threshold:
            result.split_moves.append({"at": now, "from": self.threshold, "to": threshold,
                                       "reason": published.get("reason", "")})
            self.threshold = threshold

    def _sample(self, now: float) -> dict[str, Any]:
        return {"t": now, "threshold": self.threshold,
                "replicas": {name: sum(r.stopped_at is None for r in pool.replicas)
                             for name, pool in self.pools.items()},
                "serving": {name: len(pool._serving()) for name, pool in self.pools.items()},
                "usd_per_hour": sum(pool.usd_per_hour * sum(r.stopped_at is None for r in pool.replicas)
                                    for pool in self.pools.values())}


def _add_windows(result: FleetResult, trace: list[FleetRequest], rate_window_s: float = 60.0) -> None:
    """Each sample's offered rate (arrivals over the last minute) and TTFT p99 over the last
    LATENCY_WINDOW_S (of the first tokens given then), fleet-wide and per pool; after the run,
    from the requests' own stamps."""
    arrived = [r.at for r in trace]
    firsts = {name: sorted((r.first_at, r.ttft_s) for r in served if r.first_at is not None)
              for name, served in result.served.items()}
    every = sorted(pair for pairs in firsts.values() for pair in pairs)
    for sample in result.timeline:
        t = sample["t"]
        span = min(rate_window_s, t) or rate_window_s
        sample["offered_rps"] = (bisect.bisect_right(arrived, t) - bisect.bisect_right(arrived, t - span)) / span
        sample["ttft_p99_s"] = _window_p99(every, t)
        sample["pool_ttft_p99_s"] = {name: _window_p99(pairs, t) for name, pairs in firsts.items()}


def _window_p99(pairs: list[tuple[float, float]], t: float) -> float | None:
    low, high = bisect.bisect_right(pairs, (t - LATENCY_WINDOW_S, math.inf)), bisect.bisect_right(pairs, (t, math.inf))
    return percentile([ttft for _, ttft in pairs[low:high]], 99)


def routed(trace: list[FleetRequest], router: SplitRouter, threshold: int) -> dict[str | None, list[FleetRequest]]:
    """The trace split by pool at a fixed threshold (None: refused); with the threshold held,
    the pools do not interact, so each can be simulated alone."""
    by_pool: dict[str | None, list[FleetRequest]] = {router.short: [], router.long: [], None: []}
    for request in trace:
        by_pool[router.pool_for(request.size, threshold)].append(request)
    return by_pool


def static_pool(pool: str, requests: list[FleetRequest], model: ReplicaModel, usd_per_hour: float,
                replicas: int) -> FleetResult:
    """One pool held at `replicas`, serving the requests routed to it (`routed`)."""
    router = SplitRouter(pool, pool, {pool: math.inf})
    sim = FleetSimulation(router, {pool: model}, {pool: usd_per_hour}, replicas={pool: replicas},
                          threshold=0, sample_s=None)
    return sim.run(requests)

