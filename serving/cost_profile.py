"""The cost profile at the router: while the autoscaler has it in force (pools over budget,
or requests above their cost limit), scenarios of the lower classes get a tighter max_tokens
cap and the cheapest pool that fits. Real-time classes keep their own profile."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Callable

from autoscaling.control_board import ControlBoard, RayControlBoard
from core.autoscaling_config import CostProfileConfig
from core.config import ScenarioConfig

logger = logging.getLogger("ray.serve")

# How stale the router's view of the profile may be; the autoscaler decides every few seconds.
REFRESH_S = 2.0


@dataclass(frozen=True)
class CostProfileState:
    in_force: bool = False
    reason: str = ""


def apply_cost_profile(scenario: ScenarioConfig, profile: CostProfileConfig) -> ScenarioConfig:
    """The scenario as the profile makes it; unchanged for the classes it exempts."""
    if scenario.priority < profile.from_priority:
        return scenario
    cap = min(scenario.max_tokens_cap or profile.max_tokens_cap, profile.max_tokens_cap)
    update: dict = {"max_tokens_cap": cap, "default_max_tokens": min(scenario.default_max_tokens, cap)}
    if profile.cheapest_pool:
        update["prefer"] = "cheapest"
    return scenario.model_copy(update=update)


class CostProfileWatch:
    """The router's view of the profile on the control board, refreshed in the background so
    that no request waits for the board; until the first read, the profile is off."""

    def __init__(self, key: str, board: ControlBoard | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._key = key
        self._board = board or RayControlBoard()
        self._clock = clock
        self._state = CostProfileState()
        self._read_at: float | None = None
        self._refresh: asyncio.Task | None = None

    def current(self) -> CostProfileState:
        stale = self._read_at is None or self._clock() - self._read_at >= REFRESH_S
        if stale and (self._refresh is None or self._refresh.done()):
            self._read_at = self._clock()
            self._refresh = asyncio.get_running_loop().create_task(self._read())
        return self._state

    async def _read(self) -> None:
        try:
            found = await asyncio.to_thread(self._board.get, self._key)
        except Exception as error:  # keep the last view: routing must not stop for the board
            logger.warning("could not read the cost profile: %r", error)
            return
        found = found or {}
        state = CostProfileState(bool(found.get("in_force")), str(found.get("reason", "")))
        if state.in_force != self._state.in_force:
            logger.info("cost profile %s%s", "in force: " if state.in_force else "lifted",
                        state.reason if state.in_force else "")
        self._state = state
