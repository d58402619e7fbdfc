"""Shared fixtures: the embedded model and one local Ray cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.model_store import default_cache_dir, prepare_embedded_model
from serve_app.launcher import prepare_local_ray, reap_orphaned_engines
from serve_app.ray_driver import init_ray
from tests.support import METRICS_TEST_PORT, config_for_tests


@pytest.fixture(scope="session")
def embedded_model_dir() -> Path:
    """The embedded model as a safetensors folder (converted once per cache)."""
    return prepare_embedded_model(default_cache_dir())


@pytest.fixture(scope="session")
def ray_cluster():
    import ray
    from ray import serve

    if ray.is_initialized():
        # Building an app (the unit tier does) can start a default Ray: Ray Serve LLM's
        # builders query the cluster. The app tiers need the one sized like `local_ray`.
        ray.shutdown()
    prepare_local_ray(config_for_tests())  # as the app's own Ray is prepared
    init_ray(num_cpus=4, include_dashboard=False, _metrics_export_port=METRICS_TEST_PORT)
    yield
    serve.shutdown()
    ray.shutdown()
    reap_orphaned_engines()
