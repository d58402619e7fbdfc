"""A replica of a pool whose engines are not proven to isolate a request without an adapter in a
batch of adapter requests refuses such a request before its engine sees it, whatever sent it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

import pool.replica as pool_module
from contract.pool_faults import BaseModelRefused
from pool.replica import PoolServer

WHY = "vLLM's LoRA kernels on accelerator 'MI300X' have not been checked"


def replica(adapter_only: str | None) -> SimpleNamespace:
    admitted = []
    server = SimpleNamespace(_adapter_only=adapter_only, _pool_name="short", admitted=admitted)
    server._admitted = lambda priority, request, kwargs, timeline: admitted.append(request) or "stream"
    return server


def run(server: SimpleNamespace, monkeypatch, adapter: str, method: str = "chat"):
    monkeypatch.setattr(pool_module.serve, "get_multiplexed_model_id", lambda: adapter)
    return asyncio.run(PoolServer._run_request(server, "request", engine_method=method))


def test_a_request_without_an_adapter_is_refused_with_the_reason(monkeypatch):
    server = replica(WHY)
    with pytest.raises(BaseModelRefused) as caught:
        run(server, monkeypatch, adapter="")
    assert caught.value.status == 500 and caught.value.code == "base_model_refused"
    assert caught.value.message == f"pool 'short' serves adapter requests only, so no request without an adapter: {WHY}"
    assert server.admitted == []


def test_adapter_requests_and_proven_pools_go_on(monkeypatch):
    adapted = replica(WHY)
    assert run(adapted, monkeypatch, adapter="tagged") == "stream" and adapted.admitted == ["request"]
    proven = replica(None)
    assert run(proven, monkeypatch, adapter="") == "stream" and proven.admitted == ["request"]
