"""A pool replica's engine start: Ray's usage report goes out beside it, not before it ends."""

from __future__ import annotations

import asyncio
import logging
import threading
from types import SimpleNamespace

import pool.replica as pool_module
from pool.replica import PoolServer


def test_the_engine_start_ends_before_the_usage_report_is_answered(monkeypatch):
    answered = threading.Event()
    reported = []

    def slow_report(llm_config):  # Ray's creates an actor and waits for it
        assert answered.wait(10)
        reported.append(llm_config)

    monkeypatch.setattr(pool_module, "report_llm_usage", slow_report)
    started = []

    class Engine:
        async def start(self):
            started.append(True)

    replica = SimpleNamespace(engine=Engine(), _llm_config="the pool's LLMConfig", _pool_name="short")
    replica._report_usage = lambda: PoolServer._report_usage(replica)

    async def start_then_answer():
        await asyncio.wait_for(PoolServer._start_engine(replica), timeout=5)
        assert started == [True] and reported == []
        answered.set()
        await asyncio.wait_for(replica._usage_report, timeout=5)

    asyncio.run(start_then_answer())
    assert reported == ["the pool's LLMConfig"]


def test_a_usage_report_that_fails_is_logged_and_the_replica_goes_on(monkeypatch, caplog):
    def broken_report(llm_config):
        raise ImportError("Ray moved its telemetry")

    monkeypatch.setattr(pool_module, "report_llm_usage", broken_report)
    replica = SimpleNamespace(_llm_config="the pool's LLMConfig", _pool_name="short")
    with caplog.at_level(logging.WARNING):
        PoolServer._report_usage(replica)
    assert "Pool short: Ray's usage report was not sent: ImportError('Ray moved its telemetry')" in caplog.text
