"""Scenario profiles applied to real OpenAI request objects."""

from __future__ import annotations

import pytest

from core.config import ScenarioConfig
from core.upstream import ChatCompletionRequest, CompletionRequest
from router.scenarios import apply_profile

CHAT = ScenarioConfig(priority=0, max_tokens_cap=128)
QUALITY = ScenarioConfig(priority=1, max_temperature=0.1)
BATCH = ScenarioConfig(priority=3, default_max_tokens=300)


def chat(**fields):
    return ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], **fields)


@pytest.mark.parametrize(
    "scenario, fields, max_tokens, defaulted, note",
    [
        (CHAT, {"max_tokens": 500}, 128, False, "max_tokens 500 capped to 128"),
        (CHAT, {"max_tokens": 50}, 50, False, None),
        (CHAT, {}, 128, True, "max_tokens defaulted to 128"),
        (CHAT, {"max_completion_tokens": 400}, 128, False, "capped to 128"),
        (BATCH, {}, 300, True, "defaulted to 300"),
        (BATCH, {"max_tokens": 2000}, 2000, False, None),
    ],
)
def test_max_tokens(scenario, fields, max_tokens, defaulted, note):
    body = chat(**fields)
    applied = apply_profile(body, scenario)
    assert (applied.max_tokens, applied.defaulted, body.max_tokens) == (max_tokens, defaulted, max_tokens)
    if "max_completion_tokens" in fields:
        assert body.max_completion_tokens == max_tokens
    assert (note is None) == (not applied.adjustments)
    if note:
        assert any(note in adjustment for adjustment in applied.adjustments)


@pytest.mark.parametrize("temperature, expected", [(None, 0.1), (0.9, 0.1), (0.05, 0.05), (0.0, 0.0)])
def test_quality_caps_temperature(temperature, expected):
    body = chat(temperature=temperature, max_tokens=10)
    apply_profile(body, QUALITY)
    assert body.temperature == expected


def test_other_scenarios_leave_temperature_alone():
    body = chat(temperature=1.3, max_tokens=10)
    apply_profile(body, CHAT)
    assert body.temperature == 1.3


def test_completion_keeps_openai_default_budget():
    body = CompletionRequest(model="m", prompt="hi")
    applied = apply_profile(body, BATCH)
    assert applied.max_tokens == 16  # OpenAI's completions default, set by the request model
