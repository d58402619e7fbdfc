"""Prompt sets: real documentation text, synthetic lengths, a shared prefix, or a JSONL file."""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Prompt:
    messages: list[dict[str, str]]
    max_tokens: int
    kind: str  # "short" or "long": what the set meant it to be, for per-kind figures
    scenario: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class DatasetError(ValueError):
    """A prompt set that cannot be built or read, with the reason."""


def _user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def documentation_paragraphs(min_words: int = 25) -> list[str]:
    """Human-written prose from the long descriptions (READMEs) of installed packages.

    They ship with the project's dependencies, so the set needs no download and is the same
    on every machine with the same lock; sorted for the same order everywhere.
    """
    paragraphs = set()
    for dist in metadata.distributions():
        text = dist.metadata.get_payload() or dist.metadata.get("Description") or ""
        for block in re.split(r"\n\s*\n", text):
            block = " ".join(block.split())
            # Prose only: skip code, tables, badges, headings and link lists.
            if len(block.split()) >= min_words and not re.search(r"[`|<>{}\[\]#=]|https?://", block):
                paragraphs.add(block)
    if not paragraphs:
        raise DatasetError("no installed package carries a long description to build prompts from")
    return sorted(paragraphs)


def docs_dataset(
    count: int, *, long_fraction: float = 0.2, long_words: int = 1200,
    short_max_tokens: int = 64, long_max_tokens: int = 128, seed: int = 0,
) -> list[Prompt]:
    """Short questions about one paragraph and long documents to summarize, mixed."""
    rng = random.Random(seed)
    paragraphs = documentation_paragraphs()
    prompts = []
    for _ in range(count):
        if rng.random() < long_fraction:
            words: list[str] = []
            while len(words) < long_words:
                words.extend(rng.choice(paragraphs).split())
            document = " ".join(words[:long_words])
            prompts.append(Prompt(_user(f"Summarize this documentation in three sentences:\n\n{document}"), long_max_tokens, "long"))
        else:
            paragraph = rng.choice(paragraphs)
            prompts.append(Prompt(_user(f"{paragraph}\n\nIn one sentence, what is this about?"), short_max_tokens, "short"))
    return prompts


def random_dataset(
    count: int, *, min_words: int = 16, max_words: int = 512, max_tokens: int = 64,
    threshold_words: int = 700, seed: int = 0,
) -> list[Prompt]:
    """Synthetic prompts of uniformly random length, made of documentation words."""
    rng = random.Random(seed)
    vocabulary = sorted({w for p in documentation_paragraphs() for w in p.split()})
    prompts = []
    for _ in range(count):
        length = rng.randint(min_words, max_words)
        text = " ".join(rng.choice(vocabulary) for _ in range(length))
        prompts.append(Prompt(_user(text), max_tokens, "long" if length > threshold_words else "short"))
    return prompts


def shared_prefix_dataset(
    count: int, *, prefix_words: int = 400, max_tokens: int = 32, seed: int = 0
) -> list[Prompt]:
    """One long shared system prompt and distinct short questions: what prefix caching serves."""
    rng = random.Random(seed)
    paragraphs = documentation_paragraphs()
    prefix_words_list: list[str] = []
    for paragraph in paragraphs:
        prefix_words_list.extend(paragraph.split())
        if len(prefix_words_list) >= prefix_words:
            break
    system = "Answer questions about this documentation:\n\n" + " ".join(prefix_words_list[:prefix_words])
    return [
        Prompt(
            [{"role": "system", "content": system},
             {"role": "user", "content": f"What does this say about: {rng.choice(paragraphs)[:120]}?"}],
            max_tokens, "short",
        )
        for _ in range(count)
    ]


def jsonl_dataset(path: Path, *, default_max_tokens: int = 64) -> list[Prompt]:
    """One prompt per line: {"prompt": str} or {"messages": [...]}, optional max_tokens, scenario."""
    prompts = []
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as error:
        raise DatasetError(f"{path}: cannot read: {error}") from error
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise DatasetError(f"{path}:{number}: not JSON: {error}") from error
        if not isinstance(row, dict) or not ({"prompt", "messages"} & set(row)):
            raise DatasetError(f"{path}:{number}: needs a 'prompt' string or a 'messages' list")
        messages = row["messages"] if "messages" in row else _user(str(row["prompt"]))
        prompts.append(Prompt(messages, int(row.get("max_tokens", default_max_tokens)),
                              str(row.get("kind", "short")), row.get("scenario")))
    if not prompts:
        raise DatasetError(f"{path}: no prompts")
    return prompts


DATASETS = ("docs", "questions", "random", "shared-prefix", "jsonl")


def load_dataset(name: str, count: int, *, path: Path | None = None, seed: int = 0) -> list[Prompt]:
    """`questions` is `docs` without the long documents: chat traffic for the short pool."""
    if name == "docs":
        return docs_dataset(count, seed=seed)
    if name == "questions":
        return docs_dataset(count, long_fraction=0.0, seed=seed)
    if name == "random":
        return random_dataset(count, seed=seed)
    if name == "shared-prefix":
        return shared_prefix_dataset(count, seed=seed)
    if name == "jsonl":
        if path is None:
            raise DatasetError("the jsonl dataset needs --dataset-path")
        prompts = jsonl_dataset(path)
        return [prompts[i % len(prompts)] for i in range(count)]
    raise DatasetError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")
