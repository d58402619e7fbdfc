"""The real app (vLLM CPU engine, embedded model), deployed once for the e2e tier, with tenants:
one ordinary key the tests use, and one tenant whose budget a single request exhausts; and a
real Prometheus that scrapes it with the rules `trilemma observe rules` writes for its config."""

from __future__ import annotations

import time

import httpx
import pytest
from ray import serve

from core.config import TrilemmaConfig
from engine.preload import PRELOAD_ENV
from observability.prometheus_setup import PrometheusSetup
from observability.prometheus_setup import start as start_prometheus
from observability.prometheus_setup import write_setup
from router.tenants import add_tenant
from serve_app.launcher import deploy
from tests.support import METRICS_TEST_PORT, config_for_tests

PROMETHEUS_PORT = 9099
# A scrape may take this long: after the integration tier, the test cluster's exposition is over
# 1 MB (every replica ever started keeps its series), and with a 1 s interval (and so a 1 s
# timeout) every scrape timed out while the engines compiled on 2 busy cores.
SCRAPE_INTERVAL_S = 3


@pytest.fixture(scope="package")
def tenant_keys(tmp_path_factory):
    path = tmp_path_factory.mktemp("tenants") / "tenants.yaml"
    keys = {
        "e2e": add_tenant(path, "e2e", daily_budget_usd=None),
        "tiny": add_tenant(path, "tiny", daily_budget_usd=1e-9),   # spent by its first request
    }
    return path, keys


@pytest.fixture(scope="package")
def base_url(ray_cluster, embedded_model_dir, tenant_keys):
    raw = config_for_tests().model_dump(mode="json")
    raw["tenants"]["keys_file"] = str(tenant_keys[0])
    # The long pool's engine core forked from its replica's preloaded forkserver, as a GPU pool's
    # is by default; the short pool's spawned, as a CPU pool's is (engine/preload.py).
    raw["pools"]["long"]["env"][PRELOAD_ENV] = "1"
    config = TrilemmaConfig.from_dict(raw)
    url = deploy(config, model_source=str(embedded_model_dir))
    yield url
    serve.delete(config.app_name)


@pytest.fixture(scope="package")
def api_key(tenant_keys):
    return tenant_keys[1]["e2e"]


@pytest.fixture(scope="package")
def prometheus_setup(tmp_path_factory) -> PrometheusSetup:
    return write_setup(config_for_tests(), tmp_path_factory.mktemp("prometheus"),
                       targets=[f"127.0.0.1:{METRICS_TEST_PORT}"], interval_s=SCRAPE_INTERVAL_S)


@pytest.fixture(scope="package")
def prometheus(prometheus_setup, base_url):
    """The URL of a Prometheus server (Debian's package: `make prometheus`) scraping the app."""
    process = start_prometheus(prometheus_setup, PROMETHEUS_PORT, quiet=True)
    url = f"http://127.0.0.1:{PROMETHEUS_PORT}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/-/ready", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.5)
    yield url
    process.terminate()
    process.wait(timeout=30)
