"""`trilemma bench chaos` on a real Ray Serve app with fake engines: a killed replica and a
crowd of clients that leave are counted, and the pool serves again."""

from __future__ import annotations

import pytest

from bench.chaos.faults import Fault, Target
from bench.chaos.run import markdown, run_fault
from tests.integration.conftest import FAULTS_APP
from tests.integration.test_faults_fake_engine import MODEL

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("fault", ["kill-replica", "clients-leave"])
async def test_a_fault_under_steady_load_is_counted(faults_url, fault):
    target = Target(app=FAULTS_APP, url=faults_url, model=MODEL, pool="short", clients_leaving=100)
    result = await run_fault(Fault.registry[fault](), target, rate_rps=1, before_s=3, settle_s=3,
                             recover_timeout_s=60, hang_s=30)
    assert result.hung == 0
    assert result.sent_after > 0
    if fault == "clients-leave":
        # The crowd fills the pool's queue for a moment: a steady request shed then is the app
        # working (429 with Retry-After), not a fault.
        assert all("429" in kind for kind in result.failed_after), result.failed_after
    else:
        assert result.answered_after == result.sent_after, result
    assert result.seconds_to_serving is not None and result.seconds_to_serving < 60
    assert fault in markdown([result], {"name": "t", "command": "c", "url": faults_url, "pool": "short",
                                        "rate_rps": 1, "hang_s": 30})
