"""What the router's ASGI layers share: the ASGI callables' types, and a send that remembers
whether the answer has begun (after its first message, nothing can be answered in its place)."""

from __future__ import annotations

from typing import Any, Awaitable, Callable

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class TrackedSend:
    """`send`, noting whether any message went out."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False

    async def __call__(self, message: Message) -> None:
        self.started = True
        await self._send(message)
