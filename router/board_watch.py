"""A value on the control board as a router sees it: read in the background, so that no
request waits for the board, and refreshed once it is older than a few seconds."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Generic, TypeVar

from autoscaling.control_board import ControlBoard, RayControlBoard

logger = logging.getLogger("ray.serve")

# How stale a router's view may be; the autoscaler decides every few seconds.
REFRESH_S = 2.0

T = TypeVar("T")


class BoardWatch(Generic[T]):
    """`current()` is the last value read (`initial` until the first read); a stale view starts
    a read and is answered at once. `parse` turns what the board holds (None when nothing) into
    the value; `on_change` hears of every change, old value first."""

    def __init__(self, key: str, parse: Callable[[Any], T], initial: T, board: ControlBoard | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 on_change: Callable[[T, T], None] | None = None) -> None:
        self._key, self._parse, self._state = key, parse, initial
        self._board = board or RayControlBoard()
        self._clock = clock
        self._on_change = on_change
        self._read_at: float | None = None
        self._refresh: asyncio.Task | None = None

    def current(self) -> T:
        stale = self._read_at is None or self._clock() - self._read_at >= REFRESH_S
        if stale and (self._refresh is None or self._refresh.done()):
            self._read_at = self._clock()
            self._refresh = asyncio.get_running_loop().create_task(self._read())
        return self._state

    async def _read(self) -> None:
        try:
            state = self._parse(await asyncio.to_thread(self._board.get, self._key))
        except Exception as error:  # keep the last view: routing must not stop for the board
            logger.warning("could not read %s from the control board: %r", self._key, error)
            return
        if state != self._state and self._on_change is not None:
            self._on_change(self._state, state)
        self._state = state
