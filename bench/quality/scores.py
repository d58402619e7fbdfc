"""What a pool's quality is measured on, and how each measurement is scored.

Perplexity is read from the engine's own log-probabilities of held-out text (`heldout.txt`:
passages written for this benchmark, after the embedded model was trained, so no model has
seen them): one request per passage, exact, and cheap (a prefill). The task has exact
answers (`tasks.jsonl`: capitals, small sums, opposites, everyday facts), asked greedily; a
reply is right when one of the item's answers is among its first words.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent
# A right answer is among this many words at the start of the reply: room for "The answer is".
ANSWER_WITHIN_WORDS = 8


@dataclass(frozen=True)
class Task:
    question: str
    answers: tuple[str, ...]


def heldout_passages() -> list[str]:
    return [passage.strip() for passage in (DATA / "heldout.txt").read_text().split("\n\n") if passage.strip()]


def tasks() -> list[Task]:
    lines = (DATA / "tasks.jsonl").read_text().splitlines()
    return [Task(item["question"], tuple(item["answers"])) for item in map(json.loads, filter(None, lines))]


def prompt_nll(prompt_logprobs: list[dict[str, Any] | None]) -> tuple[float, int]:
    """The negative log-likelihood of a prompt and its scored tokens, from vLLM's
    `prompt_logprobs` asked with 0 alternatives: per position a one-entry dict, the prompt's own
    token with its log-probability (None for the first token, which nothing precedes)."""
    nll, tokens = 0.0, 0
    for position in prompt_logprobs:
        if position is None:
            continue
        if len(position) != 1:
            raise ValueError(f"expected the prompt token alone at each position (prompt_logprobs=0), got {len(position)}")
        (entry,) = position.values()
        nll -= entry["logprob"]
        tokens += 1
    return nll, tokens


def perplexity(nll: float, tokens: int) -> float:
    return math.exp(nll / tokens)


def words_of(reply: str) -> list[str]:
    return re.findall(r"[a-z0-9]+(?:-[a-z0-9]+)*", reply.lower())


def is_right(reply: str, task: Task) -> bool:
    first = words_of(reply)[:ANSWER_WITHIN_WORDS]
    return any(answer.lower() in first for answer in task.answers)
