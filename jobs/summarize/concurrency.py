"""How many requests the job keeps in flight: AIMD, as TCP does for its window.

The limit grows by one for every window of successful requests (a window being as many
requests as the limit allows at once) and is multiplied down (halved by default) when the
service pushes back: a 429, or a pool whose queue holds waiting requests. A decrease happens at
most once per window, so a burst of 429s answering the same window halves once, not once per
429. A Retry-After pauses new requests for that long. Pure: time comes from a clock passed in.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Literal

Load = Literal["clear", "busy", "congested"]


@dataclass(frozen=True)
class AimdSettings:
    initial: int = 2
    minimum: int = 1
    maximum: int = 16
    decrease_factor: float = 0.5
    increase: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.minimum <= self.initial <= self.maximum:
            raise ValueError(f"need 1 <= minimum <= initial <= maximum; got {self}")
        if not 0 < self.decrease_factor < 1:
            raise ValueError(f"decrease_factor must be in (0, 1); got {self.decrease_factor}")


@dataclass(frozen=True)
class Ticket:
    """Handed to a request when it starts: which window it belongs to."""

    epoch: int


@dataclass(frozen=True)
class Change:
    """A change of the limit and why, for the log and the progress bar."""

    limit: int
    reason: str


class AimdController:
    def __init__(self, settings: AimdSettings, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self._clock = clock
        self._limit = settings.initial
        self._epoch = 0  # bumped by every decrease: requests started before it are of an old window
        self._successes = 0  # in the current window
        self._paused_until = 0.0
        self._load: Load = "clear"

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def load(self) -> Load:
        return self._load

    def pause_remaining(self) -> float:
        return max(0.0, self._paused_until - self._clock())

    def may_start(self, in_flight: int) -> bool:
        return in_flight < self._limit and self.pause_remaining() == 0.0

    def started(self) -> Ticket:
        return Ticket(self._epoch)

    def on_success(self, ticket: Ticket) -> Change | None:
        """Additive increase: one more slot after a full window of successes, unless the
        service reports its pools busy (then the job holds where it is)."""
        if ticket.epoch != self._epoch or self._load != "clear":
            return None
        self._successes += 1
        if self._successes < self._limit or self._limit >= self.settings.maximum:
            return None
        self._successes = 0
        self._limit = min(self.settings.maximum, self._limit + self.settings.increase)
        return Change(self._limit, f"a window of {self._limit - self.settings.increase} successes")

    def on_overload(self, ticket: Ticket, retry_after_s: float | None) -> Change | None:
        """Multiplicative decrease on a 429 (once per window) and a pause for its Retry-After."""
        if retry_after_s:
            self._paused_until = max(self._paused_until, self._clock() + retry_after_s)
        if ticket.epoch != self._epoch:
            return None  # this window has already paid for its overload
        return self._decrease(f"429 from the service (Retry-After {retry_after_s or 0:g} s)")

    def on_load(self, load: Load, detail: str = "") -> Change | None:
        """The pools' own report: queued requests halve the limit (each reading that still
        shows them), a full engine holds it, a clear one lets it grow again."""
        self._load = load
        if load != "congested":
            return None
        return self._decrease(f"pool queue not empty{': ' + detail if detail else ''}")

    def _decrease(self, reason: str) -> Change:
        self._epoch += 1
        self._successes = 0
        self._limit = max(self.settings.minimum, math.floor(self._limit * self.settings.decrease_factor))
        return Change(self._limit, reason)
