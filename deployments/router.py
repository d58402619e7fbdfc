"""The router: an OpenAI ingress that gives every request a scenario and a pool."""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncGenerator

from fastapi import HTTPException, Request
from pydantic import ValidationError
from ray.llm._internal.serve.core.configs.openai_api_models import (
    ChatCompletionRequest,
    CompletionRequest,
    ErrorResponse,
    ModelCard,
    OpenAIHTTPException,
)
from ray.llm._internal.serve.core.ingress.ingress import OpenAiIngress, router_request_timeout
from ray.llm._internal.serve.core.ingress.utils import (
    NON_STREAMING_RESPONSE_TYPES,
    _openai_json_wrapper,
    _peek_at_generator,
    _sanitize_chat_completion_request,
)
from ray.llm._internal.serve.core.protocol import RawRequestInfo
from ray.llm._internal.serve.observability.logging import get_logger
from ray.serve.handle import DeploymentHandle
from starlette.responses import JSONResponse, Response, StreamingResponse

from deployments.routing import RouteDecision, RouteRequest, RoutingPolicy
from deployments.scenarios import apply_profile
from deployments.token_counter import PromptTokenCounter
from serve_app.config import ScenarioConfig, TrilemmaConfig
from serve_app.errors import ApiError, error_body, validation_error

logger = get_logger(__name__)

SCENARIO_HEADER = "x-scenario"
POOL_HEADER = "x-trilemma-pool"
# A replica that cannot report its clock in this long is stuck; say so rather than hang.
POOL_ACTIVITY_TIMEOUT_S = 10.0


