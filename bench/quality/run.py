"""One pool's quality, cost and first-token time, measured through the running app.

Every request is pinned to the pool (`x-trilemma-pool`), and an answer from another pool fails
the run rather than score the wrong one. What the pool costs is what the app billed for these
requests (`usage.cost_usd`: the engine's busy time at the pool's price), per 1M tokens of
prompt and answer; its first-token times are those of the task's streamed questions, one
at a time, and its speed the output tokens/s of a burst of completions sent at once.
"""

from __future__ import annotations

import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from bench.metrics import percentile
from bench.quality.scores import Task, is_right, perplexity, prompt_nll
from core import wire

# Long enough for "The capital of France is Paris."; the task asks for one word.
ANSWER_MAX_TOKENS = 12
# Per completion of the speed burst.
BURST_TOKENS = 64
# Open answers, whose lengths say what a token cap would cut of them.
SUMMARY_REQUEST = "Summarize this passage in a few sentences.\n\n{passage}"
TIMEOUT_S = 600.0


class PoolClient:
    """Requests to one pool of the app, with the tokens and dollars they were billed."""

    def __init__(self, url: str, model: str, pool: str, api_key: str | None, scenario: str | None = None) -> None:
        self.url, self.model, self.pool = url.rstrip("/"), model, pool
        self.headers = {wire.POOL_HEADER: pool, **({"Authorization": f"Bearer {api_key}"} if api_key else {}),
                        **({wire.SCENARIO_HEADER: scenario} if scenario else {})}
        self.tokens = 0
        self.cost_usd: float | None = 0.0

    def bill(self, usage: dict[str, Any] | None) -> None:
        usage = usage or {}
        self.tokens += usage.get("total_tokens") or 0
        cost = usage.get("cost_usd")
        self.cost_usd = None if cost is None or self.cost_usd is None else self.cost_usd + cost

    def _check(self, response: httpx.Response) -> None:
        if response.status_code != 200:
            raise ValueError(f"pool {self.pool!r}: HTTP {response.status_code}: {response.read()[:300]!r}")
        served = response.headers.get(wire.POOL_HEADER)
        if served != self.pool:
            raise ValueError(f"a request pinned to pool {self.pool!r} was served by {served!r}")

    def passage_nll(self, passage: str) -> tuple[float, int]:
        body = {"model": self.model, "prompt": passage, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 0}
        response = httpx.post(f"{self.url}/v1/completions", json=body, headers=self.headers, timeout=TIMEOUT_S)
        self._check(response)
        answer = response.json()
        self.bill(answer.get("usage"))
        return prompt_nll(answer["choices"][0]["prompt_logprobs"])

    def ask(self, question: str) -> tuple[str, float]:
        """The greedy reply to `question` and the seconds to its first token."""
        body = {"model": self.model, "messages": [{"role": "user", "content": question}], "temperature": 0,
                "max_tokens": ANSWER_MAX_TOKENS, "stream": True, "stream_options": {"include_usage": True}}
        started, first_at, parts = time.perf_counter(), None, []
        with httpx.stream("POST", f"{self.url}/v1/chat/completions", json=body, headers=self.headers,
                          timeout=TIMEOUT_S) as response:
            self._check(response)
            for line in response.iter_lines():
                if not line.startswith("data: {"):
                    continue
                event = json.loads(line[len("data: "):])
                if "error" in event:
                    raise ValueError(f"pool {self.pool!r}: the answer failed: {event['error']}")
                for choice in event.get("choices") or ():
                    text = (choice.get("delta") or {}).get("content")
                    if text:
                        first_at = first_at or time.perf_counter()
                        parts.append(text)
                if event.get("usage") and not event.get("choices"):
                    self.bill(event["usage"])
        return "".join(parts), (first_at or time.perf_counter()) - started


    def answer_tokens(self, prompt: str, max_tokens: int) -> int:
        """The tokens of the greedy chat answer to `prompt`, up to `max_tokens`. Not billed into the
        pool's $ per 1M tokens, which stays comparable with runs that did not measure answers."""
        body = {"model": self.model, "messages": [{"role": "user", "content": prompt}], "temperature": 0,
                "max_tokens": max_tokens}
        response = httpx.post(f"{self.url}/v1/chat/completions", json=body, headers=self.headers, timeout=TIMEOUT_S)
        self._check(response)
        return (response.json().get("usage") or {}).get("completion_tokens") or 0

    def complete(self, prompt: str, max_tokens: int) -> int:
        """A completion of exactly `max_tokens` tokens; the tokens it generated."""
        body = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
        response = httpx.post(f"{self.url}/v1/completions", json=body, headers=self.headers, timeout=TIMEOUT_S)
        self._check(response)
        usage = response.json().get("usage")
        self.bill(usage)
        return (usage or {}).get("completion_tokens") or 0


def burst_tokens_per_s(client: PoolClient, passages: list[str], in_flight: int) -> float:
    """Output tokens/s of `in_flight` completions sent at once: the pool's speed at a batch."""
    prompts = [passages[i % len(passages)][:400] for i in range(in_flight)]
    started = time.perf_counter()
    with ThreadPoolExecutor(in_flight) as pool:
        tokens = sum(pool.map(lambda prompt: client.complete(prompt, BURST_TOKENS), prompts))
    return tokens / (time.perf_counter() - started)


def score_pool(client: PoolClient, passages: list[str], questions: list[Task], in_flight: int = 8,
               answer_max_tokens: int = 0) -> dict[str, Any]:
    """`answer_max_tokens` > 0 also measures how long the pool's summaries of the passages run,
    up to that many tokens: what a token cap would cut (0: not measured)."""
    client.ask(questions[0].question)  # uncounted: a first request may pay for the engine's warm-up
    client.tokens, client.cost_usd = 0, 0.0
    nll, scored = 0.0, 0
    for passage in passages:
        passage_nll, passage_tokens = client.passage_nll(passage)
        nll, scored = nll + passage_nll, scored + passage_tokens
    replies = [(task, *client.ask(task.question)) for task in questions]
    answer_tokens = [client.answer_tokens(SUMMARY_REQUEST.format(passage=passage), answer_max_tokens)
                     for passage in passages] if answer_max_tokens > 0 else []
    tokens_per_s = burst_tokens_per_s(client, passages, in_flight)
    ttft_ms = [seconds * 1000 for _, _, seconds in replies]
    right = sum(is_right(reply, task) for task, reply, _ in replies)
    return {
        "pool": client.pool, "perplexity": perplexity(nll, scored), "scored_tokens": scored,
        "task_right": right, "task_total": len(questions), "task_score": right / len(questions),
        "usd_per_1m_tokens": None if client.cost_usd is None or not client.tokens
        else client.cost_usd / client.tokens * 1e6,
        "billed_tokens": client.tokens, "billed_usd": client.cost_usd,
        "burst_in_flight": in_flight, "burst_output_tokens_per_s": tokens_per_s,
        "answer_tokens": answer_tokens, "answer_max_tokens": answer_max_tokens,
        "ttft_ms": {"p50": statistics.median(ttft_ms), "p99": percentile(ttft_ms, 99)},
        "wrong": [{"question": task.question, "reply": reply} for task, reply, _ in replies
                  if not is_right(reply, task)][:10],
    }
