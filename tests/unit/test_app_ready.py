"""Long benchmarks wait until every pool of the app they load serves."""

from __future__ import annotations

import httpx
import pytest

from bench import app_ready


class _Models:
    def json(self):
        return {"data": [{"id": "SmolLM2-135M-Instruct"}]}


def _pools(**replicas):
    return {name: {"accelerator": "cpu", "price_usd_per_hour": 1.0, "replicas": [{}] * count}
            for name, count in replicas.items()}


@pytest.fixture
def app(monkeypatch):
    """An app whose readings of `/trilemma/pools` come from a list, one per poll."""
    readings: list = []
    monkeypatch.setattr(app_ready, "POLL_S", 0.0)
    monkeypatch.setattr(app_ready.httpx, "get", lambda url, timeout: _Models())
    monkeypatch.setattr(app_ready, "read_pool_activity", lambda base: readings.pop(0) if len(readings) > 1 else readings[0])
    return readings


def test_waits_for_the_pool_still_starting(app):
    app += [_pools(short=1, long=0), _pools(short=1, long=0), _pools(short=1, long=1)]
    said = []
    assert app_ready.wait_until_serving("http://app", timeout_s=60, say=said.append) == "SmolLM2-135M-Instruct"
    assert said == ["waiting for pools ['long'] to serve (up to 60 s) ..."]


def test_a_pool_that_never_serves_is_named_with_the_timeout(app):
    app.append(_pools(short=0, long=1))
    with pytest.raises(ValueError, match=r"pools \['short'\] had no replica serving within the ready timeout of 0 s"):
        app_ready.wait_until_serving("http://app", timeout_s=0, say=lambda _: None)


def test_an_endpoint_without_pools_serves_once_it_answers(app):
    app.append(None)
    assert app_ready.wait_until_serving("http://vllm", timeout_s=0) == "SmolLM2-135M-Instruct"


def test_no_app_is_a_clear_error(monkeypatch):
    def refuse(url, timeout):
        raise httpx.ConnectError("connection refused")
    monkeypatch.setattr(app_ready.httpx, "get", refuse)
    monkeypatch.setattr(app_ready, "POLL_S", 0.0)
    said = []
    with pytest.raises(ValueError, match="no app answers /v1/models at http://nowhere within the ready timeout "
                                         "of 0.2 s: connection refused"):
        app_ready.wait_until_serving("http://nowhere", timeout_s=0.2, say=said.append)
    assert said == ["waiting for the app at http://nowhere to answer (up to 0.2 s) ..."]  # said once
