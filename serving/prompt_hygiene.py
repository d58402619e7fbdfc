"""Prompt hygiene: whitespace a model does not need, removed before it is paid for.

Pasted documents carry runs of spaces, tabs, trailing blanks and empty lines; each run is
tokens of prefill that change nothing. Scenarios opt in (`normalize_whitespace`), because
code and verse are whitespace-sensitive.
"""

from __future__ import annotations

import re
from typing import Any

_SPACES = re.compile(r"[ \t\f\v]+")
_TRAILING = re.compile(r"[ \t]+\n")
_BLANK_LINES = re.compile(r"\n{3,}")


def normalize_text(text: str) -> str:
    """Runs of spaces and tabs become one space, lines lose trailing blanks, and more than one
    empty line in a row becomes one; the text's ends are trimmed."""
    text = _TRAILING.sub("\n", text.replace("\r\n", "\n"))
    text = _SPACES.sub(" ", text)
    return _BLANK_LINES.sub("\n\n", text).strip()


def normalize_request(body: Any) -> bool:
    """Normalizes a chat or completion request's text in place; True if anything changed."""
    changed = False
    if getattr(body, "messages", None) is not None:
        for message in body.messages:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str):
                cleaned = normalize_text(content)
                changed |= cleaned != content
                message["content"] = cleaned
    elif isinstance(getattr(body, "prompt", None), str):
        cleaned = normalize_text(body.prompt)
        changed = cleaned != body.prompt
        body.prompt = cleaned
    return changed
