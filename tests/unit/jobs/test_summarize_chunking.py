"""Summarize job: token windows, the chunk budget, grouping for combining, and the tokenizer cut."""

from __future__ import annotations

import pytest

from core.config_base import ConfigError
from jobs.summarize.chunking import (
    SAFETY_MARGIN_TOKENS,
    SEPARATOR_TOKENS,
    Chunker,
    ChunkPlan,
    combine_groups,
    plan_chunks,
    token_spans,
)


@pytest.mark.parametrize(
    ("n_tokens", "size", "overlap", "spans"),
    [
        (0, 10, 2, []),
        (1, 10, 2, [(0, 1)]),
        (9, 10, 2, [(0, 9)]),
        # Exactly at the limit: one chunk, never a second made only of overlap.
        (10, 10, 2, [(0, 10)]),
        # One token over: a second window starting `overlap` before the first one's end.
        (11, 10, 2, [(0, 10), (8, 11)]),
        (18, 10, 2, [(0, 10), (8, 18)]),
        (19, 10, 2, [(0, 10), (8, 18), (16, 19)]),
        (25, 10, 0, [(0, 10), (10, 20), (20, 25)]),
    ],
)
def test_token_windows(n_tokens, size, overlap, spans):
    assert token_spans(n_tokens, size, overlap) == spans


@pytest.mark.parametrize("n_tokens", [10, 11, 57, 1000, 1001])
def test_windows_cover_every_token_and_overlap_exactly(n_tokens):
    spans = token_spans(n_tokens, 100, 7)
    assert spans[0][0] == 0 and spans[-1][1] == n_tokens
    assert all(end - start <= 100 for start, end in spans)
    assert all(previous[1] - current[0] == 7 for previous, current in zip(spans, spans[1:]))


def test_an_overlap_as_large_as_the_chunk_never_moves_and_is_refused():
    with pytest.raises(ValueError, match="overlap 10 must be under the chunk size 10"):
        token_spans(50, 10, 10)


def test_combine_groups_fill_the_budget_in_order():
    # Each summary costs its tokens plus a separator.
    assert combine_groups([40, 40, 40, 40, 40], 2 * (40 + SEPARATOR_TOKENS)) == [[0, 1], [2, 3], [4]]
    assert combine_groups([10, 10, 10], 1000) == [[0, 1, 2]]
    assert combine_groups([], 100) == []


def test_the_chunk_size_is_what_the_context_leaves():
    plan = plan_chunks(2048, 128, template_tokens=40, combine_template_tokens=50, chunk_tokens=None, overlap_tokens=64)
    assert plan == ChunkPlan(2048 - 128 - 40 - SAFETY_MARGIN_TOKENS, 64, 2048 - 128 - 50 - SAFETY_MARGIN_TOKENS)
    assert plan_chunks(2048, 128, 40, 50, chunk_tokens=500, overlap_tokens=64).chunk_tokens == 500


def test_a_chunk_size_that_cannot_fit_names_the_arithmetic():
    with pytest.raises(ConfigError, match="chunk_tokens 2000 does not fit: context 2048 - max_tokens 128"):
        plan_chunks(2048, 128, 40, 50, chunk_tokens=2000, overlap_tokens=64)
    with pytest.raises(ConfigError, match="not more than overlap_tokens 64"):
        plan_chunks(300, 128, 100, 50, chunk_tokens=None, overlap_tokens=64)


@pytest.fixture(scope="module")
def chunker(embedded_model_dir):
    return Chunker(str(embedded_model_dir))


def test_chunks_are_the_documents_own_text_cut_at_token_boundaries(chunker):
    text = " ".join(f"Sentence number {i} says something about item {i * 7}." for i in range(60))
    tokens = chunker.count(text)
    plan = ChunkPlan(chunk_tokens=tokens // 3, overlap_tokens=10, combine_budget_tokens=1000)
    counted, chunks = chunker.split(text, plan)
    assert counted == tokens and len(chunks) == len(token_spans(tokens, plan.chunk_tokens, 10)) >= 3
    assert all(chunk in text for chunk in chunks)  # exact slices, nothing re-decoded
    assert text.startswith(chunks[0]) and text.endswith(chunks[-1])
    assert all(chunker.count(chunk) <= plan.chunk_tokens + 1 for chunk in chunks)
    # Consecutive chunks share the overlap: the next one starts inside the previous one.
    for previous, current in zip(chunks, chunks[1:]):
        assert text.index(current) < text.index(previous) + len(previous)


def test_a_document_exactly_at_the_limit_is_one_chunk(chunker):
    text = "The quick brown fox jumps over the lazy dog. " * 20
    tokens = chunker.count(text)
    assert chunker.split(text, ChunkPlan(tokens, 8, 1000)) == (tokens, [text])
    assert len(chunker.split(text, ChunkPlan(tokens - 1, 8, 1000))[1]) == 2


def test_prompt_counts_include_the_chat_template(chunker):
    messages = [{"role": "user", "content": "Summarize this."}]
    assert chunker.count_prompt(messages) > chunker.count("Summarize this.") + 5
