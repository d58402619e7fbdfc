"""Streams in flight when a server is stopped, and how each ended: answered in full, refused
with a status, closed cleanly by the server, or hung (no byte for `read_timeout_s`: what a
stop must never do to a client)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass

import httpx

OUTCOMES = ("answered", "refused", "closed", "hung")


@dataclass
class StreamEnd:
    outcome: str = "pending"
    detail: str = ""


class StreamsInFlight:
    """`count` chat streams of `max_tokens` each, sent at once; `wait_started` returns once each
    has its first token, so that a stop lands while all are mid-way."""

    def __init__(self, url: str, model: str, count: int, max_tokens: int, *, read_timeout_s: float = 60.0) -> None:
        self._url = f"{url.rstrip('/')}/v1/chat/completions"
        self._body = {"model": model, "messages": [{"role": "user", "content": "Tell me a long story."}],
                      "max_tokens": max_tokens, "stream": True, "ignore_eos": True}
        self._read_timeout_s = read_timeout_s
        self.ends = [StreamEnd() for _ in range(count)]
        self._first_tokens = [threading.Event() for _ in range(count)]
        self._threads = [threading.Thread(target=self._stream, args=(index,), daemon=True) for index in range(count)]
        for thread in self._threads:
            thread.start()

    def wait_started(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        return all(event.wait(max(0.0, deadline - time.monotonic())) for event in self._first_tokens)

    def wait_ended(self, timeout_s: float) -> dict[str, int]:
        """How many streams ended each way; one still open after `timeout_s` counts as hung."""
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        for end in self.ends:
            if end.outcome == "pending":
                end.outcome, end.detail = "hung", f"still open {timeout_s:g} s after the stop"
        counts = Counter(end.outcome for end in self.ends)
        return {outcome: counts.get(outcome, 0) for outcome in OUTCOMES}

    def _stream(self, index: int) -> None:
        end = self.ends[index]
        timeout = httpx.Timeout(10.0, read=self._read_timeout_s)
        try:
            with httpx.stream("POST", self._url, json=self._body, timeout=timeout) as response:
                if response.status_code != 200:
                    response.read()
                    end.outcome, end.detail = "refused", f"{response.status_code} {response.text[:200]}"
                    self._first_tokens[index].set()
                    return
                done, error = False, ""
                for line in response.iter_lines():
                    if line.startswith("data: "):
                        self._first_tokens[index].set()
                        done = done or line == "data: [DONE]"
                        error = error or (line[6:206] if line.startswith('data: {"error"') else "")
                # A stream that ends with an error event was closed by the server, cleanly.
                end.outcome = "answered" if done and not error else "closed"
                end.detail = error or ("" if done else "the stream ended before [DONE]")
        except httpx.ReadTimeout:
            end.outcome, end.detail = "hung", f"no byte for {self._read_timeout_s:g} s"
        except httpx.HTTPError as error:
            end.outcome, end.detail = "closed", f"{type(error).__name__}: {error}"
        finally:
            self._first_tokens[index].set()
