"""Whitespace normalization: what goes, what stays."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from router.scenarios import normalize_request, normalize_text


@pytest.mark.parametrize("text, expected", [
    ("a   b\t\tc", "a b c"),
    ("line  \nnext\t\n", "line\nnext"),
    ("para\n\n\n\n\nnext", "para\n\nnext"),
    ("  keep\n\none blank  ", "keep\n\none blank"),
    ("windows\r\nlines", "windows\nlines"),
    ("already clean", "already clean"),
])
def test_normalize_text(text, expected):
    assert normalize_text(text) == expected


def test_requests_are_normalized_in_place():
    chat = SimpleNamespace(messages=[{"role": "user", "content": "a    b"}, {"role": "user", "content": [1]}])
    assert normalize_request(chat) and chat.messages[0]["content"] == "a b"
    completion = SimpleNamespace(messages=None, prompt="x\n\n\n\ny")
    assert normalize_request(completion) and completion.prompt == "x\n\ny"
    assert not normalize_request(SimpleNamespace(messages=None, prompt="clean"))
