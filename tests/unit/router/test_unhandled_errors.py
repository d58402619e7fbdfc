"""An endpoint's unhandled error becomes an OpenAI-style answer with its status, a stream that
already began is left alone, and the router's app carries this layer instead of Starlette's
buffering BaseHTTPMiddleware."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import StreamingResponse

from router.unhandled_errors import UnhandledErrors


class Refused(Exception):
    status_code = 409


def _client() -> TestClient:
    app = FastAPI()

    @app.get("/fails")
    async def fails() -> dict:
        raise RuntimeError("the engine said no")

    @app.get("/refuses")
    async def refuses() -> dict:
        raise Refused("already there")

    @app.get("/stream")
    async def stream() -> StreamingResponse:
        async def tokens():
            yield "data: one\n\n"
            raise RuntimeError("cut mid-stream")

        return StreamingResponse(tokens(), media_type="text/event-stream")

    @app.get("/ok")
    async def ok() -> dict:
        return {"fine": True}

    app.add_middleware(UnhandledErrors)
    return TestClient(app, raise_server_exceptions=True)


def test_an_error_before_the_answer_is_a_json_error_with_its_status():
    client = _client()
    failed = client.get("/fails")
    assert failed.status_code == 500 and failed.json()["error"]["code"] == 500
    refused = client.get("/refuses")
    assert refused.status_code == 409
    assert "already there" in refused.json()["error"]["message"]
    assert client.get("/ok").json() == {"fine": True}


def test_an_error_after_the_answer_began_is_not_answered_twice():
    with pytest.raises(RuntimeError, match="cut mid-stream"):
        _client().get("/stream")


def test_the_router_app_has_no_buffering_middleware():
    from router.http_api import router_app

    layers = [entry.cls for entry in router_app(max_body_bytes=1024).user_middleware]
    assert BaseHTTPMiddleware not in layers
    assert UnhandledErrors in layers
