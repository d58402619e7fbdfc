"""Ray's usage report from a pool replica: sent from a thread once its engine started
(PoolServer._start_engine), it still reaches Ray's usage-telemetry agent."""

from __future__ import annotations

import hashlib
import time
import uuid

import pytest
import ray

from core.config import TrilemmaConfig
from serve_app.launcher import deployed
from tests.fake_engine import FakeEngine
from tests.support import config_for_tests

pytestmark = pytest.mark.integration


def reported_model_hashes() -> list[str]:
    """The models Ray's agent holds reports of (it keys them by their id's SHA-256)."""
    from ray.llm._internal.serve.observability.usage_telemetry.usage import (
        LLM_SERVE_TELEMETRY_ACTOR_NAME, LLM_SERVE_TELEMETRY_NAMESPACE,
    )

    try:
        agent = ray.get_actor(LLM_SERVE_TELEMETRY_ACTOR_NAME, namespace=LLM_SERVE_TELEMETRY_NAMESPACE)
    except ValueError:  # no replica has reported yet
        return []
    return ray.get(agent.__ray_call__.remote(lambda agent: list(agent.models)), timeout=30)


def test_a_pools_usage_report_reaches_rays_agent_once_its_engine_started(ray_cluster, embedded_model_dir):
    # A model name no other app of the session serves: only this app's pools can report it.
    name = f"usage-probe-{uuid.uuid4().hex[:8]}"
    raw = config_for_tests().model_dump(mode="json")
    raw["app_name"] = "trilemma-usage-report"
    raw["model"]["name"] = name
    raw["router"]["replicas"] = 1
    for pool in raw["pools"].values():
        pool["resources"] = {"CPU": 0.1}
    wanted = hashlib.sha256(name.encode()).hexdigest()
    with deployed(TrilemmaConfig.from_dict(raw), engine_cls=FakeEngine, model_source=str(embedded_model_dir),
                  route_prefix="/usage-report"):
        deadline = time.monotonic() + 60
        while wanted not in reported_model_hashes():
            assert time.monotonic() < deadline, f"no pool replica reported {name} to Ray's usage telemetry"
            time.sleep(0.5)
