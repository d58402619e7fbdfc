"""The autoscaler inside Ray Serve: a per-deployment policy for each pool that decides with
the whole fleet in view.

Ray Serve's controller instantiates `PoolScalingPolicy` once per pool deployment and calls
it every control-loop tick with that pool's `AutoscalingContext`. Every pool's policy runs
in the controller process, so they share their latest signals through a class-level view
(keyed by application): the cost policy needs all pools, and Ray's application-level
policies are not yet supported. Each pool decides once per `autoscaling.period_s`; its
hysteresis state travels in Ray's `policy_state`, and its last decisions are kept in Ray's
internal KV store for `trilemma autoscale explain`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from typing import Any, ClassVar

from autoscaling.autoscaler import Autoscaler
from autoscaling.bounds import pool_bounds, shrink_order
from autoscaling.decision import ScalingDecision
from autoscaling.signals import STAT_KEYS, PoolSignals
from autoscaling.state import AutoscalerState
from serve_app.config import TrilemmaConfig

logger = logging.getLogger("ray.serve")

KV_NAMESPACE = "trilemma"
DECISIONS_KEPT = 20
_STATE_KEY = "trilemma"


def decisions_key(app: str, pool: str) -> bytes:
    return f"autoscale/{app}/{pool}".encode()


class PoolScalingPolicy:
    _fleets: ClassVar[dict[str, dict[str, PoolSignals]]] = {}

    def __init__(self, config: dict[str, Any], pool: str, usd_per_hour: dict[str, float]) -> None:
        self._config = TrilemmaConfig.from_dict(config, source="autoscaling policy")
        self._pool = pool
        self._usd_per_hour = usd_per_hour[pool]  # the catalog's, for a pool with no replica to say
        self._autoscaler = Autoscaler(self._config.autoscaling, pool_bounds(self._config),
                                      shrink_order(self._config))
        self._decided_at: float | None = None
        self._target: int | None = None
        self._recent: list[dict[str, Any]] = []
        self._metrics = None

    def __call__(self, ctx: Any) -> tuple[int, dict[str, Any]]:
        now = ctx.current_time or time.time()
        state = dict(ctx.policy_state or {})
        if self._decided_at is not None and now - self._decided_at < self._config.autoscaling.period_s:
            return self._target if self._target is not None else ctx.target_num_replicas, state
        signals = self._signals(ctx)
        fleet = self._fleets.setdefault(ctx.app_name or "", {})
        fleet[self._pool] = signals
        self._autoscaler.state = AutoscalerState.from_dict(state.get(_STATE_KEY))
        step = self._autoscaler.step({pool: s for pool, s in fleet.items()}, now)
        decision = step.decisions[self._pool]
        self._decided_at, self._target = now, decision.target
        self._export(ctx.app_name or "", decision, step.cost_profile, now)
        return decision.target, {**state, _STATE_KEY: self._autoscaler.state.to_dict()}

    def _signals(self, ctx: Any) -> PoolSignals:
        metrics = ctx.aggregated_metrics or {}
        replicas = {replica for values in metrics.values() for replica in values}
        stats = [{key: metrics[key][replica] for key in STAT_KEYS if replica in metrics.get(key, {})}
                 for replica in replicas]
        signals = PoolSignals.from_replica_stats(self._pool, ctx.current_num_replicas, stats)
        queued = ctx.total_queued_requests or 0.0  # requests waiting at the callers, for no replica
        return dataclasses.replace(signals, waiting=(signals.waiting or 0.0) + queued if queued else signals.waiting,
                                   usd_per_hour=signals.usd_per_hour or self._usd_per_hour)

    def _export(self, app: str, decision: ScalingDecision, cost_profile: bool, now: float) -> None:
        record = {"at": now, **decision.to_dict(), "cost_profile": cost_profile}
        logger.info("trilemma autoscale %s", json.dumps(record))
        last = self._recent[-1] if self._recent else None
        if last is not None and all(last[key] == record[key] for key in ("current", "target", "policy", "reason")):
            # The same decision again: one entry with a count, so that changes stay in view.
            last["until"], last["repeated"] = now, last.get("repeated", 1) + 1
        else:
            self._recent = (self._recent + [record])[-DECISIONS_KEPT:]
        try:
            from ray.experimental.internal_kv import _internal_kv_put

            _internal_kv_put(decisions_key(app, self._pool), json.dumps(self._recent), namespace=KV_NAMESPACE)
            self._record_metric(decision)
        except Exception as error:  # explaining must never stop scaling
            logger.warning("could not export the autoscaling decision of %s: %r", self._pool, error)

    def _record_metric(self, decision: ScalingDecision) -> None:
        from ray.util.metrics import Counter, Gauge

        if self._metrics is None:
            self._metrics = (
                Counter("trilemma_scaling_decisions_total", "Autoscaling decisions, by pool, policy and direction.",
                        tag_keys=("pool", "policy", "direction")),
                Gauge("trilemma_target_replicas", "Replicas the autoscaler wants, by pool.", tag_keys=("pool",)),
            )
        decisions, target = self._metrics
        decisions.inc(1, {"pool": self._pool, "policy": decision.policy, "direction": decision.direction})
        target.set(decision.target, {"pool": self._pool})
