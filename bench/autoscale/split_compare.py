"""The traffic split compared: a trace served by the self-tuning fleet (autoscaling and the split
on) and by static splits (a threshold and replicas per pool, all held); the best static split is
the one of fewest replica-seconds that meets the SLO target."""

from __future__ import annotations

import logging
import re
import time
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any

from autoscaling.bounds import pool_bounds
from bench.autoscale.fleet_simulator import FleetRequest, FleetResult, FleetSimulation, SplitRouter, routed, static_pool
from bench.autoscale.replica_model import ReplicaModel
from bench.autoscale.simulator import SimRequest, percentile
from bench.replay.trace import ReplayWindow, Trace, schedule
from core import wire
from core.config import ConfigError, TrilemmaConfig

SLO_TARGET = 0.99  # the share of requests that must meet their scenario's SLOs


@dataclass(frozen=True)
class Slo:
    ttft_s: float | None
    tpot_s: float | None

    def met(self, request: SimRequest) -> bool:
        return ((self.ttft_s is None or request.ttft_s <= self.ttft_s)
                and (self.tpot_s is None or request.tpot_s is None or request.tpot_s <= self.tpot_s))


@dataclass(frozen=True)
class SplitSetup:
    """What every arm shares: the config, the router, each pool's replica model and price, and
    the SLO of each scenario."""

    config: TrilemmaConfig
    router: SplitRouter
    models: dict[str, ReplicaModel]
    usd_per_hour: dict[str, float]
    slos: dict[str, Slo]

    @classmethod
    def of(cls, config: TrilemmaConfig, model: ReplicaModel, usd_per_hour: dict[str, float]) -> SplitSetup:
        """Refuses (ConfigError, with the reason) a config that does not tune a split; each pool's
        model is the calibrated one with the pool's own max_num_seqs."""
        if not (config.autoscaling.enabled and config.autoscaling.split.enabled):
            raise ConfigError("the config does not tune the traffic split: set autoscaling.enabled and "
                              "autoscaling.split.enabled")
        router = SplitRouter.from_config(config)
        unscaled = [pool for pool in (router.short, router.long) if pool not in config.autoscaling.pools]
        if unscaled:
            raise ConfigError(f"the split's pools must be autoscaled: add autoscaling.pools.{unscaled[0]}")
        models = {pool: replace(model, max_num_seqs=config.pools[pool].max_num_seqs)
                  for pool in (router.short, router.long)}
        slos = {name: Slo(s.slo_ttft_ms and s.slo_ttft_ms / 1000, s.slo_tpot_ms and s.slo_tpot_ms / 1000)
                for name, s in config.scenarios.items()}
        return cls(config, router, models, usd_per_hour, slos)

    @property
    def pools(self) -> tuple[str, str]:
        return self.router.short, self.router.long

    def thresholds(self) -> list[int]:
        """The static arms' thresholds: the split's candidates (the size buckets' edges within
        its bounds) and the configured one."""
        split = self.config.autoscaling.split
        high = split.max_threshold_tokens or self.config.pools[self.router.short].max_model_len
        edges = {edge for edge in wire.SIZE_BUCKET_EDGES if split.min_threshold_tokens <= edge <= high}
        return sorted(edges | {self.config.routing.short_context_threshold_tokens})

    def start_replicas(self) -> dict[str, int]:
        bounds = pool_bounds(self.config)
        return {pool: max(bounds[pool].min_replicas, min(bounds[pool].max_replicas, self.config.pools[pool].replicas))
                for pool in self.pools}


def trace_requests(trace: Trace, window: ReplayWindow, config: TrilemmaConfig) -> tuple[list[FleetRequest], int]:
    """The window's requests as the router gets them, and how many their scenario's
    max_tokens_cap cut; a request without a scenario is the config's default scenario's."""
    requests, capped = [], 0
    for scheduled in schedule(trace, window):
        traced = scheduled.request
        scenario = traced.scenario or config.routing.default_scenario
        if scenario not in config.scenarios:
            raise ConfigError(f"{trace.source}:{traced.line}: scenario {scenario!r} is not configured; "
                              f"configured: {sorted(config.scenarios)}")
        cap = config.scenarios[scenario].max_tokens_cap
        output = traced.output_tokens if cap is None else min(traced.output_tokens, cap)
        capped += output < traced.output_tokens
        requests.append(FleetRequest(scheduled.send_at_s, traced.prompt_tokens, output, scenario))
    return requests, capped


def pool_summary(served: list[SimRequest], slos: dict[str, Slo], peak_replicas: int) -> dict[str, Any]:
    """A pool's requests and latency; what it cost comes once every arm's span is known (`pay`)."""
    ttft = [r.ttft_s * 1000 for r in served]
    tpot = [r.tpot_s * 1000 for r in served if r.tpot_s is not None]
    met = sum(slos[r.trace.scenario].met(r) for r in served)
    return {"requests": len(served), "met": met, "slo_attainment": met / len(served) if served else 1.0,
            "peak_replicas": peak_replicas,
            "ttft_ms": {"p50": percentile(ttft, 50), "p99": percentile(ttft, 99)},
            "tpot_ms": {"p50": percentile(tpot, 50), "p99": percentile(tpot, 99)}}


