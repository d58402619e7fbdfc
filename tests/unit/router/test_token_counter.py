"""Prompt token counts with the embedded model's tokenizer and chat template."""

from __future__ import annotations

import pytest

from router.token_counter import PromptTokenCounter


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


async def test_a_size_has_its_estimate_at_once_and_its_exact_count_after(embedded_model_dir):
    counter = PromptTokenCounter(str(embedded_model_dir))
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    size = counter.size_chat(messages)
    assert size.estimate >= 1
    assert await size.exact == await counter.count_chat(messages)


async def test_the_estimate_learns_the_tokens_per_byte_of_what_it_counts(embedded_model_dir):
    counter = PromptTokenCounter(str(embedded_model_dir))
    digits = "1234567890" * 150  # a digit is a token: four times the tokens of English text per byte
    exact = await counter.count_completion(digits)
    first = counter.size_completion(digits).estimate
    assert first < exact / 2
    for _ in range(20):
        await counter.count_completion(digits)
    assert abs(counter.size_completion(digits).estimate - exact) < exact * 0.05


async def test_a_prompt_of_token_ids_is_sized_without_a_count(counter):
    size = counter.size_completion([[1, 2], [3, 4, 5]])
    assert await size.exact == size.estimate == 3
    ids = counter.size_completion(list(range(7)))
    assert ids.exact.done() and ids.estimate == 7


async def test_counts_agree_with_the_tokenizers_own_encode(counter, embedded_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(embedded_model_dir))
    text = "Routing counts what the engine sees: 32,768 tokens, émigré, 東京, 🙂.\n" * 40
    assert await counter.count_completion(text) == len(tokenizer.encode(text))
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                             add_generation_prompt=True)
    chat = await counter.count_chat([{"role": "user", "content": text}])
    assert chat == len(tokenizer.encode(rendered, add_special_tokens=False))
