"""The traffic split: the routing threshold between a short and a long pool, moved towards the
pool with room, and at the threshold's bounds a replica moved instead.

The pools report the sizes (prompt + max_tokens, as routed) of the requests they finished, by
bucket (core.wire.SIZE_BUCKET_EDGES), with their prompt and output tokens. Together that is the
traffic's length distribution, so the split can tell how much work a new threshold would carry
from one pool to the other. Each pool's load is the largest of its batch occupancy (or busy
fraction), its KV-cache use, its requests over its batch slots (above 1 when they queue) and its
p99s over their SLOs. Work is taken to load a pool in proportion, at the rate it loads it now,
so a move predicts both pools' loads; the split picks the threshold that brings them closest.

A move waits for `after_periods` in a row asking for it and `cooldown_s` since the last, as a
scaling step does. The split decides once per period for the whole fleet, however many pools'
policies ask it in that period (every pool's policy runs the whole fleet's step).
"""

from __future__ import annotations

import bisect
from dataclasses import asdict, dataclass, field
from typing import Any

from autoscaling.bounds import PoolBounds
from autoscaling.policy import Fleet, ScalingDecision, ScalingPolicy
from autoscaling.signals import PoolSignals
from autoscaling.state import AutoscalerState
from core import wire
from core.autoscaling_config import TrafficSplitConfig
from core.config import TrilemmaConfig


@dataclass(frozen=True)
class PoolLoad:
    """How full a pool is (0 idle, 1 full, above 1 queued or over its SLO), and what said so."""

    pool: str
    load: float
    measure: str

    @classmethod
    def of(cls, signals: PoolSignals, bounds: PoolBounds, max_num_seqs: int, busy_measure: str) -> PoolLoad | None:
        """None when the pool reported nothing to judge by."""
        candidates: list[tuple[float, str]] = []
        busy = signals.batch_occupancy if busy_measure == "batch_occupancy" else signals.utilization
        if busy is not None:
            candidates.append((busy, f"{busy_measure.replace('_', ' ')} {busy:.2f}"))
        if signals.kv_cache_usage is not None:
            candidates.append((signals.kv_cache_usage, f"KV cache {signals.kv_cache_usage:.2f}"))
        if signals.running is not None or signals.waiting is not None:
            held = (signals.running or 0.0) + (signals.waiting or 0.0)
            slots = max(1, signals.serving if signals.serving is not None else signals.replicas) * max_num_seqs
            candidates.append((held / slots, f"{held:.0f} requests for {slots} batch slots"))
        for name, p99, slo in (("TTFT", signals.ttft_p99_s, bounds.slo_ttft_s),
                               ("TPOT", signals.tpot_p99_s, bounds.slo_tpot_s)):
            if p99 is not None and slo:
                candidates.append((p99 / slo, f"{name} p99 {p99 * 1000:.0f} ms of {slo * 1000:.0f} ms"))
        if not candidates:
            return None
        load, measure = max(candidates)
        return cls(signals.pool, load, measure)


@dataclass
class SplitState:
    """The split's memory between periods, as plain data (it survives a controller restart)."""

    threshold: int | None = None  # in force; None: the config's routing threshold
    streak: str = "hold"  # "lower", "raise" or "replica": what the last periods asked for
    streak_periods: int = 0
    last_move_at: float | None = None
    decided_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> SplitState:
        return cls(**{key: value for key, value in (data or {}).items() if key in cls.__dataclass_fields__})


@dataclass(frozen=True)
class SplitDecision:
    """The threshold in force after a period, the replica targets the split asks for (none
    unless the threshold is at its bound), and why."""

    threshold: int
    previous: int
    reason: str
    replicas: dict[str, int] = field(default_factory=dict)

    @property
    def moved(self) -> bool:
        return self.threshold != self.previous

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def tokens_at_or_below(tokens_per_s: tuple[float, ...], threshold: int) -> float:
    """The work of requests at or below `threshold` (what a short pool gets): the buckets wholly
    below it, and of the bucket it falls in the share its range covers (sizes taken as spread
    evenly within a bucket). Above the last edge nothing is split: that bucket has no top."""
    edges = wire.SIZE_BUCKET_EDGES
    whole = bisect.bisect_right(edges, threshold)
    covered = sum(tokens_per_s[:whole])
    if whole < len(edges) and threshold > 0:
        low = edges[whole - 1] if whole > 0 else 0
        covered += tokens_per_s[whole] * (threshold - low) / (edges[whole] - low)
    return covered


