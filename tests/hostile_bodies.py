"""A corpus of what fuzzers miss: huge and deeply nested bodies, invalid UTF-8, 100,000
messages, numbers at and past their bounds, unknown fields, several choices, tools. Each case
says the status our router gives it (None: the router passes it on) and the status the app
gives it with the real engine behind (None: any sound answer)."""

from __future__ import annotations

import json
from dataclasses import dataclass

MODEL = "SmolLM2-135M-Instruct"


@dataclass(frozen=True)
class HostileBody:
    name: str
    path: str
    body: bytes
    router_status: int | None
    engine_status: int | None


def assert_answer_is_sound(response) -> None:
    """A 2xx, or a 4xx whose body is an OpenAI-style error with a message: never a 5xx."""
    assert response.status_code < 500, f"{response.status_code}: {response.text[:500]}"
    if response.status_code >= 400:
        error = response.json()["error"]
        assert error["message"] and error["type"], error


def _chat(**fields) -> bytes:
    return json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                       **fields}).encode()


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


CHAT = "/v1/chat/completions"
HOSTILE_BODIES = [
    HostileBody("body of 12 MB", CHAT, _chat(messages=[{"role": "user", "content": "x" * 12_000_000}]), 413, 413),
    HostileBody("JSON nested 100,000 deep", CHAT,
                f'{{"model": "{MODEL}", "messages": {_nested(100_000)}}}'.encode(), 400, 400),
    HostileBody("JSON nested 100,000 deep, scenario path", "/api/chat",
                f'{{"messages": {_nested(100_000)}}}'.encode(), 400, 400),
    HostileBody("invalid UTF-8", CHAT, b'{"model": "m", "messages": [{"role": "user", "content": "\xff\xfe"}]}', 400, 400),
    HostileBody("invalid UTF-8, scenario path", "/api/chat",
                b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', 400, 400),
    HostileBody("not JSON", "/v1/completions", b"model=m&prompt=hi", 400, 400),
    HostileBody("JSON but not an object", "/api/chat", b"[1, 2, 3]", 400, 400),
    HostileBody("empty body", CHAT, b"", 400, 400),
    HostileBody("100,000 messages", CHAT, _chat(messages=[{"role": "user", "content": "hi"}] * 100_000), 400, 400),
    HostileBody("prompt of 100,000 token ids", "/v1/completions",
                json.dumps({"model": MODEL, "prompt": [1] * 100_000, "max_tokens": 1}).encode(), 400, 400),
    HostileBody("messages of the wrong type", CHAT, _chat(messages="hi"), 400, 400),
    HostileBody("unknown scenario", "/api/nope", _chat(), 404, 404),
    HostileBody("max_tokens 0", CHAT, _chat(max_tokens=0), 400, 400),
    HostileBody("max_tokens -1", CHAT, _chat(max_tokens=-1), 400, 400),
    HostileBody("max_tokens 2**63 (capped by the scenario)", CHAT, _chat(max_tokens=2**63), None, None),
    HostileBody("temperature NaN", CHAT,
                _chat().replace(b'"max_tokens": 4', b'"max_tokens": 4, "temperature": NaN'), None, None),
    HostileBody("temperature -1", CHAT, _chat(temperature=-1), None, 400),
    HostileBody("temperature 1e308", CHAT, _chat(temperature=1e308), None, None),
    HostileBody("top_p 2", CHAT, _chat(top_p=2), None, 400),
    HostileBody("top_logprobs 10**6", CHAT, _chat(logprobs=True, top_logprobs=10**6), None, 400),
    HostileBody("role unknown", CHAT, _chat(messages=[{"role": "god", "content": "hi"}]), None, None),
    HostileBody("unknown field", CHAT, _chat(no_such_field=1), None, None),
    HostileBody("n 2", CHAT, _chat(n=2), None, None),
    HostileBody("n 10**6", CHAT, _chat(n=10**6), None, None),
    HostileBody("logprobs", CHAT, _chat(logprobs=True, top_logprobs=5), None, None),
    HostileBody("tools", CHAT, _chat(tools=[{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {}}}}]), None, None),
]
