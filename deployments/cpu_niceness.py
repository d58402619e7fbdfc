"""A pool's CPU precedence on a host whose cores its engines share with other pools.

Ray starts its workers at nice 15, so a pool replica and the engine processes it spawns all
compete for CPU time on equal terms. On a CPU host, a pool that carries batch or long-context
work can yield to the latency pool: at a higher nice value the kernel gives its processes a
smaller share of a contended core and moves other work (the proxy, the router, the replicas'
event loops) onto its cores first. Raising a nice value needs no privilege; lowering it does,
so a target below the current value is left as it is, with a warning.
"""

from __future__ import annotations

import logging
import os
from typing import Callable


def apply_cpu_niceness(
    target: int | None, *, nice: Callable[[int], int] = os.nice, log: logging.Logger | None = None,
) -> int:
    """Raises the calling thread to nice `target`, and with it the engine processes it starts
    after (Linux keeps nice values per thread; children inherit their parent thread's); returns
    the nice value it runs at."""
    current = nice(0)
    if target is None or target == current:
        return current
    if target < current:
        (log or logging.getLogger(__name__)).warning(
            "cpu_niceness %d is below the replica's nice value %d; it stays at %d "
            "(lowering it needs privileges)", target, current, current)
        return current
    return nice(target - current)