class TrafficSplit:
    def __init__(self, config: TrafficSplitConfig, short: str, long: str, *, routing_threshold: int,
                 ceiling: int, max_num_seqs: dict[str, int], busy_measure: str, period_s: float,
                 state: SplitState | None = None) -> None:
        self.config, self.short, self.long = config, short, long
        self.routing_threshold = routing_threshold
        self.low = config.min_threshold_tokens
        self.high = config.max_threshold_tokens or ceiling
        self.max_num_seqs, self.busy_measure, self.period_s = max_num_seqs, busy_measure, period_s
        self.state = state or SplitState()
        if self.state.threshold is not None:
            # Resumed from before a config change: back within the bounds this config sets.
            self.state.threshold = min(max(self.state.threshold, self.low), self.high)
        self.last: SplitDecision | None = None

    @classmethod
    def from_config(cls, config: TrilemmaConfig, state: SplitState | None = None) -> TrafficSplit | None:
        """The config's split, or None where autoscaling or the split is off."""
        if not (config.autoscaling.enabled and config.autoscaling.split.enabled):
            return None
        short, long = config.split_pools()
        return cls(config.autoscaling.split, short, long,
                   routing_threshold=config.routing.short_context_threshold_tokens,
                   ceiling=config.pools[short].max_model_len,
                   max_num_seqs={name: pool.max_num_seqs for name, pool in config.pools.items()},
                   busy_measure=config.autoscaling.utilization_measure, period_s=config.autoscaling.period_s,
                   state=state)

    @property
    def threshold(self) -> int:
        return self.state.threshold if self.state.threshold is not None else self.routing_threshold

    def decide(self, signals: dict[str, PoolSignals], bounds: dict[str, PoolBounds], plan: dict[str, int],
               now: float) -> SplitDecision:
        """This period's decision; a second call within the period returns the first's."""
        if self.last is not None and self.state.decided_at is not None and now - self.state.decided_at < self.period_s:
            return self.last
        self.state.decided_at = now
        self.last = self._decide(signals, bounds, plan, now)
        return self.last

    def _decide(self, signals: dict[str, PoolSignals], bounds: dict[str, PoolBounds], plan: dict[str, int],
                now: float) -> SplitDecision:
        current = self.threshold
        short, long = signals.get(self.short), signals.get(self.long)
        if short is None or long is None:
            return self._hold(f"no figures from pool {self.short if short is None else self.long}")
        loads = [PoolLoad.of(s, bounds[s.pool], self.max_num_seqs[s.pool], self.busy_measure) for s in (short, long)]
        if loads[0] is None or loads[1] is None:
            return self._hold("a pool has reported no load yet")
        short_load, long_load = loads
        seen = f"{self.short} {short_load.load:.2f} ({short_load.measure}), {self.long} {long_load.load:.2f} " \
               f"({long_load.measure})"
        if max(short_load.load, long_load.load) < self.config.min_load:
            return self._hold(f"both pools have room: {seen}")
        if abs(short_load.load - long_load.load) <= self.config.balance_band:
            return self._hold(f"balanced within {self.config.balance_band}: {seen}")
        if short.size_tokens_per_s is None or long.size_tokens_per_s is None:
            return self._hold(f"{seen}; the pools report no request sizes to predict a move by")
        work = tuple(a + b for a, b in zip(short.size_tokens_per_s, long.size_tokens_per_s))
        requests = tuple(a + b for a, b in zip(short.size_requests_per_s or (), long.size_requests_per_s or ()))
        if sum(work) <= 0:
            return self._hold(f"{seen}; no request finished in the window to predict a move by")
        direction = "lower" if short_load.load > long_load.load else "raise"
        replicas = {s.pool: max(1, s.serving if s.serving is not None else s.replicas) for s in (short, long)}
        best = self._best_threshold(work, short_load.load, long_load.load, current, direction, replicas)
        if best is None:
            return self._replica_move(direction, short_load, long_load, plan, bounds, now, seen)
        threshold, predicted = best
        if abs(predicted[0] - predicted[1]) >= abs(short_load.load - long_load.load):
            # Even the best move that way would leave the loads further apart: it would flap back.
            return self._hold(f"{seen}; no threshold {direction} than {current} brings the loads closer "
                              f"(best: {threshold}, predicted {predicted[0]:.2f} / {predicted[1]:.2f})")
        moved_tokens = abs(tokens_at_or_below(work, threshold) - tokens_at_or_below(work, current))
        moved_requests = abs(tokens_at_or_below(requests, threshold) - tokens_at_or_below(requests, current)) \
            if requests else 0.0
        target = self.long if direction == "lower" else self.short
        why = (f"{seen}: threshold {current} -> {threshold} moves {moved_requests:.2f} req/s "
               f"({moved_tokens:.0f} tokens/s) to {target}; predicted {predicted[0]:.2f} / {predicted[1]:.2f}")
        if not self._ready(direction, now):
            return self._hold(self._waiting(why, now), keep_streak=True)
        self.state.threshold, self.state.last_move_at = threshold, now
        self.state.streak, self.state.streak_periods = "hold", 0
        return SplitDecision(threshold, current, why)

    def _best_threshold(self, work: tuple[float, ...], short_load: float, long_load: float, current: int,
                        direction: str, replicas: dict[str, int]) -> tuple[int, tuple[float, float]] | None:
        """The threshold in `direction` (within the bounds and max_step) that brings the predicted
        loads closest, with them; None when no threshold that way moves any work."""
        short_work, total = tokens_at_or_below(work, current), sum(work)
        long_work = total - short_work
        if total <= 0:
            return None
        # Load per token/s of work; a pool with no work now loads like the other, by its batch slots.
        slots = {pool: self.max_num_seqs[pool] * replicas[pool] for pool in (self.short, self.long)}
        short_rate = short_load / short_work if short_work > 0 else None
        long_rate = long_load / long_work if long_work > 0 else None
        if short_rate is None:
            short_rate = long_rate * slots[self.long] / slots[self.short]
        if long_rate is None:
            long_rate = short_rate * slots[self.short] / slots[self.long]
        step = self.config.max_step
        options = {edge for edge in wire.SIZE_BUCKET_EDGES if current / step <= edge <= current * step}
        options |= {max(self.low, round(current / step)), min(self.high, round(current * step))}
        options = {t for t in options if self.low <= t <= self.high and (t < current if direction == "lower" else t > current)}
        best = None
        for threshold in sorted(options):
            moved = tokens_at_or_below(work, threshold)
            if moved == short_work:
                continue  # no request of those sizes: the move would change nothing
            predicted = (short_rate * moved, long_rate * (total - moved))
            gap = abs(predicted[0] - predicted[1])
            if best is None or gap < best[0]:
                best = (gap, threshold, predicted)
        return None if best is None else (best[1], best[2])

    def _replica_move(self, direction: str, short_load: PoolLoad, long_load: PoolLoad, plan: dict[str, int],
                      bounds: dict[str, PoolBounds], now: float, seen: str) -> SplitDecision:
        """The threshold cannot carry work that way: a replica goes from the idler pool to the busier."""
        busy, idle = (short_load, long_load) if direction == "lower" else (long_load, short_load)
        bound = "lowest" if direction == "lower" else "highest"
        why = f"{seen}: the threshold {self.threshold} is at its {bound} useful setting"
        if not self.config.move_replicas:
            return self._hold(f"{why}; move_replicas is off")
        if busy.load < self.config.replica_move_above:
            # A replica is a GPU share: moved only for a pool that is pressed, not merely the busier.
            return self._hold(f"{why}; {busy.pool}'s load is under replica_move_above "
                              f"({self.config.replica_move_above})")
        targets: dict[str, int] = {}
        if plan[busy.pool] < bounds[busy.pool].max_replicas:
            targets[busy.pool] = plan[busy.pool] + 1
        idle_replicas = plan[idle.pool]
        if idle_replicas > bounds[idle.pool].min_replicas:
            # Taken only where the idle pool would stay clear of the busy one with a replica less.
            after = idle.load * idle_replicas / (idle_replicas - 1) if idle_replicas > 1 else float("inf")
            if after < busy.load - self.config.balance_band:
                targets[idle.pool] = idle_replicas - 1
        if not targets:
            return self._hold(f"{why}; no replica can move ({busy.pool} at its max_replicas, {idle.pool} "
                              "at its min_replicas or needing its replicas)")
        moves = ", ".join(f"{pool} {plan[pool]} -> {n}" for pool, n in targets.items())
        why = f"{why}; replicas {moves}"
        if not self._ready("replica", now):
            return self._hold(self._waiting(why, now), keep_streak=True)
        self.state.last_move_at = now
        self.state.streak, self.state.streak_periods = "hold", 0
        return SplitDecision(self.threshold, self.threshold, why, targets)

    def _ready(self, streak: str, now: float) -> bool:
        """Counts this period's ask; True once asked long enough and past the cooldown."""
        state = self.state
        state.streak_periods = state.streak_periods + 1 if state.streak == streak else 1
        state.streak = streak
        cooled = state.last_move_at is None or now - state.last_move_at >= self.config.cooldown_s
        return state.streak_periods >= self.config.after_periods and cooled

    def _waiting(self, why: str, now: float) -> str:
        state = self.state
        if state.streak_periods < self.config.after_periods:
            return f"{why}; waiting: asked {state.streak_periods} of {self.config.after_periods} periods"
        return f"{why}; cooling down: {now - state.last_move_at:.0f} of {self.config.cooldown_s:.0f} s since the last move"

    def _hold(self, reason: str, keep_streak: bool = False) -> SplitDecision:
        """No move this period; only a move that waits for its streak or cooldown keeps its streak."""
        if not keep_streak:
            self.state.streak, self.state.streak_periods = "hold", 0
        return SplitDecision(self.threshold, self.threshold, reason)


class SplitReplicaPolicy(ScalingPolicy, name="split"):
    """The replicas the traffic split asks for when its threshold can carry no more work; at most
    one more for the busy pool, one fewer for the idle one, on top of the plan so far."""

    def decide(self, fleet: Fleet, plan: dict[str, int], state: AutoscalerState) -> list[ScalingDecision]:
        split = fleet.split
        if split is None or not split.replicas:
            return []
        decisions = []
        for pool, target in split.replicas.items():
            current = fleet.signals[pool].replicas
            grown = max(plan[pool], target) if target > current else min(plan[pool], target)
            if grown != plan[pool]:
                decisions.append(ScalingDecision(pool, current, grown, self.name, split.reason))
        return decisions
