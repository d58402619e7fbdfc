"""One case sent to one server, and what came back: the status, the body (a stream's events
joined into one answer), and the error, in the form the comparison reads."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from bench.parity.cases import Case

TIMEOUT_S = 300.0


@dataclass
class Answer:
    status: int | None
    body: Any = None              # parsed JSON, or the text of a body that is not JSON
    events: list[Any] = field(default_factory=list)   # a stream's data events, parsed
    error: str | None = None      # the transport's error: no answer at all
    headers: dict[str, str] = field(default_factory=dict)  # names in lower case

    @property
    def error_type(self) -> str | None:
        return self._error_field("type")

    @property
    def error_code(self) -> Any:
        return self._error_field("code")

    def _error_field(self, name: str) -> Any:
        error = self.body.get("error") if isinstance(self.body, dict) else None
        return error.get(name) if isinstance(error, dict) else None

    def first_text_and_tokens(self) -> tuple[str, int]:
        """The first choice's text (or message content) and the completion's token count."""
        body = self.body if isinstance(self.body, dict) else {}
        choice = (body.get("choices") or [{}])[0]
        text = choice.get("text", (choice.get("message") or {}).get("content")) or ""
        return text, (body.get("usage") or {}).get("completion_tokens") or 0

    def summary(self) -> dict[str, Any]:
        """What the stored result keeps of an answer: enough to see a difference."""
        body = self.body
        if isinstance(body, (dict, list)):
            body = json.dumps(body)[:600]
        elif isinstance(body, str):
            body = body[:600]
        return {"status": self.status, "error_type": self.error_type, "body": body, "events": len(self.events),
                "transport_error": self.error}


def send(client: httpx.Client, base_url: str, case: Case, api_key: str | None) -> Answer:
    headers = {**case.headers, **({"Authorization": f"Bearer {api_key}"} if api_key else {})}
    url = f"{base_url.rstrip('/')}{case.path}"
    try:
        if case.method == "GET":
            return _whole(client.get(url, headers=headers, timeout=TIMEOUT_S))
        content = case.body if isinstance(case.body, bytes) else json.dumps(
            {k: v for k, v in (case.body or {}).items()}).encode()
        headers["Content-Type"] = "application/json"
        if not case.stream:
            return _whole(client.post(url, content=content, headers=headers, timeout=TIMEOUT_S))
        with client.stream("POST", url, content=content, headers=headers, timeout=TIMEOUT_S) as response:
            if response.status_code != 200:
                response.read()
                return _whole(response)
            answer = Answer(response.status_code, headers=_lower(response.headers))
            for line in response.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                answer.events.append(json.loads(line[len("data: "):]))
                if case.leave_after_chunks is not None and len(answer.events) >= case.leave_after_chunks:
                    break  # the client leaves: the connection closes with the block
            answer.body = joined_stream(answer.events)
            return answer
    except httpx.HTTPError as error:
        return Answer(None, error=f"{type(error).__name__}: {error}")


def _whole(response: httpx.Response) -> Answer:
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    return Answer(response.status_code, body, headers=_lower(response.headers))


def _lower(headers: httpx.Headers) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


def joined_stream(events: list[dict[str, Any]]) -> dict[str, Any]:
    """A stream's chunks as one answer: each choice's text (or content) and tool calls joined
    (a call's name and the pieces of its arguments, by the call's index), the finish reasons,
    and the usage of the last chunk that has one."""
    texts: dict[int, list[str]] = {}
    calls: dict[int, dict[int, dict[str, str]]] = {}
    finish: dict[int, str | None] = {}
    usage = None
    for event in events:
        if not isinstance(event, dict):
            continue
        usage = event.get("usage") or usage
        for choice in event.get("choices") or []:
            index = choice.get("index", 0)
            delta = choice.get("delta") or {}
            piece = choice.get("text")
            if piece is None:
                piece = delta.get("content")
            texts.setdefault(index, []).append(piece or "")
            for call in delta.get("tool_calls") or []:
                joined = calls.setdefault(index, {}).setdefault(call.get("index", 0), {"name": "", "arguments": ""})
                function = call.get("function") or {}
                joined["name"] += function.get("name") or ""
                joined["arguments"] += function.get("arguments") or ""
            if choice.get("finish_reason") is not None:
                finish[index] = choice["finish_reason"]
    return {"choices": [{"index": i, "text": "".join(texts[i]), "finish_reason": finish.get(i),
                         "tool_calls": [{"function": calls[i][k]} for k in sorted(calls.get(i, {}))]}
                        for i in sorted(texts)],
            "usage": usage}