def pay(summary: dict[str, Any], replica_seconds: float, usd_per_hour: float) -> dict[str, Any]:
    return {**summary, "replica_seconds": replica_seconds, "usd": replica_seconds * usd_per_hour / 3600}


def arm_summary(arm: str, pools: dict[str, dict[str, Any]], requests: int, rejected: int,
                **extra: Any) -> dict[str, Any]:
    """An arm's totals over its (paid) pools; a refused request is a miss, and counted apart."""
    met = sum(p["met"] for p in pools.values())
    return {"arm": arm, **extra, "requests": requests, "rejected": rejected, "met": met,
            "slo_attainment": met / requests,
            "replica_seconds": sum(p["replica_seconds"] for p in pools.values()),
            "usd": sum(p["usd"] for p in pools.values()),
            "peak_replicas": {name: p["peak_replicas"] for name, p in pools.items()}, "pools": pools}


def run_tuned(setup: SplitSetup, trace: list[FleetRequest], split: bool = True) -> FleetResult:
    """The fleet autoscaled from the config's replicas and threshold, the split tuning it (or off)."""
    config = setup.config if split else setup.config.with_overrides({"autoscaling.split.enabled": False},
                                                                    source="split off")
    sim = FleetSimulation(setup.router, setup.models, setup.usd_per_hour, replicas=setup.start_replicas(),
                          threshold=setup.config.routing.short_context_threshold_tokens, config=config)
    return sim.run(trace)


def tuned_summary(setup: SplitSetup, arm: str, result: FleetResult, requests: int) -> dict[str, Any]:
    """An autoscaled arm; a replica is paid from its launch to its stop or the fleet's last answer."""
    pools = {name: pay(pool_summary(result.served[name], setup.slos,
                                    max(s["replicas"][name] for s in result.timeline)),
                       result.replica_seconds(name), setup.usd_per_hour[name])
             for name in setup.pools}
    seen = [sample["threshold"] for sample in result.timeline]
    return arm_summary(arm, pools, requests, len(result.rejected),
                       threshold={"start": seen[0], "end": seen[-1], "range": [min(seen), max(seen)]},
                       ended_at=result.ended_at)


@dataclass(frozen=True)
class StaticRuns:
    """One threshold's static pool runs: each pool's summary (unpaid) by replicas, and when its
    last request finished."""

    threshold: int
    runs: dict[str, dict[int, dict[str, Any]]]
    rejected: int


def static_runs(setup: SplitSetup, trace: list[FleetRequest], extra: dict[int, dict[str, int]] | None = None,
                target: float = SLO_TARGET) -> list[StaticRuns]:
    """The static grid's pool runs: for each threshold, each pool's replicas raised from its
    minimum (1 at least) only until that pool alone meets `target`. With the threshold held the
    pools do not interact, so each pool count is simulated once and every pair is an arm.
    `extra`: replicas per pool to simulate too at a threshold (a pair the pruning would skip)."""
    bounds = pool_bounds(setup.config)
    grid = []
    for threshold in setup.thresholds():
        by_pool = routed(trace, setup.router, threshold)
        runs: dict[str, dict[int, dict[str, Any]]] = {}
        for pool in setup.pools:
            wanted = (extra or {}).get(threshold, {}).get(pool)
            runs[pool] = {}
            for n in range(max(1, bounds[pool].min_replicas), bounds[pool].max_replicas + 1):
                result = static_pool(pool, by_pool[pool], setup.models[pool], setup.usd_per_hour[pool], n)
                runs[pool][n] = {**pool_summary(result.served[pool], setup.slos, n), "ended_at": result.ended_at}
                if runs[pool][n]["slo_attainment"] >= target and (wanted is None or n >= wanted):
                    break
        grid.append(StaticRuns(threshold, runs, len(by_pool[None])))
    return grid


def static_arms(setup: SplitSetup, grid: list[StaticRuns], requests: int, last_arrival: float) -> list[dict[str, Any]]:
    """Every pair of each threshold's pool runs. Both pools are held from the start until the
    fleet's last answer (the later pool's, and never before the last arrival), as an
    autoscaled fleet's last replicas are."""
    short, long = setup.pools
    arms = []
    for runs in grid:
        for short_n, short_run in runs.runs[short].items():
            for long_n, long_run in runs.runs[long].items():
                held = max(short_run["ended_at"], long_run["ended_at"], last_arrival)
                pools = {pool: pay({k: v for k, v in run.items() if k != "ended_at"}, n * held,
                                   setup.usd_per_hour[pool])
                         for pool, n, run in ((short, short_n, short_run), (long, long_n, long_run))}
                arms.append(arm_summary(f"static {runs.threshold} {short_n}+{long_n}", pools, requests,
                                        runs.rejected, threshold=runs.threshold,
                                        replicas={short: short_n, long: long_n}))
    return arms


