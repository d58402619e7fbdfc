"""Bodies past the router's limit get a 413 that names the limit, declared or streamed."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.testclient import TestClient

from router.body_limit import BodyLimit

LIMIT = 1024


def _client() -> TestClient:
    app = FastAPI()

    @app.post("/echo")
    async def echo(request: Request) -> dict:
        return {"bytes": len(await request.body())}

    app.add_middleware(BodyLimit, max_bytes=LIMIT)
    return TestClient(app)


def test_a_body_within_the_limit_passes():
    assert _client().post("/echo", content=b"x" * LIMIT).json() == {"bytes": LIMIT}


def test_a_declared_body_over_the_limit_is_refused_before_it_is_read():
    response = _client().post("/echo", content=b"x" * (LIMIT + 1))
    assert response.status_code == 413
    error = response.json()["error"]
    assert error["code"] == "body_too_large"
    assert f"{LIMIT + 1} bytes declared; the limit is {LIMIT} bytes (router.max_body_bytes)" in error["message"]


def test_a_chunked_body_is_counted_as_it_arrives():
    def chunks():
        for _ in range(4):
            yield b"x" * 512

    response = _client().post("/echo", content=chunks())
    assert response.status_code == 413
    assert f"more than {LIMIT} bytes sent" in response.json()["error"]["message"]
