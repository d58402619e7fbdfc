"""The app with fake engines, deployed once for the integration tier; an app of its own for the
tests that break things; a local AWS-compatible server for the tests that talk to AWS."""

from __future__ import annotations

import httpx
import pytest
from ray import serve

from core.config import TrilemmaConfig
from serve_app.launcher import deploy, deployed
from tests.fake_engine import FakeEngine
from tests.support import config_for_tests

MOTO_PORT = 5055
# The app the fault tests break: its own, so that the shared one never sees a fault.
FAULTS_APP = "trilemma-faults"
# Long enough that the outage is seen between a death and the new replica serving.
FAULTS_START_S = 4.0


@pytest.fixture(scope="package")
def fake_app_url(ray_cluster, embedded_model_dir):
    config = config_for_tests()
    url = deploy(config, engine_cls=FakeEngine, model_source=str(embedded_model_dir))
    yield url
    serve.delete(config.app_name)


def faults_config(*, routers: int = 1) -> TrilemmaConfig:
    """Fake engines that start in 4 s and stream a token per 0.2 s, a health check every 0.5 s,
    and a scenario that only the short pool serves."""
    raw = config_for_tests().model_dump(mode="json")
    raw["app_name"] = FAULTS_APP
    raw["router"]["replicas"] = routers
    raw["scenarios"]["short-only"] = {"priority": 0, "pools": ["short"], "description": "the short pool only"}
    for name in ("short", "long"):
        raw["pools"][name].update(
            resources={"CPU": 0.1}, health_check_period_s=0.5, drain_timeout_s=5,
            env={"TRILEMMA_FAKE_START_S": str(FAULTS_START_S), "TRILEMMA_FAKE_TPOT_S": "0.2"},
        )
    return TrilemmaConfig.from_dict(raw)


@pytest.fixture(scope="module")
def faults_url(ray_cluster, embedded_model_dir):
    """The app the fault tests break (`faults_config`)."""
    with deployed(faults_config(), engine_cls=FakeEngine, model_source=str(embedded_model_dir),
                  route_prefix="/faults") as url:
        yield url


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
