"""The app with fake engines, deployed once for the integration tier."""

from __future__ import annotations

import httpx
import pytest
from ray import serve

from deployments.fake_engine import FakeEngine
from serve_app.launcher import deploy
from tests.support import config_for_tests


@pytest.fixture(scope="package")
def fake_app_url(ray_cluster, embedded_model_dir):
    config = config_for_tests()
    url = deploy(config, engine_cls=FakeEngine, model_source=str(embedded_model_dir))
    yield url
    serve.delete(config.app_name)


@pytest.fixture(scope="package")
def client(fake_app_url):
    """An HTTP client of the shared app."""
    with httpx.Client(base_url=fake_app_url, timeout=60) as client:
        yield client