class TrilemmaRouter(OpenAiIngress):
    """Ray's OpenAI ingress, with pools chosen per request instead of per model.

    All pools serve the same model under one public name; which pool serves a request is
    the router's business: its scenario (path or X-Scenario header) sets caps and the pools
    it may use, and the routing policy picks among those by the request's size.
    """

    def __init__(
        self,
        pools: dict[str, DeploymentHandle],
        model_card: ModelCard,
        config: TrilemmaConfig,
        tokenizer_source: str,
    ) -> None:
        # The base class answers /v1/models from its model cards; one card, the public name.
        first_pool = next(iter(pools.values()))
        super().__init__(
            llm_deployments={model_card.id: first_pool}, model_cards={model_card.id: model_card}
        )
        self._model_name = model_card.id
        self._config = config
        self._pools = {name: handle.options(stream=True) for name, handle in pools.items()}
        self._policy = RoutingPolicy.from_config(config.routing)
        self._token_counter = PromptTokenCounter(tokenizer_source)
        self._token_counter.load()

    # HTTP endpoints (paths in serve_app.http_api).

    async def chat(self, body: ChatCompletionRequest, request: Request) -> Response:
        return await self._serve(body, "chat", request, scenario_in_path=None)

    async def completions(self, body: CompletionRequest, request: Request) -> Response:
        return await self._serve(body, "completions", request, scenario_in_path=None)

    async def scenario_chat(
        self, scenario: str, body: ChatCompletionRequest, request: Request
    ) -> Response:
        return await self._serve(body, "chat", request, scenario_in_path=scenario)

    async def scenario_completions(
        self, scenario: str, body: CompletionRequest, request: Request
    ) -> Response:
        return await self._serve(body, "completions", request, scenario_in_path=scenario)

    async def scenario_request(self, scenario: str, request: Request) -> Response:
        """`POST /api/<scenario>`: a chat body (with `messages`) or a completion body."""
        try:
            raw = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ApiError(400, f"malformed JSON body: {error}", code="invalid_json") from None
        if not isinstance(raw, dict):
            raise ApiError(400, "request body must be a JSON object", code="invalid_request")
        is_chat = "messages" in raw
        try:
            body = (ChatCompletionRequest if is_chat else CompletionRequest).model_validate(raw)
        except ValidationError as error:
            raise validation_error(error) from None
        return await self._serve(
            body, "chat" if is_chat else "completions", request, scenario_in_path=scenario
        )

    async def scenario_models(self, scenario: str):
        self._scenario(scenario, from_path=True)
        return await self.models()

    async def pool_activity(self) -> dict[str, Any]:
        """`GET /trilemma/pools`: every replica's engine busy clock and each pool's price.

        Clients diff two readings to get utilization over a window (the benchmark does).
        """
        readings = await asyncio.gather(*(
            handle.broadcast("engine_activity").results_async(timeout_s=POOL_ACTIVITY_TIMEOUT_S)
            for handle in self._pools.values()
        ))
        return {
            "pools": {
                name: {
                    "accelerator": self._config.pools[name].accelerator,
                    "price_usd_per_hour": self._config.pools[name].price_usd_per_hour,
                    "replicas": replicas,
                }
                for name, replicas in zip(self._pools, readings)
            }
        }

    # The request path.

    async def _serve(
        self, body: Any, call_method: str, request: Request, scenario_in_path: str | None
    ) -> Response:
        scenario_name = scenario_in_path or request.headers.get(
            SCENARIO_HEADER, self._config.routing.default_scenario
        )
        scenario = self._scenario(scenario_name, from_path=scenario_in_path is not None)
        if body.model not in (None, self._model_name):
            raise ApiError(
                404,
                f"model {body.model!r} does not exist; this server serves {self._model_name!r}",
                code="model_not_found",
                param="model",
            )
        headers = {"x-trilemma-scenario": scenario_name}
        try:
            applied = apply_profile(body, scenario)
            prompt_tokens = await self._count_prompt(body, call_method)
            headers["x-trilemma-prompt-tokens"] = str(prompt_tokens)
            max_tokens = self._fit_default_budget(body, prompt_tokens, applied)
            decision = self._route(
                scenario_name, scenario, prompt_tokens, max_tokens, request.headers.get(POOL_HEADER)
            )
            headers.update({"x-trilemma-pool": decision.pool, "x-trilemma-route-reason": decision.reason})
            if self._config.pools[decision.pool].uses_priority_scheduling:
                body.priority = scenario.priority
            response = await self._forward(decision.pool, call_method, body, request)
        except ApiError as error:
            # Errors say as much of the route as was decided, like answers do.
            error.headers.update(headers)
            raise
        response.headers.update(headers)
        if applied.adjustments:
            response.headers["x-trilemma-adjustments"] = "; ".join(applied.adjustments)
        return response

    async def _count_prompt(self, body: Any, call_method: str) -> int:
        if call_method == "chat":
            return await self._token_counter.count_chat(body.messages)
        return await self._token_counter.count_completion(body.prompt)

    def _scenario(self, name: str, *, from_path: bool) -> ScenarioConfig:
        scenario = self._config.scenarios.get(name)
        if scenario is None:
            where = "path /api/<scenario>" if from_path else "X-Scenario header"
            raise ApiError(
                404 if from_path else 400,
                f"unknown scenario {name!r} in {where}; configured: {sorted(self._config.scenarios)}",
                code="unknown_scenario",
            )
        return scenario

    def _fit_default_budget(self, body: Any, prompt_tokens: int, applied) -> int:
        """A budget the client never asked for shrinks to fit; an explicit one is honoured or refused."""
        largest = self._config.largest_max_model_len
        if applied.defaulted and prompt_tokens < largest < prompt_tokens + applied.max_tokens:
            body.max_tokens = largest - prompt_tokens
            return body.max_tokens
        return applied.max_tokens

    def _route(
        self,
        scenario_name: str,
        scenario: ScenarioConfig,
        prompt_tokens: int,
        max_tokens: int,
        pinned_pool: str | None,
    ) -> RouteDecision:
        pools = self._config.pools
        need = prompt_tokens + max_tokens
        largest = self._config.largest_max_model_len
        if need > largest:
            raise ApiError(
                400,
                f"request needs {need} tokens (prompt {prompt_tokens} + max_tokens {max_tokens}), "
                f"over the largest pool's max_model_len of {largest}",
                code="context_length_exceeded",
                param="messages",
            )
        if pinned_pool is not None:
            pool = pools.get(pinned_pool)
            if pool is None:
                raise ApiError(
                    400,
                    f"X-Trilemma-Pool names unknown pool {pinned_pool!r}; pools: {sorted(pools)}",
                    code="unknown_pool",
                )
            if pool.max_model_len < need:
                raise ApiError(
                    400,
                    f"request needs {need} tokens, over pool {pinned_pool!r}'s "
                    f"max_model_len of {pool.max_model_len}",
                    code="context_length_exceeded",
                )
            return RouteDecision(pinned_pool, f"pinned by X-Trilemma-Pool; {need} tokens")
        candidates = {name: pool for name, pool in pools.items() if scenario.admits(name, pool)}
        request = RouteRequest(
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            scenario=scenario_name,
            prefer_cheapest=scenario.prefer == "cheapest",
        )
        decision = self._policy.choose(request, candidates) if candidates else None
        if decision is None:
            detail = (
                f": none of its pools {sorted(candidates)} takes {need} tokens"
                if candidates
                else ""
            )
            raise ApiError(
                503,
                f"no inference provider configured for scenario {scenario_name}{detail}",
                code="no_provider",
            )
        return decision

    async def _forward(
        self, pool: str, call_method: str, body: Any, request: Request
    ) -> Response:
        if isinstance(body, ChatCompletionRequest):
            body = _sanitize_chat_completion_request(body)
        raw_request = RawRequestInfo.from_starlette_request(request)
        handle = getattr(self._pools[pool], call_method)
        async with router_request_timeout(self._config.router.request_timeout_s):
            try:
                first, stream = await _peek_at_generator(handle.remote(body, raw_request))
            except (ApiError, HTTPException, OpenAIHTTPException):
                raise
            except StopAsyncIteration:
                raise ApiError(502, "llm request failed: the engine returned nothing") from None
            except Exception as error:  # the engine or its replica failed: not the client's fault
                logger.warning("pool %s failed a request: %r", pool, error)
                raise ApiError(502, f"llm request failed: {_reason(error)}", code="llm_request_failed") from None
        first_chunk = first[0] if isinstance(first, list) else first
        if isinstance(first_chunk, ErrorResponse):
            status = int(first_chunk.error.code or 500)
            if status >= 500:
                raise ApiError(502, f"llm request failed: {first_chunk.error.message}", code="llm_request_failed")
            raise ApiError(status, first_chunk.error.message, code=first_chunk.error.type)
        if isinstance(first_chunk, NON_STREAMING_RESPONSE_TYPES):
            return JSONResponse(content=first_chunk.model_dump())
        return StreamingResponse(_stream_with_errors(stream, pool), media_type="text/event-stream")


async def _stream_with_errors(stream: AsyncGenerator, pool: str) -> AsyncGenerator[str, None]:
    """Once streaming has begun the status is sent; a failure becomes a last error event."""
    try:
        async for packet in _openai_json_wrapper(stream):
            yield packet
    except Exception as error:
        logger.warning("pool %s failed mid-stream: %r", pool, error)
        body = error_body(502, f"llm request failed: {_reason(error)}", code="llm_request_failed")
        yield f"data: {json.dumps(body)}\n\ndata: [DONE]\n\n"


def _reason(error: BaseException) -> str:
    """The user-level message of a (possibly Ray-wrapped) exception, on one short line."""
    cause = getattr(error, "cause", None) or error.__cause__ or error
    return " ".join(str(cause).split())[:300] or type(cause).__name__
