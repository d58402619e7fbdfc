"""A request body past the configured size is refused with 413 before anything parses it."""

from __future__ import annotations

import json
from typing import Callable

from core.errors import error_body
from router.asgi import Message, Receive, Scope, Send, TrackedSend


class BodyTooLarge(Exception):
    pass


class BodyLimit:
    """ASGI middleware: a declared Content-Length over `max_bytes` is refused at once; a body
    sent without one (chunked) is counted as it arrives and refused when it passes the limit."""

    def __init__(self, app: Callable, max_bytes: int) -> None:
        self._app = app
        self._max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self._max_bytes:
            await self._refuse(send, f"{int(declared)} bytes declared")
            return
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self._max_bytes:
                    raise BodyTooLarge
            return message

        tracked = TrackedSend(send)
        try:
            await self._app(scope, counting_receive, tracked)
        except BodyTooLarge:
            if not tracked.started:
                await self._refuse(send, f"more than {self._max_bytes} bytes sent")

    async def _refuse(self, send: Send, seen: str) -> None:
        body = error_body(
            413, f"request body too large: {seen}; the limit is {self._max_bytes} bytes "
            f"(router.max_body_bytes)", code="body_too_large",
        )
        payload = json.dumps(body).encode()
        await send({"type": "http.response.start", "status": 413, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]})
        await send({"type": "http.response.body", "body": payload})
