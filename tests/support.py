"""Helpers shared by the test tiers."""

from __future__ import annotations

from serve_app.config import DEFAULT_CONFIG_PATH, TrilemmaConfig

TEST_PORT = 8011


def config_for_tests() -> TrilemmaConfig:
    """The shipped default config on a test port, plus a scenario that no pool may serve."""
    raw = TrilemmaConfig.from_yaml(DEFAULT_CONFIG_PATH).model_dump()
    raw["http"]["port"] = TEST_PORT
    raw["scenarios"]["closed"] = {"priority": 9, "pools": [], "description": "no pool"}
    return TrilemmaConfig.from_dict(raw)
