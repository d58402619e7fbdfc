"""Shared fixtures: the embedded model, one local Ray cluster, and test configs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from serve_app.config import DEFAULT_CONFIG_PATH, TrilemmaConfig
from serve_app.model_store import default_cache_dir, prepare_embedded_model

TEST_PORT = 8011


def test_config(**overrides: Any) -> TrilemmaConfig:
    """The shipped default config on a test port, plus a scenario that no pool may serve."""
    raw = TrilemmaConfig.from_yaml(DEFAULT_CONFIG_PATH).model_dump()
    raw["http"]["port"] = TEST_PORT
    raw["scenarios"]["closed"] = {"priority": 9, "pools": [], "description": "no pool"}
    for key, value in overrides.items():
        raw[key] = value
    return TrilemmaConfig.from_dict(raw)


@pytest.fixture(scope="session")
def embedded_model_dir() -> Path:
    """The embedded model as a safetensors folder (converted once per cache)."""
    return prepare_embedded_model(default_cache_dir())


@pytest.fixture(scope="session")
def ray_cluster():
    import ray
    from ray import serve

    ray.init(num_cpus=4, include_dashboard=False)
    yield
    serve.shutdown()
    ray.shutdown()
