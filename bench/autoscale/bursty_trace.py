"""A bursty day of requests: quiet, a ramp, a spike, quiet again, as Poisson arrivals whose
rate follows the phases (thinning), with prompt and output lengths drawn per request."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Phase:
    name: str
    seconds: float
    rate_from: float  # requests per second at the phase's start
    rate_to: float  # ... and at its end, linear in between

    def rate(self, into: float) -> float:
        return self.rate_from + (self.rate_to - self.rate_from) * into / self.seconds


@dataclass(frozen=True)
class TraceRequest:
    at: float
    prompt_tokens: int
    output_tokens: int


def bursty_day(quiet_rate: float, peak_rate: float, *, seconds: float = 3600.0) -> list[Phase]:
    """A day compressed into `seconds`: a quiet night, the morning ramp, a spike, the
    afternoon down to quiet."""
    share = seconds / 12
    return [
        Phase("quiet", 3 * share, quiet_rate, quiet_rate),
        Phase("ramp", 2 * share, quiet_rate, peak_rate * 0.6),
        Phase("spike", 2 * share, peak_rate, peak_rate),
        Phase("ramp down", 2 * share, peak_rate * 0.6, quiet_rate),
        Phase("quiet", 3 * share, quiet_rate, quiet_rate),
    ]


def arrivals(phases: list[Phase], *, prompt_tokens: tuple[int, int], output_tokens: tuple[int, int],
             seed: int = 0) -> list[TraceRequest]:
    rng = random.Random(seed)
    peak = max(max(p.rate_from, p.rate_to) for p in phases)
    requests, start = [], 0.0
    for phase in phases:
        at = 0.0
        while True:
            at += rng.expovariate(peak)
            if at >= phase.seconds:
                break
            if rng.random() < phase.rate(at) / peak:  # thinning: keep with probability rate/peak
                requests.append(TraceRequest(start + at, rng.randint(*prompt_tokens), rng.randint(*output_tokens)))
        start += phase.seconds
    return requests


def phase_at(phases: list[Phase], at: float) -> str:
    for phase in phases:
        if at < phase.seconds:
            return phase.name
        at -= phase.seconds
    return phases[-1].name
