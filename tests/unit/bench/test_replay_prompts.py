"""Replay prompts: exactly the trace's token counts with the embedded model's tokenizer, shared prefixes shared."""

from __future__ import annotations

import pytest

from bench.replay.prompts import PromptBuilder, PromptLengthError
from bench.replay.trace import TracedRequest


@pytest.fixture(scope="module")
def tokenizer(embedded_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(embedded_model_dir))


@pytest.fixture(scope="module")
def builder(tokenizer):
    return PromptBuilder(tokenizer, block_size=64)


def _request(tokens: int, blocks: tuple[int, ...] = (), line: int = 1) -> TracedRequest:
    return TracedRequest(line, 0.0, tokens, 16, blocks)


def _chat_ids(tokenizer, messages) -> list[int]:
    # As vLLM counts a chat prompt: the rendered template, encoded without added special tokens.
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer.encode(text, add_special_tokens=False)


@pytest.mark.parametrize("tokens", [1, 2, 7, 100, 513, 1500])
@pytest.mark.parametrize("blocks", [(), (3, 4), tuple(range(30))])
def test_a_completion_prompt_has_exactly_the_traced_tokens(builder, tokenizer, tokens, blocks):
    text = builder.completion_prompt(_request(tokens, blocks))
    assert len(tokenizer(text).input_ids) == tokens
    assert builder.count_completion(text) == tokens


@pytest.mark.parametrize("extra", [0, 1, 2, 7, 100, 513, 1500])
@pytest.mark.parametrize("blocks", [(), (3, 4)])
def test_a_chat_prompt_has_exactly_the_traced_tokens(builder, tokenizer, extra, blocks):
    tokens = builder.chat_floor_tokens + extra
    messages = builder.chat_messages(_request(tokens, blocks))
    assert [m["role"] for m in messages] == ["user"]
    assert len(_chat_ids(tokenizer, messages)) == tokens
    assert builder.count_chat(messages) == tokens


def test_a_chat_prompt_below_the_templates_own_tokens_is_the_shortest(builder, tokenizer):
    # SmolLM2's template brings a system prompt of its own: some 30 tokens.
    assert 20 < builder.chat_floor_tokens < 60
    for tokens in (1, builder.chat_floor_tokens - 1):
        messages = builder.chat_messages(_request(tokens))
        assert len(_chat_ids(tokenizer, messages)) == builder.chat_floor_tokens
        assert len(messages[0]["content"].split()) == 1
    assert builder.completion_floor_tokens == 1  # SmolLM2 adds no BOS to a completion


def test_equal_leading_blocks_give_identical_leading_text(builder):
    # 64-token blocks of one-token words: a block is 64 words.
    a = builder.completion_prompt(_request(300, (1, 2, 3, 4, 5), line=1)).split()
    b = builder.completion_prompt(_request(200, (1, 2, 9, 10), line=2)).split()
    c = builder.completion_prompt(_request(300, (7, 2, 3, 4, 5), line=3)).split()
    assert a[:128] == b[:128]
    assert a[128:192] != b[128:192]
    assert a[:64] != c[:64] and a[64:256] == c[64:256]  # block 2 at the same place is the same text
    # Past its blocks a request has text of its own.
    d = builder.completion_prompt(_request(100, (1,), line=4)).split()
    e = builder.completion_prompt(_request(100, (1,), line=5)).split()
    assert d[:64] == e[:64] == a[:64] and d[64:] != e[64:]
    # A block cut short is the start of the whole block.
    assert builder.completion_prompt(_request(40, (1,), line=6)).split() == a[:40]


def test_equal_leading_blocks_give_identical_leading_chat_prompts(builder, tokenizer):
    a = _chat_ids(tokenizer, builder.chat_messages(_request(400, (1, 2, 3, 4, 5, 6), line=1)))
    b = _chat_ids(tokenizer, builder.chat_messages(_request(400, (1, 2, 8, 9, 10, 11), line=2)))
    c = _chat_ids(tokenizer, builder.chat_messages(_request(400, (), line=3)))
    head = next(i for i, (x, y) in enumerate(zip(a, c)) if x != y)  # the template's, up to the content
    assert 20 < head < builder.chat_floor_tokens
    assert next(i for i, (x, y) in enumerate(zip(a, b)) if x != y) == head + 128  # and two blocks


def test_the_same_seed_gives_the_same_text_and_another_seed_another(tokenizer, builder):
    request = _request(300, (1, 2))
    again = PromptBuilder(tokenizer, block_size=64)
    assert again.completion_prompt(request) == builder.completion_prompt(request)
    assert again.chat_messages(request) == builder.chat_messages(request)
    assert PromptBuilder(tokenizer, block_size=64, seed=1).completion_prompt(request) != builder.completion_prompt(request)
    assert builder.completion_prompt(_request(300, line=1)) != builder.completion_prompt(_request(300, line=2))


def test_a_block_size_per_call_overrides_the_builders(builder):
    request = _request(100, (1, 2))
    assert builder.completion_prompt(request, block_size=10).split()[:10] == builder.completion_prompt(
        _request(10, (1,)), block_size=10).split()
    with pytest.raises(ValueError, match="block_size must be at least 1"):
        builder.completion_prompt(request, block_size=0)


def test_many_prompts_are_built_exact(builder):
    # Not a timing assertion: it keeps the build's cost (one count per prompt) in the suite's time.
    for line in range(200):
        tokens = 50 + (line * 37) % 1200
        request = _request(tokens, tuple(range(line % 5)), line=line)
        assert builder.count_completion(builder.completion_prompt(request)) == tokens


def test_a_tokenizer_whose_words_merge_is_refused_by_name(tokenizer):
    class Merging:
        """The real tokenizer, but past the third word each word is two tokens: 50 is never hit."""

        def __init__(self, inner):
            self._inner = inner

        def __getattr__(self, name):
            return getattr(self._inner, name)

        def __call__(self, text, **kwargs):
            encoded = self._inner(text, **kwargs)
            if isinstance(text, str):
                encoded["input_ids"] = encoded["input_ids"] + encoded["input_ids"][3:]
            return encoded

    builder = PromptBuilder(Merging(tokenizer))
    builder.completion_prompt(_request(3))
    with pytest.raises(PromptLengthError, match="line 9: no prompt of exactly 50 tokens"):
        builder.completion_prompt(_request(50, line=9))
