"""Splitting documents by tokens of the served model, and grouping partial summaries to combine.

The window arithmetic is pure (`token_spans`, `combine_groups`); `Chunker` applies it to text
with the model's own tokenizer, cutting the original text at token boundaries (character
offsets), so a chunk is exactly the document's text, never a re-decoded approximation.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.config_base import ConfigError

# Room left in each request beyond the counted template: the router's own count can differ by
# a few tokens (whitespace normalization, the generation prompt), and a request that misses
# the context by one token is refused outright.
SAFETY_MARGIN_TOKENS = 16
# Tokens between two summaries in a combine prompt (the blank line that separates them).
SEPARATOR_TOKENS = 2


def token_spans(n_tokens: int, chunk_tokens: int, overlap_tokens: int) -> list[tuple[int, int]]:
    """[start, end) token windows covering `n_tokens`: each `chunk_tokens` long (the last may be
    shorter), each starting `overlap_tokens` before the previous one ended. A document at or
    under `chunk_tokens` is one window; none is ever only the previous window's overlap."""
    if overlap_tokens >= chunk_tokens:
        raise ValueError(f"overlap {overlap_tokens} must be under the chunk size {chunk_tokens}")
    if n_tokens <= 0:
        return []
    spans, start = [], 0
    while True:
        end = min(start + chunk_tokens, n_tokens)
        spans.append((start, end))
        if end == n_tokens:
            return spans
        start = end - overlap_tokens


def combine_groups(lengths: list[int], budget_tokens: int) -> list[list[int]]:
    """Consecutive groups (as indices) of partial summaries whose lengths, with separators, fit
    `budget_tokens`. Each round of combining at least halves the count as long as any two
    summaries fit together, which the config guarantees (max_tokens under a third of the context)."""
    groups: list[list[int]] = []
    current: list[int] = []
    used = 0
    for index, length in enumerate(lengths):
        need = length + SEPARATOR_TOKENS
        if current and used + need > budget_tokens:
            groups.append(current)
            current, used = [], 0
        current.append(index)
        used += need
    if current:
        groups.append(current)
    return groups


@dataclass(frozen=True)
class ChunkPlan:
    """How many tokens of text one request may carry, the template and the answer set aside."""

    chunk_tokens: int
    overlap_tokens: int
    combine_budget_tokens: int


def plan_chunks(
    context_tokens: int, max_tokens: int, template_tokens: int, combine_template_tokens: int,
    chunk_tokens: int | None, overlap_tokens: int,
) -> ChunkPlan:
    """The chunk size: as configured, or all the context leaves; a configured size that would
    not fit is a ConfigError with the arithmetic in it."""
    room = context_tokens - max_tokens - template_tokens - SAFETY_MARGIN_TOKENS
    combine_room = context_tokens - max_tokens - combine_template_tokens - SAFETY_MARGIN_TOKENS
    if chunk_tokens is not None and chunk_tokens > room:
        raise ConfigError(
            f"chunking.chunk_tokens {chunk_tokens} does not fit: context {context_tokens} - max_tokens "
            f"{max_tokens} - prompt template {template_tokens} - margin {SAFETY_MARGIN_TOKENS} leaves {room}"
        )
    size = chunk_tokens or room
    if size <= overlap_tokens:
        raise ConfigError(
            f"chunking leaves {size} tokens of text per chunk, not more than overlap_tokens {overlap_tokens}; "
            "raise chunking.context_tokens or lower prompt.max_tokens"
        )
    if combine_room < 2 * (max_tokens + SEPARATOR_TOKENS):
        raise ConfigError(
            f"prompt.combine_template leaves {combine_room} tokens, under two summaries of max_tokens {max_tokens}"
        )
    return ChunkPlan(size, overlap_tokens, combine_room)


class Chunker:
    """Counts and splits text with the model's tokenizer (loaded on first use)."""

    def __init__(self, tokenizer_source: str) -> None:
        self._source = tokenizer_source
        self._tokenizer = None

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self._source)
        return self._tokenizer

    def count(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def count_prompt(self, messages: list[dict[str, str]]) -> int:
        """Tokens of a chat prompt as the engine sees it: template and generation prompt included."""
        try:
            text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except (ValueError, TypeError, KeyError):  # no chat template: the contents are the prompt
            text = "\n".join(message["content"] for message in messages)
        return self.count(text)

    def split(self, text: str, plan: ChunkPlan) -> tuple[int, list[str]]:
        """The text's token count and its chunks (one chunk, the text itself, when it fits)."""
        if not self.tokenizer.is_fast:  # no character offsets: cut the token ids and decode them
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            spans = token_spans(len(ids), plan.chunk_tokens, plan.overlap_tokens)
            if len(spans) <= 1:
                return len(ids), [text] if spans else []
            return len(ids), [self.tokenizer.decode(ids[start:end]) for start, end in spans]
        offsets = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        spans = token_spans(len(offsets), plan.chunk_tokens, plan.overlap_tokens)
        if len(spans) <= 1:
            return len(offsets), [text] if spans else []
        # A chunk runs from its first token's first character to its last token's last one.
        return len(offsets), [text[offsets[start][0]:offsets[end - 1][1]] for start, end in spans]
