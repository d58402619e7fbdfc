"""Admission policies: whether a request enters a pool replica's engine, waits, or is shed.

A policy only decides, from a snapshot of the replica's queue; `AdmissionQueue` applies the
decision. Lower priority numbers are more urgent (vLLM's convention: 0 is real-time).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Mapping

from core import wire
from core.config import AdmissionConfig

# A request that names no class (one sent to a pool directly) is served as real-time.
DEFAULT_PRIORITY = 0


def request_priority(headers: Mapping[str, str] | None, request: Any) -> int:
    """The class the router gave the request; else the body's own `priority`, else real-time."""
    value = (headers or {}).get(wire.PRIORITY_HEADER)
    if value is not None:
        try:
            return int(value)
        except ValueError:
            pass
    priority = getattr(request, "priority", None)
    return priority if isinstance(priority, int) else DEFAULT_PRIORITY


@dataclass(frozen=True)
class QueueState:
    """One replica's load when a request arrives."""

    in_engine: int  # requests handed to the engine (running or in its own waiting list)
    waiting: tuple[int, ...] = ()  # priorities of the requests queued before the engine, in arrival order


@dataclass(frozen=True)
class AdmissionDecision:
    action: Literal["admit", "queue", "shed"]
    reason: str
    # Index in `QueueState.waiting` of a queued request to shed so that this one can wait.
    evict: int | None = field(default=None)


class AdmissionPolicy:
    """Decides for one arriving request; subclasses register under a config name
    (`pools.<name>.admission.policy`)."""

    registry: ClassVar[dict[str, type[AdmissionPolicy]]] = {}

    def __init_subclass__(cls, *, name: str, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        AdmissionPolicy.registry[name] = cls

    def __init__(self, config: AdmissionConfig, max_in_engine: int) -> None:
        self.config = config
        self.max_in_engine = max_in_engine

    @classmethod
    def from_config(cls, config: AdmissionConfig, max_in_engine: int) -> AdmissionPolicy:
        # The config's `policy` is one of the registered names; the config model checks it.
        return cls.registry[config.policy](config, max_in_engine)

    def decide(self, priority: int, state: QueueState) -> AdmissionDecision:
        if state.in_engine < self.max_in_engine and not state.waiting:
            return AdmissionDecision("admit", f"engine has {state.in_engine} of {self.max_in_engine} requests")
        return self.decide_when_busy(priority, state)

    def decide_when_busy(self, priority: int, state: QueueState) -> AdmissionDecision:
        raise NotImplementedError


class FifoAdmission(AdmissionPolicy, name="fifo"):
    """First come, first served: every class waits in one line and the line's end is shed."""

    def decide_when_busy(self, priority: int, state: QueueState) -> AdmissionDecision:
        limit = self.config.max_queued
        if len(state.waiting) < limit:
            return AdmissionDecision("queue", f"{len(state.waiting)} waiting, under admission.max_queued {limit}")
        return AdmissionDecision(
            "shed", f"the queue is full: {len(state.waiting)} waiting, admission.max_queued is {limit}"
        )


class PriorityAdmission(AdmissionPolicy, name="priority"):
    """Lower classes may fill only a share of the queue, so they are shed first; a request
    that finds its share full takes the place of a less urgent one if any waits, so the most
    urgent class is never shed while lower-class work waits in the same replica."""

    def share(self, priority: int) -> float:
        """The class's share; a priority the config does not list (a request sent to the
        pool directly) takes that of the nearest listed class at least as urgent, or the
        most urgent listed one."""
        listed = sorted(self.config.queue_share)
        at_least_as_urgent = [p for p in listed if p <= priority]
        return self.config.queue_share[at_least_as_urgent[-1] if at_least_as_urgent else listed[0]]

    def class_limit(self, priority: int) -> int:
        return math.floor(self.config.max_queued * self.share(priority))

    def decide_when_busy(self, priority: int, state: QueueState) -> AdmissionDecision:
        limit = self.class_limit(priority)
        waiting = len(state.waiting)
        if waiting < limit:
            return AdmissionDecision("queue", f"{waiting} waiting, under priority {priority}'s limit of {limit}")
        where = (
            f"{waiting} waiting, at priority {priority}'s limit of {limit} "
            f"(admission.max_queued {self.config.max_queued} x queue_share {self.share(priority)})"
        )
        victim = _least_urgent_newest(state.waiting, more_than=priority)
        if victim is not None:
            return AdmissionDecision(
                "queue", f"{where}; sheds a waiting priority {state.waiting[victim]} request instead",
                evict=victim,
            )
        return AdmissionDecision("shed", where)


def _least_urgent_newest(waiting: tuple[int, ...], *, more_than: int) -> int | None:
    """The last-arrived of the least urgent waiting requests, if it is less urgent than
    `more_than`: it has waited least, so shedding it wastes least of anyone's time."""
    candidates = [index for index, priority in enumerate(waiting) if priority > more_than]
    if not candidates:
        return None
    lowest = max(waiting[index] for index in candidates)
    return max(index for index in candidates if waiting[index] == lowest)
