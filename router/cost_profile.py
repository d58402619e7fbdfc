"""The cost profile at the router: while the autoscaler has it in force (pools over budget,
or requests above their cost limit), scenarios of the lower classes get a tighter max_tokens
cap and the cheapest pool that fits. Real-time classes keep their own profile."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

from autoscaling.control_board import ControlBoard
from core.autoscaling_config import CostProfileConfig
from core.config import ScenarioConfig
from router.board_watch import BoardWatch

logger = logging.getLogger("ray.serve")


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


class CostProfileWatch(BoardWatch[CostProfileState]):
    """The router's view of the profile on the control board; until the first read, off."""

    def __init__(self, key: str, board: ControlBoard | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(key, _parse, CostProfileState(), board, clock, on_change=_log_change)


def _parse(found: Any) -> CostProfileState:
    found = found or {}
    return CostProfileState(bool(found.get("in_force")), str(found.get("reason", "")))


def _log_change(before: CostProfileState, after: CostProfileState) -> None:
    if after.in_force != before.in_force:
        logger.info("cost profile %s%s", "in force: " if after.in_force else "lifted", after.reason if after.in_force else "")
