"""Prompt texts of exactly a traced request's token count for the served model, shared prefixes shared."""

from __future__ import annotations

import random
import re
from collections import OrderedDict
from typing import Any, Callable

from bench.replay.trace import TracedRequest

# A vocabulary token that is a space and lowercase letters (byte-level BPE: `Ġword`): the
# pre-tokenizer of GPT-2 and Llama-3 style tokenizers splits text before each such space, so
# words put side by side never merge, and a text of n of them is n tokens.
SAFE_WORD = re.compile(r"[ \u0120\u2581][a-z]{2,}")
# The commonest of them (the lowest ids: the earliest merges). A tokenizer caches the words it
# has split; with few enough distinct words every one stays cached, which halves the time of
# counting a prompt, and 12 bits a token still make every text its own.
VOCABULARY_WORDS = 4096
MIN_VOCABULARY_WORDS = 256
# Passes that add or remove words to reach the count exactly; with a safe vocabulary the first
# count is already exact, and a tokenizer whose words merge after all fails here by name.
FIX_PASSES = 4
# Blocks kept built: a Mooncake trace has ~180,000 distinct ones, and most are used once.
CACHED_BLOCKS = 4096


class PromptLengthError(ValueError):
    """A prompt that cannot be made exactly its traced length with this tokenizer."""


class PromptBuilder:
    """Texts whose token count, for the served model's tokenizer, is exactly what the trace says.

    A prefix block id stands for a fixed text of `block_size` tokens (seeded by the seed and the
    id), so requests with equal leading ids share byte-identical leading text, as the trace's
    requests shared a prefix; a request's prompt is its blocks in order, the last cut to what
    remains, then text of its own (seeded by the seed and its line) if the blocks fall short.
    A chat prompt puts that text in one user message, after the template's fixed head.
    """

    def __init__(self, tokenizer: Any, *, block_size: int = 512, seed: int = 0) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be at least 1, got {block_size}")
        self._tokenizer = tokenizer
        self._block_size = block_size
        self._seed = seed
        self._words = _safe_words(tokenizer)
        self._blocks: OrderedDict[tuple[int, int], list[str]] = OrderedDict()
        probe = self._words[0]
        # What the tokenizer adds to a completion (a BOS) and the template to a chat message.
        self._completion_extra = self.count_completion(probe) - 1
        self.completion_floor_tokens = self._completion_extra + 1
        self.chat_floor_tokens = self.count_chat(_user(probe))
        self._chat_extra = self.chat_floor_tokens - 1

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @classmethod
    def for_model(cls, source: str, **kwargs: Any) -> PromptBuilder:
        """With the tokenizer of a model folder (or any name AutoTokenizer takes)."""
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(source), **kwargs)

    def count_completion(self, text: str) -> int:
        """Tokens of a /v1/completions prompt, special tokens (a BOS) included, as vLLM counts it."""
        return len(self._tokenizer(text).input_ids)

    def count_chat(self, messages: list[dict[str, str]]) -> int:
        """Tokens of a /v1/chat/completions prompt: the rendered template with the assistant's head."""
        ids = self._tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                  return_dict=False)
        return len(ids)

    def completion_prompt(self, request: TracedRequest, block_size: int | None = None) -> str:
        """A text of exactly `request.prompt_tokens` tokens; below `completion_floor_tokens`, one word."""
        words, rng = self._body(request, request.prompt_tokens - self._completion_extra, block_size)
        target = max(request.prompt_tokens, self.completion_floor_tokens)
        return self._exact(words, rng, request.line, target, lambda text: text, self.count_completion)

    def chat_messages(self, request: TracedRequest, block_size: int | None = None) -> list[dict[str, str]]:
        """One user message whose chat prompt is exactly `request.prompt_tokens` tokens; below
        `chat_floor_tokens` (the template's own tokens and one word), the shortest: one word."""
        words, rng = self._body(request, request.prompt_tokens - self._chat_extra, block_size)
        target = max(request.prompt_tokens, self.chat_floor_tokens)
        return self._exact(words, rng, request.line, target, _user, self.count_chat)

    def _body(self, request: TracedRequest, tokens: int, block_size: int | None) -> tuple[list[str], random.Random]:
        size = self._block_size if block_size is None else block_size
        if size < 1:
            raise ValueError(f"block_size must be at least 1, got {size}")
        tokens = max(1, tokens)
        words: list[str] = []
        for block in request.prefix_blocks:
            if len(words) >= tokens:
                break
            words.extend(self._block(block, size)[: tokens - len(words)])
        # Request-unique text: a seed string apart from the blocks' ("r" vs "b").
        rng = random.Random(f"r:{self._seed}:{request.line}")
        words.extend(rng.choices(self._words, k=tokens - len(words)))
        return words, rng

    def _block(self, block: int, size: int) -> list[str]:
        key = (block, size)
        words = self._blocks.get(key)
        if words is None:
            words = random.Random(f"b:{self._seed}:{block}").choices(self._words, k=size)
            self._blocks[key] = words
            if len(self._blocks) > CACHED_BLOCKS:
                self._blocks.popitem(last=False)
        else:
            self._blocks.move_to_end(key)
        return words

    def _exact(self, words: list[str], rng: random.Random, line: int, target: int,
               render: Callable[[str], Any], count: Callable[[Any], int]) -> Any:
        """Counts the built prompt once and, should the tokenizer disagree with the word count,
        adds or removes words at the end until it agrees; never returns a wrong length."""
        for _ in range(FIX_PASSES):
            prompt = render("".join(words))
            counted = count(prompt)
            if counted == target:
                return prompt
            if counted < target:
                words.extend(rng.choices(self._words, k=target - counted))
            elif len(words) > 1:
                del words[max(1, len(words) - (counted - target)):]
            else:
                break
        raise PromptLengthError(f"line {line}: no prompt of exactly {target} tokens with this tokenizer "
                                f"(the closest try had {counted})")


def _user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def _safe_words(tokenizer: Any) -> list[str]:
    """The commonest safe words, each checked to encode to its one token after a space."""
    candidates = sorted((token_id, token) for token, token_id in tokenizer.get_vocab().items()
                        if SAFE_WORD.fullmatch(token))
    safe: list[str] = []
    # In slices: the commonest few thousand are enough, and encoding all ~20,000 takes a while.
    for start in range(0, len(candidates), VOCABULARY_WORDS):
        if len(safe) >= VOCABULARY_WORDS:
            break
        chunk = candidates[start:start + VOCABULARY_WORDS]
        words = [" " + token[1:] for _, token in chunk]
        encoded = tokenizer(words, add_special_tokens=False).input_ids
        safe.extend(word for word, (token_id, _), ids in zip(words, chunk, encoded) if ids == [token_id])
    if len(safe) < MIN_VOCABULARY_WORDS:
        raise PromptLengthError(
            f"the tokenizer has {len(safe)} tokens of a space and lowercase letters that encode alone "
            f"(needs {MIN_VOCABULARY_WORDS}); exact prompts need a byte-level BPE tokenizer such as "
            "GPT-2's or Llama 3's")
    return safe[:VOCABULARY_WORDS]
