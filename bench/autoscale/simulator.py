"""A pool of simulated replicas under a request trace, scaled by the same policy object Ray
Serve runs (`PoolScalingPolicy`), or held at a fixed count.

Each replica batches continuously as vLLM does (autoscaling.replica_model gives an
iteration's time), reports the stats a pool replica reports (its `LatencyWindow` p99s and
rate, its busy fraction, its price), and the router sends each arrival to the ready replica
with the fewest requests, as `LeastLoadedRouter` does. The controller calls the policy every
period with an `AutoscalingContext`-shaped view; a new replica serves after `startup_s`, a
removed one takes no new request and stops once its requests are done. Every replica costs
from its launch to its stop.

With a wake time (`ReplicaModel.wake_s`, a pool that sleeps when idle) a removed replica that
served goes to sleep instead of away: its GPU memory is free for other work, and a later
scale-up wakes it in `wake_s` rather than starting one in `startup_s`. Its time asleep is
counted apart (`SimResult.asleep_seconds`): it still holds its GPU.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from autoscaling.control_board import MemoryControlBoard
from autoscaling.serve_policy import PoolScalingPolicy
from bench.autoscale.bursty_trace import TraceRequest
from bench.autoscale.replica_model import ReplicaModel
from pool.latency_window import LatencyWindow

LATENCY_WINDOW_S = 30.0  # pool.replica.AUTOSCALING_WINDOW_S: what a replica's p99s cover
APP = "simulated"


@dataclass
class SimRequest:
    trace: TraceRequest
    generated: int = 0
    first_at: float | None = None
    done_at: float | None = None

    @property
    def ttft_s(self) -> float:
        return self.first_at - self.trace.at

    @property
    def tpot_s(self) -> float | None:
        n = self.trace.output_tokens
        return (self.done_at - self.first_at) / (n - 1) if n > 1 else None


class SimReplica:
    def __init__(self, name: str, model: ReplicaModel, launched_at: float, ready_at: float, clock) -> None:
        self.name, self.model = name, model
        self.launched_at, self.ready_at = launched_at, ready_at
        self.stopped_at: float | None = None
        self.draining = False
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.iteration_ends_at: float | None = None
        self.busy_s = 0.0
        self.latency = LatencyWindow(LATENCY_WINDOW_S, clock=clock)
        self.request_s, self.counted_at = 0.0, ready_at  # the integral of requests in the engine
        self.reported = (ready_at, 0.0, 0.0)  # (wall, busy, request_s) at the last stats report

    @property
    def load(self) -> int:
        return len(self.waiting) + len(self.running)

    def count(self, now: float) -> None:
        """Adds the requests in the engine since the last count; called before the load changes.
        The pool's admission hands the engine up to twice its batch (max_in_engine's default)."""
        if now > self.counted_at:
            self.request_s += min(self.load, 2 * self.model.max_num_seqs) * (now - self.counted_at)
            self.counted_at = now

    def accept(self, request: SimRequest, now: float) -> None:
        self.count(now)
        self.waiting.append(request)
        if self.iteration_ends_at is None:
            self.start_iteration(now)

    def ready(self, now: float) -> bool:
        return self.stopped_at is None and now >= self.ready_at

    def start_iteration(self, now: float) -> None:
        joined = []
        while self.waiting and len(self.running) + len(joined) < self.model.max_num_seqs:
            joined.append(self.waiting.popleft())
        self.running.extend(joined)
        if not self.running:
            self.iteration_ends_at = None
            return
        seconds = self.model.iteration_s(len(self.running), sum(r.trace.prompt_tokens for r in joined))
        self.iteration_ends_at = now + seconds
        self.busy_s += seconds

    def finish_iteration(self, now: float) -> list[SimRequest]:
        self.count(now)
        done = []
        for request in self.running:
            request.generated += 1
            if request.first_at is None:
                request.first_at = now  # the prefill's iteration yields the first token
            if request.generated >= request.trace.output_tokens:
                request.done_at = now
                done.append(request)
                # The routed size as the replay sends it (max_tokens = the output, with ignore_eos):
                # the traffic split reads the pools' traffic by it.
                self.latency.record(request.ttft_s, request.tpot_s, output_tokens=request.generated,
                                    size_tokens=request.trace.prompt_tokens + request.trace.output_tokens,
                                    prompt_tokens=request.trace.prompt_tokens)
        self.running = [r for r in self.running if r.done_at is None]
        self.start_iteration(now)
        return done

    def stats(self, now: float, usd_per_hour: float) -> dict[str, float]:
        """What `PoolServer.record_autoscaling_stats` reports."""
        self.count(now)
        wall, busy, request_s = self.reported
        self.reported = (now, self.busy_s, self.request_s)
        stats = {**self.latency.stats(), "waiting": float(len(self.waiting)), "running": float(len(self.running)),
                 "usd_per_hour": usd_per_hour}
        if now > wall:
            # Busy time is booked when an iteration starts; an iteration running past `now` is capped.
            stats["utilization"] = min(1.0, (self.busy_s - busy) / (now - wall))
            stats["batch_occupancy"] = min(1.0, (self.request_s - request_s) / (self.model.max_num_seqs * (now - wall)))
        return stats


@dataclass
class SimResult:
    requests: list[SimRequest]
    replicas: list[SimReplica]
    ended_at: float
    timeline: list[dict[str, Any]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    asleep_seconds: float = 0.0  # replica-seconds spent asleep (with a wake time only)

    def replica_seconds(self) -> float:
        return sum((r.stopped_at if r.stopped_at is not None else self.ended_at) - r.launched_at
                   for r in self.replicas)


class PoolSimulation:
    def __init__(self, model: ReplicaModel, usd_per_hour: float, *, replicas: int,
                 policy: PoolScalingPolicy | None = None, period_s: float = 5.0, sample_s: float = 10.0) -> None:
        self.model, self.usd_per_hour = model, usd_per_hour
        self.policy, self.period_s, self.sample_s = policy, period_s, sample_s
        self.now = 0.0
        self._names = (f"replica-{n}" for n in itertools.count(1))
        self.replicas = [self._launch(ready_at=0.0) for _ in range(replicas)]
        self.target = replicas
        self.policy_state: dict[str, Any] = {}
        self._asleep_since: list[float] = []  # one entry per sleeping replica (with a wake time)
        self._asleep_seconds = 0.0

    def _launch(self, ready_at: float) -> SimReplica:
        return SimReplica(next(self._names), self.model, self.now, ready_at, clock=lambda: self.now)

    def _serving(self) -> list[SimReplica]:
        return [r for r in self.replicas if r.ready(self.now) and not r.draining]

    def _kept(self) -> list[SimReplica]:
        """Replicas the target counts: serving or starting, not draining."""
        return [r for r in self.replicas if r.stopped_at is None and not r.draining]

    def run(self, trace: list[TraceRequest]) -> SimResult:
        requests = [SimRequest(t) for t in trace]
        arrivals = deque(requests)
        held: deque[SimRequest] = deque()  # at the router, while no replica serves
        result = SimResult(requests, self.replicas, 0.0)
        next_decision, next_sample = self.period_s, 0.0
        remaining = len(requests)
        while remaining:
            events = [next_decision, next_sample, *self.events()]
            if arrivals:
                events.append(arrivals[0].trace.at)
            self.now = min(events)
            remaining -= len(self.advance())
            while arrivals and arrivals[0].trace.at <= self.now:
                held.append(arrivals.popleft())
            self.dispatch(held)
            if self.now >= next_sample:
                result.timeline.append(self._sample(requests))
                next_sample += self.sample_s
            if self.now >= next_decision:
                if self.policy is not None:
                    self.decide(len(held), result.decisions)
                next_decision += self.period_s
        self.finish()
        result.ended_at = self.now
        result.asleep_seconds = self.asleep_seconds()
        result.timeline.append(self._sample(requests))
        return result

    def events(self) -> list[float]:
        """When the pool next changes by itself: an iteration ends, a replica starts serving."""
        return [*(r.iteration_ends_at for r in self.replicas if r.iteration_ends_at is not None),
                *(r.ready_at for r in self.replicas if r.stopped_at is None and r.ready_at > self.now)]

    def advance(self) -> list[SimRequest]:
        """Ends the iterations due at `now` and stops drained replicas; the requests finished."""
        done = []
        for replica in self.replicas:
            if replica.iteration_ends_at is not None and replica.iteration_ends_at <= self.now:
                done += replica.finish_iteration(self.now)
            if replica.draining and replica.stopped_at is None and not replica.load:
                self._stop(replica)
        return done

    def dispatch(self, held: deque[SimRequest]) -> None:
        """Hands the held requests to the least loaded serving replicas, as LeastLoadedRouter does."""
        serving = self._serving()
        while held and serving:
            min(serving, key=lambda r: r.load).accept(held.popleft(), self.now)

    def finish(self) -> None:
        """The run is over: every replica stops now."""
        for replica in self.replicas:
            if replica.stopped_at is None:
                replica.stopped_at = self.now

    def asleep_seconds(self) -> float:
        return self._asleep_seconds + sum(self.now - since for since in self._asleep_since)

    def _stop(self, replica: SimReplica) -> None:
        """A replica leaves the pool; one that served goes to sleep when the pool can sleep."""
        if self.model.wake_s is not None and replica.ready(self.now):
            self._asleep_since.append(self.now)
        replica.stopped_at = self.now

    def _add_replica(self) -> SimReplica:
        """Wakes a sleeping replica when there is one, else launches one."""
        if self._asleep_since:
            self._asleep_seconds += self.now - self._asleep_since.pop()
            return self._launch(ready_at=self.now + self.model.wake_s)
        return self._launch(ready_at=self.now + self.model.startup_s)

    def decide(self, held: int, decisions: list[dict[str, Any]]) -> None:
        """Calls the policy with an `AutoscalingContext`-shaped view of the pool and applies its
        target; a change is appended to `decisions` with the policy's record of it."""
        serving = self._serving()
        stats = {r.name: r.stats(self.now, self.usd_per_hour) for r in serving}
        ctx = SimpleNamespace(
            current_time=self.now, app_name=APP, policy_state=self.policy_state, target_num_replicas=self.target,
            current_num_replicas=len(serving), total_queued_requests=float(held),
            aggregated_metrics={key: {name: s[key] for name, s in stats.items() if key in s}
                                for key in {key for s in stats.values() for key in s}},
        )
        target, self.policy_state = self.policy(ctx)
        if target != self.target:
            decisions.append({"at": self.now, "from": self.target, "to": target,
                              **(self.policy._recent[-1] if self.policy._recent else {})})
        self._scale_to(target)

    def _scale_to(self, target: int) -> None:
        self.target = target
        kept = self._kept()
        for _ in range(target - len(kept)):
            self.replicas.append(self._add_replica())
        # Down: replicas still starting go first (as Ray's do), then the least loaded drain.
        surplus = sorted(kept, key=lambda r: (r.ready(self.now), r.load))[:max(0, len(kept) - target)]
        for replica in surplus:
            if not replica.ready(self.now) or not replica.load:
                self._stop(replica)
            replica.draining = True

    def _sample(self, requests: list[SimRequest]) -> dict[str, Any]:
        recent = [r.ttft_s for r in requests
                  if r.first_at is not None and self.now - LATENCY_WINDOW_S < r.first_at <= self.now]
        recent.sort()
        return {"t": self.now, "replicas": sum(r.stopped_at is None for r in self.replicas),
                "serving": len(self._serving()),
                "ttft_p99_s": recent[min(len(recent) - 1, math.ceil(0.99 * len(recent)) - 1)] if recent else None,
                "usd_per_hour": sum(r.stopped_at is None for r in self.replicas) * self.usd_per_hour}


def simulated_policy(config: dict[str, Any], pool: str, usd_per_hour: float) -> PoolScalingPolicy:
    """Ray Serve's policy object for the pool, with its board in memory and its fleet its own."""
    PoolScalingPolicy._fleets.pop(APP, None)
    PoolScalingPolicy._splits.pop(APP, None)  # an earlier simulation's traffic split, in this process
    return PoolScalingPolicy(config, pool, {pool: usd_per_hour}, board=MemoryControlBoard(), export_metrics=False)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]

