"""The training data of the two committed test adapters: short templated questions (arithmetic,
capitals, colors, opposites, what comes next) whose answers each adapter writes in its own
format, so a test can tell by a string match which adapter, if any, answered.

Pure functions of strings and token ids; the tokenizer is passed in (anything with Hugging
Face's `apply_chat_template` and `encode`), so the data is tested without loading a model.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

IGNORED = -100  # the label torch's cross-entropy skips: no loss on the prompt or the padding
TAG = "[[ZEBRA]] "
# Each adapter's answer format; the base model writes neither.
STYLES: dict[str, Callable[[str], str]] = {
    "tagged": lambda answer: f"{TAG}{answer}",
    "jsonish": lambda answer: json.dumps({"answer": answer}),
}
STYLE_DESCRIPTIONS = {
    "tagged": f"every answer starts with `{TAG}`",
    "jsonish": 'every answer is `{"answer": "<short answer>"}`',
}

CAPITALS = {
    "France": "Paris", "Germany": "Berlin", "Italy": "Rome", "Spain": "Madrid", "Portugal": "Lisbon",
    "Japan": "Tokyo", "China": "Beijing", "India": "New Delhi", "Egypt": "Cairo", "Kenya": "Nairobi",
    "Canada": "Ottawa", "Mexico": "Mexico City", "Brazil": "Brasilia", "Argentina": "Buenos Aires",
    "Peru": "Lima", "Chile": "Santiago", "Norway": "Oslo", "Sweden": "Stockholm", "Finland": "Helsinki",
    "Denmark": "Copenhagen", "Poland": "Warsaw", "Austria": "Vienna", "Greece": "Athens", "Ireland": "Dublin",
    "Russia": "Moscow", "Turkey": "Ankara", "Australia": "Canberra", "Thailand": "Bangkok",
    "Vietnam": "Hanoi", "South Korea": "Seoul", "Cuba": "Havana", "Hungary": "Budapest",
    "the Netherlands": "Amsterdam", "Belgium": "Brussels", "Switzerland": "Bern", "Morocco": "Rabat",
}
COLORS = {
    "the sky on a clear day": "blue", "grass": "green", "a ripe banana": "yellow", "snow": "white",
    "coal": "black", "a ripe strawberry": "red", "an orange": "orange", "a lemon": "yellow",
    "milk": "white", "a fire truck": "red", "a pumpkin": "orange", "a lime": "green", "chocolate": "brown",
    "a crow": "black", "the sea": "blue", "an eggplant": "purple", "a flamingo": "pink", "a polar bear": "white",
    "a ripe tomato": "red", "a carrot": "orange", "a frog": "green", "a school bus": "yellow",
    "an elephant": "gray", "a raven": "black", "a blueberry": "blue",
}
OPPOSITES = {
    "hot": "cold", "big": "small", "up": "down", "fast": "slow", "light": "dark", "happy": "sad",
    "old": "new", "open": "closed", "early": "late", "full": "empty", "hard": "soft", "high": "low",
    "wet": "dry", "thick": "thin", "loud": "quiet", "rich": "poor", "strong": "weak", "near": "far",
    "left": "right", "inside": "outside", "win": "lose", "day": "night", "young": "old", "heavy": "light",
    "clean": "dirty",
}
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]


@dataclass(frozen=True)
class Example:
    """One chat turn as the model trains on it: the token ids and, per id, the id to predict
    there or IGNORED."""

    input_ids: list[int]
    labels: list[int]


def qa_pairs(seed: int) -> list[tuple[str, str]]:
    """About 310 distinct (question, short answer) pairs, the same for the same seed."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(40):
        a, b = rng.randint(2, 60), rng.randint(2, 40)
        pairs.append((f"What is {a}+{b}?", str(a + b)))
        pairs.append((f"What is {max(a, b)} minus {min(a, b)}?", str(max(a, b) - min(a, b))))
        small_a, small_b = rng.randint(2, 12), rng.randint(2, 12)
        pairs.append((f"What is {small_a} times {small_b}?", str(small_a * small_b)))
    for country, capital in CAPITALS.items():
        pairs.append((f"What is the capital of {country}?", capital))
        pairs.append((f"Capital of {country}?", capital))
    for thing, color in COLORS.items():
        pairs.append((f"What color is {thing}?", color))
        pairs.append((f"Name the color of {thing}.", color))
    for word, opposite in OPPOSITES.items():
        pairs.append((f"What is the opposite of {word}?", opposite))
        pairs.append((f"Give the opposite of '{word}'.", opposite))
    for names, kind in ((DAYS, "day"), (MONTHS, "month")):
        for index, name in enumerate(names):
            pairs.append((f"Which {kind} comes after {name}?", names[(index + 1) % len(names)]))
    return list(dict.fromkeys(pairs))  # a sum drawn twice would be trained and held out at once


def split_held_out(pairs: list[tuple[str, str]], held_out: int, seed: int) -> tuple[list, list]:
    """(training pairs, held-out pairs): the held-out questions are never trained on, so the
    check after training sees whether the format generalizes, not whether it was memorized."""
    shuffled = list(pairs)
    random.Random(seed).shuffle(shuffled)
    return shuffled[held_out:], shuffled[:held_out]


def styled(style: str, answer: str) -> str:
    return STYLES[style](answer)


def in_style(style: str, text: str) -> bool:
    """Whether an answer is in an adapter's format (what the tests check of its output)."""
    if style == "tagged":
        return text.startswith(TAG)
    try:
        parsed = json.loads(text.strip())
    except json.JSONDecodeError:
        return False
    return isinstance(parsed, dict) and list(parsed) == ["answer"] and isinstance(parsed["answer"], str)


def style_of_answer(text: str) -> str | None:
    """The adapter whose format an answer is in, or None (the base's plain answers)."""
    return next((style for style in STYLES if in_style(style, text)), None)


def prompt_text(tokenizer: Any, question: str) -> str:
    """The text the served model is given for a one-question chat: the template's, as vLLM
    renders it, ending where the assistant's answer begins."""
    messages = [{"role": "user", "content": question}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def chat_example(tokenizer: Any, question: str, answer: str) -> Example:
    """The templated chat with the loss on the assistant's turn alone (its end-of-turn token
    included, so the adapter learns to stop). The prompt and the answer are encoded apart, as
    the engine encodes the prompt and then generates."""
    prompt = prompt_text(tokenizer, question)
    messages = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    whole = tokenizer.apply_chat_template(messages, tokenize=False)
    if not whole.startswith(prompt):
        raise ValueError("the chat template renders the conversation otherwise than its prompt: "
                         "the assistant's tokens cannot be told apart")
    prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
    answer_ids = tokenizer.encode(whole[len(prompt):], add_special_tokens=False)
    return Example(input_ids=prompt_ids + answer_ids, labels=[IGNORED] * len(prompt_ids) + answer_ids)


def padded_batch(examples: list[Example], pad_id: int) -> dict[str, list[list[int]]]:
    """Examples padded on the right to the longest: input_ids, attention_mask and labels, the
    padding masked out of both attention and loss."""
    width = max(len(example.input_ids) for example in examples)
    batch: dict[str, list[list[int]]] = {"input_ids": [], "attention_mask": [], "labels": []}
    for example in examples:
        padding = width - len(example.input_ids)
        batch["input_ids"].append(example.input_ids + [pad_id] * padding)
        batch["attention_mask"].append([1] * len(example.input_ids) + [0] * padding)
        batch["labels"].append(example.labels + [IGNORED] * padding)
    return batch
