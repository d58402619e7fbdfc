"""The app's pools as the batch job sees them: read from `GET /trilemma/pools`, parsed once here.

A pool whose replicas queue requests in front of their engines is congested: whatever class
waits there, more batch work only lengthens the queue that online requests share. A pool whose
engines hold all they may is busy: the job keeps its pace but does not grow. An app without
the queue figures (an older one) gives no reading, and the job goes by 429s alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from jobs.summarize.concurrency import Load

SEVERITY = {"clear": 0, "busy": 1, "congested": 2}


@dataclass(frozen=True)
class ReplicaQueue:
    in_engine: int
    max_in_engine: int
    waiting: int


@dataclass(frozen=True)
class PoolReading:
    name: str
    replicas: tuple[ReplicaQueue, ...]

    @property
    def load(self) -> Load:
        if any(replica.waiting > 0 for replica in self.replicas):
            return "congested"
        if self.replicas and all(replica.in_engine >= replica.max_in_engine for replica in self.replicas):
            return "busy"
        return "clear"

    def describe(self) -> str:
        waiting = sum(replica.waiting for replica in self.replicas)
        in_engine = sum(replica.in_engine for replica in self.replicas)
        return f"{self.name}: {waiting} waiting, {in_engine} in its engines"


def parse_pools(payload: Any) -> dict[str, PoolReading] | None:
    """Readings by pool, or None when the answer lacks the queue figures."""
    try:
        pools = payload["pools"]
        return {
            name: PoolReading(name, tuple(
                ReplicaQueue(int(r["in_engine"]), int(r["max_in_engine"]), int(r["waiting"]))
                for r in pool["replicas"]
            ))
            for name, pool in pools.items()
        }
    except (KeyError, TypeError, ValueError):
        return None


def job_load(readings: dict[str, PoolReading], pools_used: Iterable[str]) -> tuple[Load, str]:
    """The worst load among the pools the job sends to (all of them until it knows), and why."""
    used = [name for name in pools_used if name in readings] or list(readings)
    worst: Load = "clear"
    details = []
    for name in used:
        load = readings[name].load
        if load != "clear":
            details.append(readings[name].describe())
        if SEVERITY[load] > SEVERITY[worst]:
            worst = load
    return worst, "; ".join(details)
