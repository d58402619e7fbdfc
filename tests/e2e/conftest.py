"""The real app (vLLM CPU engine, embedded model), deployed once for the e2e tier, with tenants:
one ordinary key the tests use, and one tenant whose budget a single request exhausts; a
real Prometheus that scrapes it with the rules `trilemma observe rules` writes for its config;
and a second app of two public models whose short pool serves the committed LoRA adapters."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from ray import serve

from core.config import TrilemmaConfig
from engine.preload import PRELOAD_ENV
from observability.prometheus_setup import PrometheusSetup
from observability.prometheus_setup import start as start_prometheus
from observability.prometheus_setup import write_setup
from router.tenants import add_tenant
from serve_app.launcher import deploy, deployed
from tests.support import METRICS_TEST_PORT, config_for_tests

# The models app: the short pool serves the embedded weights under a name of its own, with adapters.
CHAT_MODEL = "smol-chat"
ADAPTERS = Path(__file__).resolve().parents[1] / "data" / "adapters"
# Held at most two at once by the short pool's replica: a third adapter evicts the least recently used.
MAX_RESIDENT = 2

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


@pytest.fixture(scope="package")
def models_app(ray_cluster, embedded_model_dir, tmp_path_factory):
    """(URL, API keys by tenant) of an app of two public models: the short pool serves CHAT_MODEL,
    the committed adapters of it (tagged, jsonish, tagged-again: tagged's files under another
    name, and the broken fixtures) and the chat scenario; the long pool the app's default model.
    Tenant `adapted` gets the tagged adapter by default."""
    tenants = tmp_path_factory.mktemp("models-tenants") / "tenants.yaml"
    keys = {"plain": add_tenant(tenants, "plain", None), "adapted": add_tenant(tenants, "adapted", None, "tagged")}
    raw = config_for_tests().model_dump(mode="json")
    raw["app_name"] = "trilemma-models"
    raw["tenants"]["keys_file"] = str(tenants)
    # The same weights under a public name of their own: what matters here is which engine is asked.
    raw["pools"]["short"]["model"] = {"name": CHAT_MODEL, "source": str(embedded_model_dir)}
    raw["pools"]["short"]["lora"] = {"max_loras": 2, "max_lora_rank": 16, "max_resident": MAX_RESIDENT}
    raw["scenarios"]["chat"]["models"] = [CHAT_MODEL]
    folders = {"tagged": "tagged", "jsonish": "jsonish", "tagged-again": "tagged", "rank-64": "bad/rank-64",
               "truncated": "bad/truncated", "wrong-base-smaller": "bad/wrong-base-smaller"}
    raw["adapters"] = {name: {"base": CHAT_MODEL, "source": str(ADAPTERS / folder)} for name, folder in folders.items()}
    with deployed(TrilemmaConfig.from_dict(raw), model_source=str(embedded_model_dir),
                  route_prefix="/models") as url:
        yield url, keys
