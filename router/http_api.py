"""The HTTP surface of the router: its paths and how its errors look."""

from __future__ import annotations

from fastapi import FastAPI

from core import wire
from core.errors import ApiError, install_error_handlers
from core.upstream import ModelCard, ModelList, OpenAIHTTPException, make_fastapi_ingress, new_ingress_app
from router.body_limit import BodyLimit
from router.ingress import TrilemmaRouter
from router.unhandled_errors import without_buffering_error_layer

# Router method -> route. The OpenAI paths, plus one family per scenario, so that
# `OpenAI(base_url=".../api/batch")` works as well as a plain POST to /api/batch.
ROUTER_ENDPOINTS = {
    "models": lambda app: app.get("/v1/models", response_model=ModelList),
    "model_data": lambda app: app.get("/v1/models/{model:path}", response_model=ModelCard),
    "chat": lambda app: app.post("/v1/chat/completions"),
    "completions": lambda app: app.post("/v1/completions"),
    "scenario_request": lambda app: app.post("/api/{scenario}"),
    "scenario_chat": lambda app: app.post("/api/{scenario}/chat/completions"),
    "scenario_completions": lambda app: app.post("/api/{scenario}/completions"),
    "scenario_models": lambda app: app.get("/api/{scenario}/models", response_model=ModelList),
    "pool_activity": lambda app: app.get(wire.POOLS_PATH),
    # What plain `vllm serve` answers beside the OpenAI paths (router.server_endpoints).
    "server_health": lambda app: app.get("/health"),
    "server_version": lambda app: app.get("/version"),
    "server_metrics": lambda app: app.get("/metrics"),
    "tokenize": lambda app: app.post("/tokenize"),
    "detokenize": lambda app: app.post("/detokenize"),
    "embeddings": lambda app: app.post("/v1/embeddings"),
}


def router_ingress_class(max_body_bytes: int) -> type:
    """TrilemmaRouter as a Serve ingress on the router's FastAPI app (`router_app`)."""
    return make_fastapi_ingress(TrilemmaRouter, endpoint_map=ROUTER_ENDPOINTS, app=router_app(max_body_bytes))


def router_app(max_body_bytes: int) -> FastAPI:
    """Ray Serve LLM's ingress app with OpenAI-style errors, streams passed on as they come, and
    bodies over `max_body_bytes` refused before they are parsed."""
    app: FastAPI = new_ingress_app()
    app.user_middleware[:] = without_buffering_error_layer(app.user_middleware)
    install_error_handlers(app)

    @app.exception_handler(OpenAIHTTPException)
    async def _ingress_error(_, error: OpenAIHTTPException):  # raised by Ray's ingress (/v1/models/...)
        return ApiError(error.status_code, error.message, code=error.type).to_response()

    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    return app
