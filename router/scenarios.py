"""What a scenario does to a request: its profile (token caps and sampling limits) and, where it
opts in (`normalize_whitespace`), prompt hygiene: whitespace a model does not need, removed
before it is paid for. Pasted documents carry runs of spaces, tabs, trailing blanks and empty
lines; each run is tokens of prefill that change nothing. Code and verse are
whitespace-sensitive, so scenarios opt in."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from core.config import ScenarioConfig


@dataclass(frozen=True)
class AppliedProfile:
    max_tokens: int
    defaulted: bool  # the client set no budget, so the router may shrink it to fit
    adjustments: tuple[str, ...]


def requested_max_tokens(body) -> int | None:
    """The completion budget the client asked for, if any (0 is a request, not an absence)."""
    completion = getattr(body, "max_completion_tokens", None)
    return completion if completion is not None else body.max_tokens


def apply_profile(body, scenario: ScenarioConfig) -> AppliedProfile:
    """Caps max_tokens and temperature on `body` (an OpenAI chat or completion request) in place.

    The completion budget is always made explicit, so routing sizes the request by the
    same number the engine will honour.
    """
    adjustments: list[str] = []
    # Chat requests may carry the newer max_completion_tokens; it wins over max_tokens there.
    requested = requested_max_tokens(body)
    max_tokens = scenario.default_max_tokens if requested is None else requested
    if requested is None:
        adjustments.append(f"max_tokens defaulted to {max_tokens}")
    if scenario.max_tokens_cap is not None and max_tokens > scenario.max_tokens_cap:
        adjustments.append(f"max_tokens {max_tokens} capped to {scenario.max_tokens_cap}")
        max_tokens = scenario.max_tokens_cap
    body.max_tokens = max_tokens
    if getattr(body, "max_completion_tokens", None) is not None:
        body.max_completion_tokens = max_tokens

    limit = scenario.max_temperature
    if limit is not None and (body.temperature is None or body.temperature > limit):
        adjustments.append(f"temperature {body.temperature} lowered to {limit}")
        body.temperature = limit
    return AppliedProfile(
        max_tokens=max_tokens, defaulted=requested is None, adjustments=tuple(adjustments)
    )


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
