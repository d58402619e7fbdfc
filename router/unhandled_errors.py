"""An endpoint's unhandled error as an OpenAI-style JSON answer, without touching the stream of
an answer that went well.

Ray Serve LLM's ingress app does this with Starlette's BaseHTTPMiddleware, which hands every
chunk of every streamed answer from one task to another through a memory stream: a task
switch per token in the router, the busiest loop of the app. This layer only watches whether
the answer has begun and passes each message straight on.
"""

from __future__ import annotations

from typing import Callable

from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import JSONResponse

from core.upstream import response_for_error
from router.asgi import Receive, Scope, Send, TrackedSend


class UnhandledErrors:
    """ASGI middleware: an exception raised before the answer began becomes Ray Serve LLM's
    error answer for it (its status, its message, the request id); one raised after goes on up,
    as nothing can be said in its place."""

    def __init__(self, app: Callable) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        tracked = TrackedSend(send)
        try:
            await self._app(scope, receive, tracked)
        except Exception as error:  # a cancelled request (BaseException) goes on up as it is
            if tracked.started:
                raise
            request_id = (scope.get("state") or {}).get("request_id")
            body = response_for_error(error, request_id)
            await JSONResponse(content=body.model_dump(), status_code=body.error.code)(scope, receive, send)


def without_buffering_error_layer(middleware: list[Middleware]) -> list[Middleware]:
    """The app's middleware with Ray Serve LLM's BaseHTTPMiddleware (its only one) replaced by
    UnhandledErrors, in the same place of the stack."""
    return [Middleware(UnhandledErrors) if entry.cls is BaseHTTPMiddleware else entry for entry in middleware]