def best_static(arms: list[dict[str, Any]], target: float = SLO_TARGET) -> dict[str, Any] | None:
    """The static arm of fewest replica-seconds among those meeting `target` (ties: the higher
    attainment); None when none does."""
    meeting = [arm for arm in arms if arm["slo_attainment"] >= target]
    return min(meeting, key=lambda arm: (arm["replica_seconds"], -arm["slo_attainment"])) if meeting else None


def reason_kind(reason: str) -> str:
    """The split's reason folded into its kind, for counting periods by what the split did."""
    if "useful setting" in reason:
        ask = "threshold at its bound: replica move"
        if "move_replicas is off" in reason or "no replica can move" in reason:
            return "threshold at its bound, no replica to move"
    elif re.search(r"threshold \d+ -> \d+ moves", reason):
        ask = "threshold move"
    else:
        for marker, kind in (("both pools have room", "both pools under min_load"),
                             ("balanced within", "loads within balance_band"),
                             ("no request sizes", "no request sizes reported"),
                             ("no figures", "no figures yet"), ("no load yet", "no figures yet")):
            if marker in reason:
                return kind
        return "other"
    if "waiting: asked" in reason:
        return f"{ask} asked, waiting for after_periods"
    if "cooling down" in reason:
        return f"{ask} asked, cooling down"
    return f"{ask} made"


def folded_reasons(reasons: list[tuple[float, str]]) -> list[dict[str, Any]]:
    """The split's reason each period, runs of one kind folded into one entry with its last reason."""
    folded: list[dict[str, Any]] = []
    for at, reason in reasons:
        kind = reason_kind(reason)
        if folded and folded[-1]["kind"] == kind:
            folded[-1].update(until=at, periods=folded[-1]["periods"] + 1, last_reason=reason)
        else:
            folded.append({"from": at, "until": at, "kind": kind, "periods": 1, "last_reason": reason})
    return folded


def compare_split(setup: SplitSetup, trace: list[FleetRequest], target: float = SLO_TARGET) -> dict[str, Any]:
    """Every arm over the trace, each paid until its fleet's last answer."""
    if not trace:
        raise ConfigError("the window holds no request")
    # The policy logs each decision; an hour of two pools makes thousands.
    logging.getLogger("ray.serve").setLevel(logging.WARNING)
    clock = time.perf_counter()
    tuned_result = run_tuned(setup, trace)
    tuned_s, clock = time.perf_counter() - clock, time.perf_counter()
    split_off_result = run_tuned(setup, trace, split=False)
    split_off_s, clock = time.perf_counter() - clock, time.perf_counter()
    configured, start = setup.config.routing.short_context_threshold_tokens, setup.start_replicas()
    grid = static_runs(setup, trace, extra={configured: start}, target=target)
    grid_s = time.perf_counter() - clock
    tuned = tuned_summary(setup, "self-tuning split", tuned_result, len(trace))
    split_off = tuned_summary(setup, "autoscaled, split off", split_off_result, len(trace))
    statics = static_arms(setup, grid, len(trace), trace[-1].at)
    best = best_static(statics, target)
    same = next(arm for arm in statics if arm["threshold"] == configured and arm["replicas"] == start)
    kinds = Counter(reason_kind(reason) for _, reason in tuned_result.split_reasons)
    return {
        "kind": "split_simulation",
        "pools": {"short": setup.router.short, "long": setup.router.long},
        "max_model_len": setup.router.max_model_len,
        "slo": {name: {"ttft_ms": slo.ttft_s and slo.ttft_s * 1000, "tpot_ms": slo.tpot_s and slo.tpot_s * 1000}
                for name, slo in setup.slos.items() if slo.ttft_s or slo.tpot_s},
        "target": target,
        "models": {name: model.to_dict() for name, model in setup.models.items()},
        "usd_per_hour": setup.usd_per_hour,
        "split_config": setup.config.autoscaling.split.model_dump(mode="json"),
        "thresholds": setup.thresholds(),
        "tuned": tuned,
        "split_off": split_off,
        "static": statics,
        "static_at_start": same["arm"],
        "best_static": best and best["arm"],
        "savings": best and 1 - tuned["replica_seconds"] / best["replica_seconds"],
        "verdict": {"tuned_meets_target": tuned["slo_attainment"] >= target, "a_static_meets_target": best is not None,
                    "tuned_cheaper_than_best_static": best is not None
                    and tuned["replica_seconds"] < best["replica_seconds"]},
        "split_moves": tuned_result.split_moves,
        "split_periods_by_kind": dict(kinds.most_common()),
        "split_periods": folded_reasons(tuned_result.split_reasons),
        "decisions": [{k: d[k] for k in ("at", "pool", "from", "to", "policy", "reason", "split") if k in d}
                      for d in tuned_result.decisions],
        "timeline": tuned_result.timeline,
        "compute_s": {"tuned": tuned_s, "split_off": split_off_s, "static_grid": grid_s,
                      "static_pool_runs": sum(len(by_n) for runs in grid for by_n in runs.runs.values())},
    }
