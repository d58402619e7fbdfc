"""The router's eyes on the pools: replica counts from the Serve controller and start times
from the control board, read every second into the router's PoolHealth.

Without it, a request sent to a pool whose only replica is being replaced waits inside
Serve's handle until a new replica has started (minutes for an engine); with it, the router
sends the request to another pool or answers 503 at once.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from autoscaling.control_board import ControlBoard, replica_start_key
from core.upstream import serve_replica_states
from router.pool_health import PoolHealth

logger = logging.getLogger(__name__)

# The controller's replica states (ray.serve._private.common.ReplicaState) by what they mean
# for the router: serving, or on the way to serving. A restarted controller first lists the
# replicas it finds alive as RECOVERING; they serve all along (handles keep routing to them), so
# counting them as starting made every pool look down for a second after a controller restart,
# and the router answered 503.
RUNNING_STATES = frozenset({"RUNNING", "RECOVERING"})
STARTING_STATES = frozenset({"STARTING", "UPDATING"})
WATCH_INTERVAL_S = 1.0


@dataclass(frozen=True)
class PoolReading:
    running: int
    starting: int
    start_s: float | None


def count_replicas(replica_states: list[str]) -> tuple[int, int]:
    """(running, starting) from the states of a deployment's replicas."""
    return (sum(state in RUNNING_STATES for state in replica_states),
            sum(state in STARTING_STATES for state in replica_states))


class PoolWatch:
    """Reads every pool's replicas in a background task; `start()` needs a running event loop."""

    def __init__(
        self, app_name: str, deployments: dict[str, str], health: PoolHealth, board: ControlBoard,
        interval_s: float = WATCH_INTERVAL_S,
    ) -> None:
        self._app_name = app_name
        self._deployments = deployments  # pool -> Serve deployment name
        self._health = health
        self._board = board
        self._interval_s = interval_s
        self._task: asyncio.Task | None = None
        self._failing = False

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            try:
                readings = await asyncio.to_thread(self.read)
                for pool, reading in readings.items():
                    self._health.observe(pool, running=reading.running, starting=reading.starting,
                                         start_s=reading.start_s)
                self._failing = False
            except Exception as error:  # the controller restarting: keep the last view, say so once
                if not self._failing:
                    logger.warning("cannot read the pools' replicas: %r", error)
                self._failing = True
            await asyncio.sleep(self._interval_s)

    def read(self) -> dict[str, PoolReading]:
        """One reading of every pool (blocking: a call to Serve's controller)."""
        states = serve_replica_states(self._app_name)
        readings = {}
        for pool, deployment in self._deployments.items():
            if deployment not in states:
                continue  # not deployed yet, or being deleted: nothing to learn
            running, starting = count_replicas(states[deployment])
            started = self._board.get(replica_start_key(self._app_name, pool)) or {}
            readings[pool] = PoolReading(running, starting, started.get("start_s"))
        return readings
