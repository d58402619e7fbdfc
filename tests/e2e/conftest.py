"""The real app (vLLM CPU engine, embedded model), deployed once for the e2e tier, with tenants:
one ordinary key the tests use, and one tenant whose budget a single request exhausts."""

from __future__ import annotations

import pytest
from ray import serve

from core.config import TrilemmaConfig
from serve_app.launcher import deploy
from serving.tenants import add_tenant
from tests.support import config_for_tests


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
    config = TrilemmaConfig.from_dict(raw)
    url = deploy(config, model_source=str(embedded_model_dir))
    yield url
    serve.delete(config.app_name)


@pytest.fixture(scope="package")
def api_key(tenant_keys):
    return tenant_keys[1]["e2e"]
