"""The chaos benchmark's counting: what happened after a fault, hung requests, engines left."""

from __future__ import annotations

from bench.chaos.faults import Fault
from bench.chaos.run import markdown, summarize
from bench.metrics import RequestRecord


def _record(started_s: float, e2e_s: float, error: str | None = None) -> RequestRecord:
    return RequestRecord(scenario="chat", started_s=started_s, e2e_s=e2e_s, error=error)


def test_requests_after_the_fault_are_counted_by_outcome():
    records = [
        _record(1, 1.0), _record(2, 1.2),                       # before the fault at 10 s
        _record(9.5, 2.0, "http 502: llm request failed"),      # in flight when it struck
        _record(11, 120.0, "transport: TimeoutError"),          # hung
        _record(12, 1.5), _record(13, 1.4),
    ]
    result = summarize("kill-engine", "SIGKILL to engine 42", records, fault_at=10, back_s=35.0,
                       hang_s=120, engines_before=2)
    assert (result.sent_after, result.answered_after, result.hung) == (4, 2, 1)
    assert result.failed_after == {"http 502: llm request": 1, "transport: TimeoutError": 1}
    assert result.seconds_to_serving == 35.0
    assert result.e2e_p50_s_before == 1.1
    table = markdown([result], {"name": "chaos-test", "command": "trilemma bench chaos", "url": "u",
                                "pool": "short", "rate_rps": 0.5, "hang_s": 120})
    assert "| kill-engine | 4 | 2 | 1 http 502: llm request, 1 transport: TimeoutError | 1 | 35 |" in table


def test_every_fault_of_the_issue_is_registered():
    assert {"kill-engine", "kill-replica", "kill-router", "kill-controller", "clients-leave",
            "redeploy", "scale-down", "sigterm"} <= set(Fault.registry)


def test_held_requests_are_summed_per_pool_whatever_the_engine_reports():
    from bench.pool_activity import requests_held

    pools = {
        "short": {"replicas": [{"in_engine": 1, "waiting": 2, "engine_unfinished": 1},
                               {"in_engine": 0, "waiting": 0, "engine_unfinished": None}]},
        "long": {"replicas": [{"in_engine": 0, "waiting": 0}]},  # an engine that is not vLLM's
    }
    assert requests_held(pools) == {"short": 4, "long": 0}
