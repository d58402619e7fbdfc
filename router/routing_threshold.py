"""The routing threshold a router applies: the config's, or the one the traffic split set
(autoscaling.split), read from the control board."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

from autoscaling.control_board import ControlBoard
from router.board_watch import BoardWatch

logger = logging.getLogger("ray.serve")


@dataclass(frozen=True)
class ThresholdInForce:
    tokens: int
    reason: str = ""  # the split's latest
    set_by_split: bool = False  # False: the config's, until the split has set one


def threshold_watch(key: str, configured: int, board: ControlBoard | None = None,
                    clock: Callable[[], float] = time.monotonic) -> BoardWatch[ThresholdInForce]:
    """The split's threshold as the router sees it; the configured one until the split set one."""

    def parse(found: Any) -> ThresholdInForce:
        threshold = found.get("threshold") if isinstance(found, dict) else None
        # Only a positive count of tokens (a bool is an int to Python): anything else would send
        # every request to the long pool.
        if type(threshold) is not int or threshold < 1:
            return ThresholdInForce(configured)
        return ThresholdInForce(threshold, str(found.get("reason", "")), set_by_split=True)

    def log_change(before: ThresholdInForce, after: ThresholdInForce) -> None:
        if after.tokens != before.tokens:
            logger.info("routing threshold %d -> %d tokens: %s", before.tokens, after.tokens, after.reason)

    return BoardWatch(key, parse, ThresholdInForce(configured), board, clock, on_change=log_change)
