"""The app with fake engines, deployed once for the integration tier; a local AWS-compatible
server for the tests that talk to AWS."""

from __future__ import annotations

import httpx
import pytest
from ray import serve

from serve_app.launcher import deploy
from tests.fake_engine import FakeEngine
from tests.support import config_for_tests

MOTO_PORT = 5055


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


@pytest.fixture(scope="module")
def moto_endpoint():
    """moto's server on this machine: EC2 (offerings, spot price history, ...) and whatever
    else it implements, with the state of one test module."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=MOTO_PORT)
    server.start()
    yield f"http://127.0.0.1:{MOTO_PORT}"
    server.stop()


@pytest.fixture
def fake_aws_credentials(monkeypatch):
    """Credentials boto3 accepts and no real account has: nothing can reach AWS itself."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
