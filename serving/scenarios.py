"""Scenario profiles applied to a request: token caps and sampling limits."""

from __future__ import annotations

from dataclasses import dataclass

from core.config import ScenarioConfig


@dataclass(frozen=True)
class AppliedProfile:
    max_tokens: int
    defaulted: bool  # the client set no budget, so the router may shrink it to fit
    adjustments: tuple[str, ...]


def apply_profile(body, scenario: ScenarioConfig) -> AppliedProfile:
    """Caps max_tokens and temperature on `body` (an OpenAI chat or completion request) in place.

    The completion budget is always made explicit, so routing sizes the request by the
    same number the engine will honour.
    """
    adjustments: list[str] = []
    # Chat requests may carry the newer max_completion_tokens; it wins over max_tokens there.
    requested = getattr(body, "max_completion_tokens", None) or body.max_tokens
    max_tokens = requested or scenario.default_max_tokens
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
