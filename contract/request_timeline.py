"""Where a streamed answer's first token spends its time, hop by hop.

A client that sends `x-trilemma-timing: 1` gets, on its stream's usage event, the wall-clock
times (Unix seconds) at which its request passed each point of the app:

    "trilemma_timing": {"router_received": ..., "router_sent": ..., "pool_received": ...,
                        "pool_admitted": ..., "engine_first_output": ..., "pool_first_sent": ...,
                        "router_first_item": ...}

With its own send time and the arrival of the first token, the differences name every
millisecond of the time to first token (`HOPS`). The stamps of one host share its clock;
across hosts a hop also holds the hosts' clock offset.

Beside them, `"engine_outputs"` lists the times at which the replica received each item of the
engine's stream, and `"router_items"` those at which the router received each item from the
replica, so the gaps between tokens have names too: those the engine made (its steps, and the
cores it waited for), those the way to the router added, and those after it. A client on the
router's host also times the way out of every item (`item_delays_s`).
"""

from __future__ import annotations

import bisect
import time
from typing import Mapping, Sequence

from core.wire import TIMING_HEADER

# The key of the stamps on the stream's usage event.
TIMING_KEY = "trilemma_timing"
# The times of every item of a stream at one point, on the same event: the engine's at the
# replica, and the replica's at the router.
ENGINE_OUTPUTS, ROUTER_ITEMS = "engine_outputs", "router_items"
# The client's own stamps, as `hops_ms` reads them.
CLIENT_SENT, CLIENT_FIRST_TOKEN = "client_sent", "client_first_token"

# The first token's way, in order: (hop, from stamp, to stamp).
HOPS = (
    ("proxy in", CLIENT_SENT, "router_received"),
    ("router", "router_received", "router_sent"),
    ("router to replica", "router_sent", "pool_received"),
    ("admission queue", "pool_received", "pool_admitted"),
    ("engine", "pool_admitted", "engine_first_output"),
    ("stream batching", "engine_first_output", "pool_first_sent"),
    ("replica to router", "pool_first_sent", "router_first_item"),
    ("router to client", "router_first_item", CLIENT_FIRST_TOKEN),
)


class RequestTimeline:
    """The stamps one process takes of one request; the first stamp of a name stands."""

    def __init__(self) -> None:
        self.stamps: dict[str, float] = {}
        self.items: dict[str, list[float]] = {}

    @classmethod
    def asked_for(cls, headers: Mapping[str, str] | None) -> RequestTimeline | None:
        """A timeline when the request asked for one (the header, sent on by the router)."""
        return cls() if (headers or {}).get(TIMING_HEADER) == "1" else None

    def stamp(self, name: str) -> None:
        self.stamps.setdefault(name, time.time())

    def stamp_item(self, series: str) -> float:
        now = time.time()
        self.items.setdefault(series, []).append(now)
        return now

    def stamp_engine_output(self) -> None:
        self.stamps.setdefault("engine_first_output", self.stamp_item(ENGINE_OUTPUTS))

    def as_event(self) -> dict[str, float | list[float]]:
        """What the usage event carries: the stamps, and the item times taken so far."""
        return {**self.stamps, **{series: list(times) for series, times in self.items.items()}}


def gaps_s(times: Sequence[float]) -> list[float]:
    """The seconds between consecutive times of one series (`ENGINE_OUTPUTS`, `ROUTER_ITEMS`, a
    client's events)."""
    return [later - earlier for earlier, later in zip(times, times[1:])]


def item_delays_s(sent: Sequence[float], received: Sequence[float]) -> list[float]:
    """For each item passing one point (`sent`: the `ENGINE_OUTPUTS` at the replica, or the
    `ROUTER_ITEMS`), the seconds until the next point's first receipt at or after it
    (`received`, in order: the router's items, or the client's events). What the way out adds to
    every token, not only the first. A lower bound: where the next point runs more than an item
    behind, a later item meets an earlier one's receipt. The router stamps an item when its relay
    takes it, which for the first item is after the response has started. Read against one
    clock, so with both points on one host."""
    delays = []
    for at in sent:
        index = bisect.bisect_left(received, at)
        if index < len(received):
            delays.append(received[index] - at)
    return delays


def hops_ms(stamps: Mapping[str, float]) -> dict[str, float]:
    """Each hop's milliseconds, for the hops whose two stamps are there."""
    return {
        hop: (stamps[end] - stamps[start]) * 1000
        for hop, start, end in HOPS if start in stamps and end in stamps
    }
