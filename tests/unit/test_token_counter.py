"""Prompt token counts with the embedded model's tokenizer and chat template."""

from __future__ import annotations

import pytest

from serving.token_counter import PromptTokenCounter


@pytest.fixture(scope="module")
def counter(embedded_model_dir):
    counter = PromptTokenCounter(str(embedded_model_dir))
    counter.load()
    return counter


async def test_chat_count_includes_the_template(counter):
    plain = await counter.count_completion("What is the capital of France?")
    chat = await counter.count_chat([{"role": "user", "content": "What is the capital of France?"}])
    assert chat > plain + 5  # the system prompt and role markers of SmolLM2's template


async def test_content_parts_count_like_a_string(counter):
    as_text = await counter.count_chat([{"role": "user", "content": "hello there"}])
    as_parts = await counter.count_chat(
        [{"role": "user", "content": [{"type": "text", "text": "hello "}, {"type": "text", "text": "there"}]}]
    )
    assert as_parts == as_text


async def test_completion_prompt_forms(counter):
    assert await counter.count_completion([1, 2, 3, 4]) == 4
    longest = await counter.count_completion(["short", "a much longer prompt than the first one"])
    assert longest == await counter.count_completion("a much longer prompt than the first one")
    assert await counter.count_completion("word " * 1000) >= 1000
