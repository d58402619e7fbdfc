"""Counts prompt tokens with the served model's own tokenizer and chat template."""

from __future__ import annotations

import asyncio
from typing import Any


class PromptTokenCounter:
    """Counts what the engine will see, so routing and the engine agree on a prompt's size.

    Construction is cheap; the tokenizer loads on first use (or on `load()`), so tests and
    builders can make one without a model on disk.
    """

    def __init__(self, tokenizer_source: str) -> None:
        self._source = tokenizer_source
        self._tokenizer = None

    def load(self) -> None:
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self._source)

    async def count_chat(self, messages: list[Any]) -> int:
        # Tokenizing a 32K-token prompt takes milliseconds of CPU: off the event loop.
        return await asyncio.to_thread(self._count_chat, messages)

    async def count_completion(self, prompt: Any) -> int:
        return await asyncio.to_thread(self._count_completion, prompt)

    def _count_chat(self, messages: list[Any]) -> int:
        self.load()
        plain = [_plain_message(message) for message in messages]
        try:
            text = self._tokenizer.apply_chat_template(
                plain, tokenize=False, add_generation_prompt=True
            )
        except (ValueError, TypeError, KeyError):
            # Models without a chat template: the contents are still the bulk of the prompt.
            text = "\n".join(message["content"] for message in plain)
        return len(self._tokenizer.encode(text, add_special_tokens=False))

    def _count_completion(self, prompt: Any) -> int:
        """The longest prompt of the request: a batch is as large as its largest sequence."""
        self.load()
        if isinstance(prompt, str):
            return len(self._tokenizer.encode(prompt))
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            return len(prompt)
        if isinstance(prompt, list) and prompt:
            return max(self._count_completion(item) for item in prompt)
        return 0


def _plain_message(message: Any) -> dict[str, str]:
    """A {role, content} dict with text parts joined; images and tools do not size routing."""
    if not isinstance(message, dict):
        message = message.model_dump() if hasattr(message, "model_dump") else dict(message)
    content = message.get("content") or ""
    if not isinstance(content, str):
        content = "".join(
            part.get("text", "") for part in content if isinstance(part, dict)
        )
    return {"role": str(message.get("role", "user")), "content": content}
