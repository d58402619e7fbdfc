"""The router's calls into a pool: a request sent, its first item awaited, and its failure
told apart: the pool refusing it (429) or its LoRA adapter (400, 422), the engine failing it
(502), or the replica gone (PoolFailed, safe to send elsewhere while nothing reached the client)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncGenerator

from fastapi import HTTPException, Request
from ray.serve.handle import DeploymentHandle

from contract.pool_faults import AdapterUnusable, BaseModelRefused, PoolOverloaded, one_line, replica_failure
from contract.request_timeline import RequestTimeline
from core import wire
from core.errors import ApiError
from core.upstream import (
    ChatCompletionRequest,
    OpenAIHTTPException,
    RawRequestInfo,
    StreamOptions,
    get_logger,
    peek_at_generator,
    router_request_timeout,
    sanitize_chat_completion_request,
)
from router.pool_health import PoolHealth

logger = get_logger(__name__)

# How often a request that waits for its first item looks whether its pool went down.
OUTAGE_CHECK_INTERVAL_S = 0.5


class PoolFailed(Exception):
    """The pool lost the replica serving a request before anything reached the client."""

    def __init__(self, pool: str, reason: str) -> None:
        super().__init__(pool, reason)
        self.pool, self.reason = pool, reason

    def __str__(self) -> str:
        return f"pool {self.pool!r} failed: {self.reason}"


class PoolClient:
    """Sends requests to the pools through their streaming handles, watching the health the
    router keeps of them while a request waits.

    `by_reference` is how requests and chunks travel: through Ray's object store (True) or by
    gRPC straight to the replica (False). Set here, from the config, because a handle's default
    is whatever the process that built the app had in its environment when it imported Ray
    Serve: `trilemma serve` imports it before it sets the transport, and its handles went through
    the object store while the config asked for gRPC (a chunk took 25 ms from replica to router at
    16 streams, against 1.3 ms by gRPC: bench/results/hops-fake-pace/README.md).
    """

    def __init__(
        self, pools: dict[str, DeploymentHandle], health: PoolHealth, request_timeout_s: float, *,
        by_reference: bool,
    ) -> None:
        self._pools = {name: handle.options(stream=True, _by_reference=by_reference) for name, handle in pools.items()}
        self._health = health
        self._request_timeout_s = request_timeout_s

    def handle(self, pool: str) -> DeploymentHandle:
        return self._pools[pool]

    async def open(
        self, pool: str, call_method: str, body: Any, request: Request, prompt_tokens: int, priority: int,
        timeline: RequestTimeline | None = None, hold: asyncio.Future | None = None, adapter: str | None = None,
    ) -> tuple[Any, AsyncGenerator, float]:
        """Sends the request to the pool: its first item, the stream (from that item on) and
        the time to it, in ms. A replica that is gone raises PoolFailed: safe to send elsewhere.

        `hold`, when given, is the caller's last word on the request, given while it travels:
        nothing is returned or raised before `hold` is done, and if it raises, the request is
        withdrawn (its call cancelled) and that error raised.

        `adapter`, a LoRA adapter of the body's model, goes as the request's model (vLLM applies
        the adapter registered under that name) and as its multiplexed model id, by which Serve's
        routers prefer a replica that holds it and the replica loads it if it does not."""
        if isinstance(body, ChatCompletionRequest):
            body = sanitize_chat_completion_request(body)
        if body.stream:
            # The engine's last chunk carries usage and cost only when asked; we always ask, and
            # pass that chunk on only to clients that asked too. On a copy: a request sent again
            # must still say what its client asked for.
            options = body.stream_options.model_copy(update={"include_usage": True}) \
                if body.stream_options else StreamOptions(include_usage=True)
            body = body.model_copy(update={"stream_options": options})
        pool_handle = self._pools[pool]
        if adapter is not None:
            body = body.model_copy(update={"model": adapter})
            pool_handle = pool_handle.options(multiplexed_model_id=adapter)
        raw_request = RawRequestInfo.from_starlette_request(request)
        raw_request.headers[wire.PROMPT_TOKENS_HEADER] = str(prompt_tokens)
        raw_request.headers[wire.PRIORITY_HEADER] = str(priority)  # the pool's queue orders by it
        handle = getattr(pool_handle, call_method)
        started = time.perf_counter()
        if timeline is not None:
            timeline.stamp("router_sent")
        async with router_request_timeout(self._request_timeout_s):
            try:
                first, stream = await self._first_item(pool, handle.remote(body, raw_request), hold)
                if timeline is not None:
                    timeline.stamp("router_first_item")
            except Exception as error:
                if _raised_by(hold, error):
                    raise
                raise self._failure(pool, error) from None
        return first, stream, (time.perf_counter() - started) * 1000

    @staticmethod
    def _failure(pool: str, error: Exception) -> Exception:
        """What a failed call means for the request: the pool's refusal, the engine's error, or
        a replica gone."""
        if isinstance(error, (ApiError, HTTPException, OpenAIHTTPException, PoolFailed)):
            return error
        if isinstance(error, StopAsyncIteration):
            return ApiError(502, "llm request failed: the engine returned nothing")
        # The engine or its replica failed: not the client's fault.
        refusal = _refusal_of(error)
        if isinstance(refusal, PoolOverloaded):
            return ApiError(429, refusal.message, code="pool_overloaded",
                            headers={"Retry-After": str(refusal.retry_after_s)})
        if isinstance(refusal, (AdapterUnusable, BaseModelRefused)):  # refused before its engine saw it
            return ApiError(refusal.status, refusal.message, code=refusal.code, param="model")
        gone = replica_failure(error)
        if gone is not None:  # nothing reached the client yet: safe to send elsewhere
            return PoolFailed(pool, gone)
        logger.warning("pool %s failed a request: %r", pool, error)
        return ApiError(502, f"llm request failed: {one_line(error)}", code="llm_request_failed")

    async def _first_item(self, pool: str, call: Any, hold: asyncio.Future | None) -> tuple[Any, AsyncGenerator]:
        """The call's first item and its stream, once `hold` is done (see `open`). A pool that
        goes down while the request waits (its replica died with the request queued for it, or
        none runs) ends the wait: Serve would hold the request until a new replica serves,
        minutes for an engine, and requests queued for a replica as it died were seen to wait
        longer still."""
        peeking = asyncio.ensure_future(peek_at_generator(call))
        pending = {peeking} if hold is None else {peeking, hold}
        try:
            while pending:
                done, pending = await asyncio.wait(
                    pending, timeout=OUTAGE_CHECK_INTERVAL_S, return_when=asyncio.FIRST_COMPLETED
                )
                if hold in done and (hold.cancelled() or hold.exception() is not None):
                    call.cancel()
                    hold.result()  # raises the caller's reason
                outage = self._health.outage(pool) if peeking in pending else None
                if outage is not None:
                    call.cancel()
                    raise PoolFailed(pool, f"it went down while the request waited ({outage.reason})")
            return peeking.result()
        finally:
            if not peeking.done():
                peeking.cancel()
            elif not peeking.cancelled():
                peeking.exception()  # seen, when the request was withdrawn after its call failed


def _raised_by(future: asyncio.Future | None, error: BaseException) -> bool:
    return future is not None and future.done() and not future.cancelled() and future.exception() is error


def _refusal_of(error: BaseException) -> PoolOverloaded | AdapterUnusable | BaseModelRefused | None:
    """The pool's refusal inside a (possibly Ray-wrapped) exception. Ray's wrapper is an
    instance of the original class too, but with Ray's traceback as its text: prefer its cause."""
    for candidate in (getattr(error, "cause", None), error.__cause__, error):
        if isinstance(candidate, (PoolOverloaded, AdapterUnusable, BaseModelRefused)):
            return candidate
    return None
