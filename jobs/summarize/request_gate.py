"""The asyncio side of the concurrency controller: requests wait here for a slot under its limit."""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from typing import AsyncIterator

from jobs.summarize.concurrency import AimdController, Change, Load, Ticket

logger = logging.getLogger(__name__)


class RequestGate:
    """At most `controller.limit` requests in flight, none while a Retry-After pause runs."""

    def __init__(self, controller: AimdController) -> None:
        self.controller = controller
        self._in_flight = 0
        self._changed = asyncio.Condition()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[Ticket]:
        async with self._changed:
            while not self.controller.may_start(self._in_flight):
                pause = self.controller.pause_remaining()
                try:
                    # A pause ends by the clock, not by a notification: wake up for it.
                    await asyncio.wait_for(self._changed.wait(), timeout=pause or None)
                except asyncio.TimeoutError:
                    pass
            self._in_flight += 1
            ticket = self.controller.started()
        try:
            yield ticket
        finally:
            async with self._changed:
                self._in_flight -= 1
                self._changed.notify_all()

    async def succeeded(self, ticket: Ticket) -> None:
        await self._apply(self.controller.on_success(ticket))

    async def overloaded(self, ticket: Ticket, retry_after_s: float | None) -> None:
        await self._apply(self.controller.on_overload(ticket, retry_after_s))

    async def observed(self, load: Load, detail: str = "") -> None:
        await self._apply(self.controller.on_load(load, detail))

    async def _apply(self, change: Change | None) -> None:
        if change is None:
            return
        logger.info("batch concurrency %d: %s", change.limit, change.reason)
        async with self._changed:
            self._changed.notify_all()
