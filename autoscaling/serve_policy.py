"""The autoscaler inside Ray Serve: a per-deployment policy for each pool that decides with
the whole fleet in view.

Ray Serve's controller instantiates `PoolScalingPolicy` once per pool deployment and calls
it every control-loop tick with that pool's `AutoscalingContext`. Every pool's policy runs
in the controller process, so they share their latest signals through a class-level view
(keyed by application): the cost policy needs all pools, and Ray's application-level
policies are not yet supported. Each pool decides once per `autoscaling.period_s`.

Its hysteresis state travels in Ray's `policy_state` and is also left on the control board
(Ray's internal KV store), which outlives the controller: a restarted controller resumes the
streaks and cooldowns instead of starting over. The board also carries what the policy sets
for others: its last decisions (`trilemma autoscale explain`), the cost profile (the routers
apply it) and the pool's engine concurrency (its replicas apply it).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from typing import Any, ClassVar

from autoscaling.autoscaler import Autoscaler, Step
from autoscaling.bounds import pool_bounds, shrink_order
from autoscaling.control_board import (
    ControlBoard,
    RayControlBoard,
    concurrency_key,
    cost_profile_key,
    decisions_key,
    split_key,
    state_key,
)
from autoscaling.policy import ScalingDecision
from autoscaling.signals import PoolSignals
from autoscaling.state import AutoscalerState
from autoscaling.traffic_split import SplitState, TrafficSplit
from core import wire
from core.config import TrilemmaConfig

logger = logging.getLogger("ray.serve")

DECISIONS_KEPT = 100  # changes and folded repeats: an hour of a busy pool at the default period
_STATE_KEY = "trilemma"


class PoolScalingPolicy:
    _fleets: ClassVar[dict[str, dict[str, PoolSignals]]] = {}
    # One traffic split per application, shared by its pools' policies (None where it is off),
    # with the config it was built from: a redeploy with another config builds it anew.
    _splits: ClassVar[dict[str, tuple[str, TrafficSplit | None]]] = {}

    def __init__(self, config: dict[str, Any], pool: str, usd_per_hour: dict[str, float],
                 board: ControlBoard | None = None, export_metrics: bool = True) -> None:
        self._config = TrilemmaConfig.from_dict(config, source="autoscaling policy")
        self._pool = pool
        self._usd_per_hour = usd_per_hour[pool]  # the catalog's, for a pool with no replica to say
        self._autoscaler = Autoscaler(self._config.autoscaling, pool_bounds(self._config),
                                      shrink_order(self._config))
        self._board = board or RayControlBoard()
        self._decided_at: float | None = None
        self._target: int | None = None
        self._recent: list[dict[str, Any]] | None = None  # read from the board on the first call
        self._published: dict[str, Any] = {}
        self._metrics = None
        self._export_metrics = export_metrics  # off where no Ray runs (the simulator)

    def __call__(self, ctx: Any) -> tuple[int, dict[str, Any]]:
        now = ctx.current_time or time.time()
        app = ctx.app_name or ""
        state = dict(ctx.policy_state or {})
        if self._decided_at is not None and now - self._decided_at < self._config.autoscaling.period_s:
            return self._target if self._target is not None else ctx.target_num_replicas, state
        signals = self._signals(ctx)
        fleet = self._fleets.setdefault(app, {})
        fleet[self._pool] = signals
        saved = state.get(_STATE_KEY)
        if saved is None:  # a fresh controller: resume from the board, if the pool ran before
            saved = self._read(state_key(app, self._pool))
        self._autoscaler.state = AutoscalerState.from_dict(saved)
        step = self._autoscaler.step({pool: s for pool, s in fleet.items()}, now, self._split(app))
        decision = step.decisions[self._pool]
        self._decided_at, self._target = now, decision.target
        new_state = self._autoscaler.state.to_dict()
        self._export(app, step, now, new_state)
        return decision.target, {**state, _STATE_KEY: new_state}

    def _signals(self, ctx: Any) -> PoolSignals:
        metrics = ctx.aggregated_metrics or {}
        replicas = {replica for values in metrics.values() for replica in values}
        stats = [{key: metrics[key][replica] for key in wire.REPLICA_STAT_KEYS if replica in metrics.get(key, {})}
                 for replica in replicas]
        # Decisions start from the target, not the running count: replicas still starting are
        # already decided (and paid for), and a restarted controller counts no running replica
        # until it has found them again, which must not read as a pool below its minimum.
        signals = PoolSignals.from_replica_stats(self._pool, ctx.target_num_replicas, stats)
        queued = ctx.total_queued_requests or 0.0  # requests waiting at the callers, for no replica
        return dataclasses.replace(signals, waiting=(signals.waiting or 0.0) + queued if queued else signals.waiting,
                                   usd_per_hour=signals.usd_per_hour or self._usd_per_hour,
                                   serving=ctx.current_num_replicas)

    def _split(self, app: str) -> TrafficSplit | None:
        """The application's traffic split, resumed from the board the first time (a restarted
        controller keeps the threshold its routers follow)."""
        built_from = self._config.model_dump_json()
        known = self._splits.get(app)
        if known is None or known[0] != built_from:
            if known is not None and known[1] is not None:
                state = known[1].state  # a redeploy: the threshold in force carries over, within the new bounds
            else:
                saved = self._read(split_key(app)) if self._config.autoscaling.split.enabled else None
                state = SplitState.from_dict((saved or {}).get("state"))
            self._splits[app] = (built_from, TrafficSplit.from_config(self._config, state))
        return self._splits[app][1]

    def _read(self, key: str) -> Any | None:
        try:
            return self._board.get(key)
        except Exception as error:  # a board out of reach costs memory, never scaling
            logger.warning("could not read %s from the control board: %r", key, error)
            return None

    def _export(self, app: str, step: Step, now: float, state: dict[str, Any]) -> None:
        decision = step.decisions[self._pool]
        record = {"at": now, **decision.to_dict(), "cost_profile": step.cost_profile}
        # The split's pools carry its moves in their decisions; why it holds is on the board.
        traffic_split = self._splits[app][1]
        split = step.split if traffic_split is not None and step.split is not None \
            and self._pool in (traffic_split.short, traffic_split.long) else None
        if split is not None and (split.moved or split.replicas):
            record["split"] = f"threshold {split.previous} -> {split.threshold}: {split.reason}" if split.moved \
                else f"threshold {split.threshold}: {split.reason}"
        concurrency = step.concurrency.get(self._pool)
        if concurrency is not None:
            record["max_in_engine"] = concurrency.target
            if concurrency.target != concurrency.current:
                record["concurrency"] = f"{concurrency.current} -> {concurrency.target}: {concurrency.reason}"
        logger.info("trilemma autoscale %s", json.dumps(record))
        if self._recent is None:
            self._recent = self._read(decisions_key(app, self._pool)) or []
        last = self._recent[-1] if self._recent else None
        same = ("current", "target", "policy", "reason", "concurrency", "cost_profile", "split")
        if last is not None and all(last.get(key) == record.get(key) for key in same):
            # The same decision again: one entry with a count, so that changes stay in view.
            last["until"], last["repeated"] = now, last.get("repeated", 1) + 1
        else:
            self._recent = (self._recent + [record])[-DECISIONS_KEPT:]
        published = {
            state_key(app, self._pool): state,
            decisions_key(app, self._pool): self._recent,
            cost_profile_key(app): {"in_force": step.cost_profile, "reason": step.cost_profile_reason},
        }
        if concurrency is not None:
            published[concurrency_key(app, self._pool)] = {"max_in_engine": concurrency.target,
                                                           "reason": concurrency.reason}
        if split is not None:
            # No threshold until the split has moved one: the routers keep the configured one.
            moved = traffic_split.state.threshold is not None
            published[split_key(app)] = {"threshold": split.threshold if moved else None, "reason": split.reason,
                                         "state": traffic_split.state.to_dict()}
        try:
            for key, value in published.items():
                # Decisions and state change every period; the rest only now and then.
                if key in (state_key(app, self._pool), decisions_key(app, self._pool), split_key(app)) \
                        or self._published.get(key) != value:
                    self._board.put(key, value)
                    self._published[key] = value
            if self._export_metrics:
                self._record_metric(decision)
        except Exception as error:  # explaining must never stop scaling
            logger.warning("could not export the autoscaling decision of %s: %r", self._pool, error)

    def _record_metric(self, decision: ScalingDecision) -> None:
        from ray.util.metrics import Counter, Gauge

        if self._metrics is None:
            self._metrics = (
                Counter(wire.SCALING_DECISIONS_TOTAL, "Autoscaling decisions, by pool, policy and direction.",
                        tag_keys=("pool", "policy", "direction")),
                Gauge(wire.TARGET_REPLICAS, "Replicas the autoscaler wants, by pool.", tag_keys=("pool",)),
            )
        decisions, target = self._metrics
        decisions.inc(1, {"pool": self._pool, "policy": decision.policy, "direction": decision.direction})
        target.set(decision.target, {"pool": self._pool})
