"""Helpers shared by the test tiers."""

from __future__ import annotations

from serve_app.config import DEFAULT_CONFIG_PATH, TrilemmaConfig

TEST_PORT = 8011
# Where the test cluster's Ray serves the app's metrics (Prometheus text format).
METRICS_TEST_PORT = 8091


class ManualClock:
    """A clock that moves only when a test sets `now`."""

    def __init__(self, now=0.0) -> None:
        self.now = now

    def __call__(self):
        return self.now


def config_for_tests() -> TrilemmaConfig:
    """The shipped default config on a test port, plus a scenario that no pool may serve."""
    raw = TrilemmaConfig.from_yaml(DEFAULT_CONFIG_PATH).model_dump()
    raw["http"]["port"] = TEST_PORT
    raw["scenarios"]["closed"] = {"priority": 3, "pools": [], "description": "no pool"}
    raw["costs"]["live_prices"] = "off"  # tests price from the shipped catalog, whatever the machine
    return TrilemmaConfig.from_dict(raw)
