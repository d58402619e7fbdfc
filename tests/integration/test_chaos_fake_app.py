"""The fault benchmarks on a real Ray Serve app with fake engines and two router replicas.
`trilemma bench chaos`: a killed replica, a killed router and a crowd of clients that leave are
counted, the pool serves again and holds nothing afterwards. `trilemma bench soak`, in small:
the mixed load is answered and every serving process's memory is read."""

from __future__ import annotations

import pytest

from bench.chaos.faults import Fault, Target
from bench.chaos.run import markdown, run_fault
from bench.soak.mixed_load import SoakPlan
from bench.soak.run import run_soak
from serve_app.launcher import deployed
from tests.fake_engine import FakeEngine
from tests.integration.conftest import FAULTS_APP, faults_config
from tests.integration.test_faults_fake_engine import MODEL

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def chaos_url(ray_cluster, embedded_model_dir):
    with deployed(faults_config(routers=2), engine_cls=FakeEngine, model_source=str(embedded_model_dir),
                  route_prefix="/chaos") as url:
        yield url


@pytest.mark.parametrize("fault", ["kill-replica", "kill-router", "clients-leave"])
async def test_a_fault_under_steady_load_is_counted(chaos_url, fault):
    target = Target(app=FAULTS_APP, url=chaos_url, model=MODEL, pool="short", clients_leaving=100)
    result = await run_fault(Fault.registry[fault](), target, rate_rps=1, before_s=3, settle_s=3,
                             recover_timeout_s=60, hang_s=30)
    assert result.hung == 0
    assert result.sent_after > 0
    if fault == "clients-leave":
        # The crowd fills the pool's queue for a moment: a steady request shed then is the app
        # working (429 with Retry-After), not a fault.
        assert all("429" in kind for kind in result.failed_after), result.failed_after
    elif fault == "kill-replica":
        assert result.answered_after == result.sent_after, result
    else:
        # Streams in flight on the killed router end with it; every request sent after the
        # kill is answered by the router that lives, also one HAProxy had already handed to the
        # dying one (it replays a request that got no byte back).
        assert result.sent_later > 0 and result.answered_later == result.sent_later, result
    assert result.seconds_to_serving is not None and result.seconds_to_serving < 60
    assert result.held_after == {"short": 0, "long": 0}
    assert fault in markdown([result], {"name": "t", "command": "c", "url": chaos_url, "pool": "short",
                                        "rate_rps": 1, "hang_s": 30})


async def test_a_short_soak_is_answered_and_every_serving_process_is_watched(chaos_url):
    # Fake answers of 64 tokens take 13 s here: rates that keep the pools below their queue limits.
    plan = SoakPlan(minutes=0.5, chat_rps=0.5, long_rps=0.1, batch_rps=0.2, leave_rps=0.5, sample_s=3,
                    window_min=0.25)
    result = await run_soak(chaos_url, MODEL, plan)
    assert result.errors == {} and result.leaving == {"200": 15}, (result.errors, result.leaving)
    assert {kind.split(" on ")[0] for kind in result.by_kind} == {"chat", "batch"}
    assert sum(entry["sent"] for entry in result.by_kind.values()) == 15 + 3 + 6
    assert any(row["process"].startswith(f"ServeReplica:{FAULTS_APP}:router") for row in result.growth)
    assert any(row["process"].startswith("raylet") for row in result.growth)
    assert result.held_after == {"short": 0, "long": 0}
    assert result.verdicts["nothing held once the load is over"]
