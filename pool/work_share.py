"""Splits a replica's busy time among the requests it served, by the work each did.

At every instant the engine is busy, that instant goes to the requests in it in proportion
to their current weight:
- a request in prefill weighs `prompt_tokens x prefill seconds per token`, the work its
  prompt puts into each engine step until its first token;
- a request in decode weighs `seconds per output token` (its TPOT), one token per step.
Both per-token figures are what this replica measured on its recent streamed requests, so
the split follows the engine as it is (long prompts cost more on a slow prefill, long answers
on a slow decode). Because the weights are shares of each instant, the seconds handed out add
up to the busy time exactly: a replica's requests pay for all of its busy time, no more.

A request still waiting in the engine's queue weighs as if in prefill: the engine does not say
when it is scheduled, so under a deep queue waiting requests take some of the share of those
decoding. The total stays exact; the split between them is the approximation.

Bookkeeping is O(1) per event: G(t) = integral of dt / W(t), where W is the sum of weights in
flight; a request holding weight w from t0 to t1 is owed w x (G(t1) - G(t0)) seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

# Before a replica has measured anything: prefill per prompt token is much cheaper than a
# decode step per output token on every engine we ran (about 20x on the CPU engine).
INITIAL_PREFILL_S_PER_TOKEN = 0.002
INITIAL_DECODE_S_PER_TOKEN = 0.04
# How fast the measured per-token figures follow change: weight of the newest request.
SMOOTHING = 0.1


@dataclass
class Share:
    """One request's account: its weight now and the seconds owed to it so far."""

    prompt_tokens: int
    weight: float
    mark: float  # G when the weight was last set
    seconds: float = 0.0
    started_at: float = 0.0
    first_token_at: float | None = None


class WorkShare:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._g = 0.0
        self._total_weight = 0.0
        self._last = clock()
        self.prefill_s_per_token = INITIAL_PREFILL_S_PER_TOKEN
        self.decode_s_per_token = INITIAL_DECODE_S_PER_TOKEN

    def _advance(self) -> float:
        now = self._clock()
        if self._total_weight > 0:
            self._g += (now - self._last) / self._total_weight
        self._last = now
        return now

    def _reweight(self, share: Share, weight: float) -> None:
        share.seconds += share.weight * (self._g - share.mark)
        self._total_weight += weight - share.weight
        if abs(self._total_weight) < 1e-12:  # float drift must not leave a phantom weight
            self._total_weight = 0.0
        share.weight, share.mark = weight, self._g

    def start(self, prompt_tokens: int) -> Share:
        now = self._advance()
        share = Share(prompt_tokens=max(prompt_tokens, 1), weight=0.0, mark=self._g, started_at=now)
        self._reweight(share, share.prompt_tokens * self.prefill_s_per_token)
        return share

    def first_token(self, share: Share) -> None:
        if share.first_token_at is not None:
            return
        share.first_token_at = self._advance()
        self._reweight(share, self.decode_s_per_token)

    def finish(self, share: Share, completion_tokens: int, *, learn: bool = True) -> float:
        """Closes the account; returns the busy seconds this request is charged. Only streamed
        requests that produced tokens teach the replica its per-token times."""
        now = self._advance()
        self._reweight(share, 0.0)
        if learn:
            self._learn(share, completion_tokens, now)
        return share.seconds

    def _learn(self, share: Share, completion_tokens: int, now: float) -> None:
        """Updates the per-token figures from what this request took."""
        if share.first_token_at is None:
            return
        ttft = share.first_token_at - share.started_at
        self.prefill_s_per_token += SMOOTHING * (ttft / share.prompt_tokens - self.prefill_s_per_token)
        if completion_tokens > 1:
            tpot = (now - share.first_token_at) / (completion_tokens - 1)
            self.decode_s_per_token += SMOOTHING * (tpot - self.decode_s_per_token)
