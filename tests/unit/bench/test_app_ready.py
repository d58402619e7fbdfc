"""Long benchmarks wait until every pool of the app they load serves, an app just started too."""

from __future__ import annotations

import httpx
import pytest

from bench import app_ready
from core import wire


class _Answer:
    def __init__(self, status_code: int, body: dict | None = None) -> None:
        self.status_code, self._body = status_code, body

    def json(self):
        return self._body


MODELS = _Answer(200, {"data": [{"id": "SmolLM2-135M-Instruct"}]})
# What the router answers while its pools' replicas start: the broadcast to them fails.
STARTING = _Answer(500, {"error": {"message": "timed out"}})


def _pools(**replicas):
    return _Answer(200, {"pools": {name: {"accelerator": "cpu", "price_usd_per_hour": 1.0, "replicas": [{}] * count}
                                   for name, count in replicas.items()}})


@pytest.fixture
def app(monkeypatch):
    """An app whose answers on the pools path come from a list, one per poll (the last repeats);
    an exception in the list is raised, as httpx raises a refused connection."""
    readings: list = []

    def get(url, timeout):
        if url.endswith("/v1/models"):
            if isinstance(readings[0], Exception):
                raise readings.pop(0)
            return MODELS
        assert url.endswith(wire.POOLS_PATH)
        return readings.pop(0) if len(readings) > 1 else readings[0]

    monkeypatch.setattr(app_ready, "POLL_S", 0.0)
    monkeypatch.setattr(app_ready.httpx, "get", get)
    return readings


def test_waits_for_an_app_just_started_and_then_for_each_pool(app):
    app += [httpx.ConnectError("connection refused"), STARTING, _pools(short=1, long=0), _pools(short=1, long=1)]
    said = []
    assert app_ready.wait_until_serving("http://app", timeout_s=60, say=said.append) == "SmolLM2-135M-Instruct"
    assert said == [
        "waiting: no app answers /v1/models: connection refused (up to 60 s) ...",
        f"waiting: the pools do not answer {wire.POOLS_PATH} (HTTP 500) (up to 60 s) ...",
        "waiting: pools ['long'] have no replica serving (up to 60 s) ...",
    ]


def test_a_pool_that_never_serves_is_named_with_the_timeout(app):
    app.append(_pools(short=0, long=1))
    with pytest.raises(ValueError, match=r"pools \['short'\] have no replica serving within the ready timeout of 0 s"):
        app_ready.wait_until_serving("http://app", timeout_s=0, say=lambda _: None)


def test_an_endpoint_without_pools_serves_once_it_answers(app):
    app.append(_Answer(404))  # plain vLLM has no pools path
    assert app_ready.wait_until_serving("http://vllm", timeout_s=0) == "SmolLM2-135M-Instruct"


def test_no_app_is_a_clear_error(app):
    app.append(httpx.ConnectError("connection refused"))
    with pytest.raises(ValueError, match="no app answers /v1/models: connection refused within the ready timeout "
                                         "of 0 s at http://nowhere"):
        app_ready.wait_until_serving("http://nowhere", timeout_s=0, say=lambda _: None)


def test_a_process_that_ended_is_not_waited_for(app):
    app.append(httpx.ConnectError("connection refused"))
    with pytest.raises(ValueError, match="the app ended before it served: no app answers"):
        app_ready.wait_until_serving("http://app", timeout_s=600, say=lambda _: None, alive=lambda: False)
