"""A pool's nice value: raised when asked, never lowered, left alone when unset."""

from __future__ import annotations

import logging

import pytest

from deployments.cpu_niceness import apply_cpu_niceness
from serve_app.config import DEFAULT_CONFIG_PATH, ConfigError, TrilemmaConfig


class FakeNice:
    def __init__(self, value: int) -> None:
        self.value, self.calls = value, []

    def __call__(self, increment: int) -> int:
        self.calls.append(increment)
        self.value += increment
        return self.value


@pytest.mark.parametrize("start, target, runs_at, increments", [
    (15, 19, 19, [0, 4]),      # Ray's workers start at 15: raised by the difference
    (15, None, 15, [0]),       # unset: as Ray started it
    (19, 19, 19, [0]),         # already there
])
def test_the_nice_value_is_raised_to_the_target(start, target, runs_at, increments):
    nice = FakeNice(start)
    assert apply_cpu_niceness(target, nice=nice) == runs_at
    assert nice.calls == increments


def test_a_target_below_the_current_value_is_left_with_a_warning(caplog):
    nice = FakeNice(15)
    with caplog.at_level(logging.WARNING):
        assert apply_cpu_niceness(5, nice=nice) == 15
    assert nice.calls == [0]
    assert "cpu_niceness 5 is below the replica's nice value 15" in caplog.text


def test_the_default_cpu_config_lets_the_long_pool_yield_to_chat():
    config = TrilemmaConfig.from_yaml(DEFAULT_CONFIG_PATH)
    assert config.pools["long"].cpu_niceness == 19 and config.pools["short"].cpu_niceness is None


def test_a_nice_value_outside_0_to_19_is_refused():
    raw = TrilemmaConfig.from_yaml(DEFAULT_CONFIG_PATH).model_dump()
    raw["pools"]["long"]["cpu_niceness"] = 20
    with pytest.raises(ConfigError, match="cpu_niceness"):
        TrilemmaConfig.from_dict(raw)
