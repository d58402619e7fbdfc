"""The router: an OpenAI ingress that gives every request a scenario and a pool."""

from __future__ import annotations

import asyncio
import functools
import time
from typing import Any, AsyncGenerator, Callable

from fastapi import Request
from pydantic import ValidationError
from ray.serve.handle import DeploymentHandle
from starlette.responses import JSONResponse, Response, StreamingResponse

from autoscaling.control_board import RayControlBoard, cost_profile_key
from core import wire
from core.config import ScenarioConfig, TrilemmaConfig
from core.errors import ApiError, validation_error
from core.price_catalog import ReplicaRate
from core.upstream import (
    NON_STREAMING_RESPONSE_TYPES,
    ChatCompletionRequest,
    CompletionRequest,
    ErrorResponse,
    ModelCard,
    ModelList,
    OpenAiIngress,
    get_logger,
)
from deployments.accounting import Accounting
from deployments.pool_client import PoolClient, PoolFailed
from deployments.pool_deployment import deployment_name
from deployments.pool_watch import PoolWatch
from deployments.stream_relay import relay
from serving.cost_profile import CostProfileWatch, apply_cost_profile
from serving.model_choice import ModelChoice
from serving.pool_choice import PoolChooser, PoolRequest
from serving.pool_health import PoolHealth
from serving.quality_ledger import QualityLedger
from serving.request_timeline import RequestTimeline
from serving.routing import RouteDecision, RoutingPolicy
from serving.scenarios import apply_profile, normalize_request, requested_max_tokens
from serving.token_counter import PromptTokenCounter

logger = get_logger(__name__)

# A replica that cannot report its clock in this long is stuck; say so rather than hang.
POOL_ACTIVITY_TIMEOUT_S = 10.0
# A request whose replica died before its first token is sent again at most this often: once
# is enough to survive a death, and a request that kills every engine it meets stops there.
MAX_RETRIES = 1


class TrilemmaRouter(OpenAiIngress):
    """Ray's OpenAI ingress, with pools chosen per request instead of per model.

    A request's model (its `model`, or its scenario's first) narrows the pools to those that
    serve it; the rest is the router's business: the scenario (path or X-Scenario header) sets
    caps and the pools it may use, and the routing policy picks among those by the request's size.
    """

    def __init__(
        self,
        pools: dict[str, DeploymentHandle],
        model_cards: dict[str, ModelCard],
        config: TrilemmaConfig,
        tokenizer_sources: dict[str, str],
        rates: dict[str, dict[str, float]],
        tenants: dict[str, dict[str, Any]],
        quality: dict[str, Any] | None = None,
    ) -> None:
        # The base class answers /v1/models from its model cards, one per public name; the handle
        # beside each is never called (requests go through the pool choice).
        super().__init__(
            llm_deployments={name: pools[config.pools_serving(name)[0]] for name in model_cards},
            model_cards=model_cards,
        )
        self._config = config
        self._models = ModelChoice(config)
        self._rates = {name: ReplicaRate(**rate) for name, rate in rates.items()}
        self._quality = QualityLedger.from_dict(quality) if quality else None
        policy = RoutingPolicy.from_config(
            config.routing, {name: rate.usd_per_hour for name, rate in self._rates.items()}, self._quality,
        )
        self._accounting = Accounting(tenants, config.tenants.spend_file)
        # One tokenizer per source: models that share one count alike.
        by_source = {source: PromptTokenCounter(source) for source in set(tokenizer_sources.values())}
        self._token_counters = {name: by_source[source] for name, source in tokenizer_sources.items()}
        for counter in by_source.values():
            counter.load()
        # Only the autoscaler puts the cost profile in force.
        self._cost_profile = CostProfileWatch(cost_profile_key(config.app_name)) \
            if config.autoscaling.enabled else None
        self._health = PoolHealth(pools)
        self._pool_chooser = PoolChooser(config, policy, self._health)
        self._pool_client = PoolClient(
            pools, self._health, config.router.request_timeout_s,
            by_reference=not config.transport.throughput_optimized,
        )
        self._pool_watch = PoolWatch(
            config.app_name, {name: deployment_name(name) for name in pools}, self._health, RayControlBoard()
        )

    # HTTP endpoints (paths in deployments.http_api).

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
        except ValueError as error:  # not JSON, or not UTF-8
            raise ApiError(400, f"malformed JSON body: {error}", code="invalid_json") from None
        except RecursionError:
            raise ApiError(400, "malformed JSON body: nested too deeply", code="invalid_json") from None
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

    async def scenario_models(self, scenario: str) -> ModelList:
        """`GET /api/<scenario>/models`: the models that scenario serves."""
        allowed = self._models.allowed(self._scenario(scenario, from_path=True))
        every = await self.models()
        return ModelList(data=[card for card in every.data if card.id in allowed])

    async def pool_activity(self) -> dict[str, Any]:
        """`GET /trilemma/pools`: every replica's engine busy clock and each pool's price.

        Clients diff two readings to get utilization over a window (the benchmark does).
        """
        names = list(self._config.pools)
        readings = await asyncio.gather(*(
            self._pool_client.handle(name).broadcast("engine_activity").results_async(timeout_s=POOL_ACTIVITY_TIMEOUT_S)
            for name in names
        ))
        return {
            "pools": {
                name: {
                    "model": self._config.pool_model(name).name,
                    "accelerator": self._config.pools[name].accelerator,
                    "price_usd_per_hour": self._rates[name].usd_per_hour,
                    "replicas": replicas,
                }
                for name, replicas in zip(names, readings)
            }
        }

    # The request path.

    async def _serve(
        self, body: Any, call_method: str, request: Request, scenario_in_path: str | None
    ) -> Response:
        scenario_name = scenario_in_path or request.headers.get(
            wire.SCENARIO_HEADER, self._config.routing.default_scenario
        )
        timeline = RequestTimeline.asked_for(request.headers)
        if timeline is not None:
            timeline.stamp("router_received")
        tenant = "unauthenticated"
        headers: dict[str, str] = {}
        # Set when the cost profile tightened the scenario's cap: the answer then says what the
        # cap gives up on the pool that served it.
        profile_cap: int | None = None
        self._pool_watch.start()
        try:
            # First: a caller without a key learns no more.
            tenant = self._accounting.authenticate(request.headers.get("authorization"))
            scenario = self._scenario(scenario_name, from_path=scenario_in_path is not None)
            headers[wire.SCENARIO_ANSWER_HEADER] = scenario_name
            profile = self._cost_profile.current() if self._cost_profile else None
            if profile is not None and profile.in_force:
                cheaper = apply_cost_profile(scenario, self._config.autoscaling.cost_profile)
                if cheaper is not scenario:
                    if cheaper.max_tokens_cap != scenario.max_tokens_cap:
                        profile_cap = cheaper.max_tokens_cap
                    scenario = cheaper
                    headers[wire.COST_PROFILE_HEADER] = profile.reason
            # The engine behind every pool of the model knows it by this name.
            body.model = self._models.resolve(body.model, scenario_name, scenario,
                                              request.headers.get(wire.POOL_HEADER))
            await self._accounting.check_budget(tenant)
            requested = requested_max_tokens(body)
            if requested is not None and requested < 1:
                raise ApiError(400, f"max_tokens must be at least 1, got {requested}",
                               code="invalid_request", param="max_tokens")
            applied = apply_profile(body, scenario)
            prompt_tokens = await self._count_prompt(body, call_method)
            if scenario.normalize_whitespace and normalize_request(body):
                original_tokens = prompt_tokens
                prompt_tokens = await self._count_prompt(body, call_method)
                self._accounting.metrics.prompt_tokens_saved(scenario_name, original_tokens - prompt_tokens)
            headers[wire.PROMPT_TOKENS_HEADER] = str(prompt_tokens)
            max_tokens = self._fit_default_budget(body, prompt_tokens, applied,
                                                  self._config.largest_max_model_len_for(body.model, scenario))
            headers[wire.PRIORITY_HEADER] = str(scenario.priority)
            response = await self._route_and_forward(
                body, call_method, request, scenario_name, scenario, tenant, prompt_tokens, max_tokens, headers,
                timeline,
            )
        except ApiError as error:
            # Errors say as much of the route as was decided, like answers do.
            error.headers.update(headers)
            # Label values come from the config, never from the request: bounded series.
            known = self._config.scenarios.get(scenario_name)
            self._accounting.record(
                pool=headers.get(wire.POOL_HEADER, "none"), scenario=scenario_name if known else "unknown",
                tenant=tenant, priority=known.priority if known else None, status=error.status, usage=None,
            )
            raise
        bound = profile_cap is not None and max_tokens == profile_cap and (requested is None or requested > profile_cap)
        if bound and self._quality is not None:  # the cap cut this request's budget
            note = self._quality.token_cap_note(headers[wire.POOL_HEADER], profile_cap)
            if note:
                headers[wire.COST_PROFILE_HEADER] += f"; {note}"
        response.headers.update(headers)
        if applied.adjustments:
            response.headers[wire.ADJUSTMENTS_HEADER] = "; ".join(applied.adjustments)
        return response

    async def _route_and_forward(
        self, body: Any, call_method: str, request: Request, scenario_name: str, scenario: ScenarioConfig,
        tenant: str, prompt_tokens: int, max_tokens: int, headers: dict[str, str],
        timeline: RequestTimeline | None,
    ) -> Response:
        """Routes the request and forwards it; a pool that loses its replica before the first
        token is marked down and the request routed again (headers say where it went and why)."""
        client_priority = body.priority
        failures: list[PoolFailed] = []
        while True:
            decision = self._route(
                scenario_name, scenario, body.model, prompt_tokens, max_tokens, request.headers.get(wire.POOL_HEADER)
            )
            retried = "".join(f"; retried after {failure}" for failure in failures)
            headers.update({wire.POOL_HEADER: decision.pool, wire.ROUTE_REASON_HEADER: decision.reason + retried})
            body.priority = self._engine_priority(decision.pool, scenario, client_priority)
            record = functools.partial(
                self._accounting.record, pool=decision.pool, scenario=scenario_name, tenant=tenant,
                priority=scenario.priority,
            )
            try:
                return await self._forward(
                    decision.pool, call_method, body, request, prompt_tokens, max_tokens, scenario_name,
                    scenario, record, timeline,
                )
            except PoolFailed as failure:
                self._health.failed(failure.pool, failure.reason)
                failures.append(failure)
                if len(failures) > MAX_RETRIES:
                    raise ApiError(
                        502, f"llm request failed: {'; then '.join(map(str, failures))}; not sent "
                        f"again (at most {MAX_RETRIES} retry per request)", code="llm_request_failed",
                    ) from None
                logger.warning("%s; sending the request again", failure)

    async def _count_prompt(self, body: Any, call_method: str) -> int:
        """In the tokens of the request's model (resolved before this is called)."""
        counter = self._token_counters[body.model]
        if call_method == "chat":
            return await counter.count_chat(body.messages)
        return await counter.count_completion(body.prompt)

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

    @staticmethod
    def _fit_default_budget(body: Any, prompt_tokens: int, applied, largest: int) -> int:
        """A budget the client never asked for shrinks to fit the largest pool of the request's
        model (`largest`); an explicit one is honoured or refused."""
        if applied.defaulted and prompt_tokens < largest < prompt_tokens + applied.max_tokens:
            body.max_tokens = largest - prompt_tokens
            return body.max_tokens
        return applied.max_tokens

    def _route(
        self, scenario_name: str, scenario: ScenarioConfig, model: str, prompt_tokens: int, max_tokens: int,
        pinned_pool: str | None,
    ) -> RouteDecision:
        return self._pool_chooser.choose(PoolRequest(
            scenario_name=scenario_name, scenario=scenario, model=model, prompt_tokens=prompt_tokens,
            max_tokens=max_tokens, pinned_pool=pinned_pool,
        ))

    async def _forward(
        self, pool: str, call_method: str, body: Any, request: Request, prompt_tokens: int,
        max_tokens: int, scenario_name: str, scenario: ScenarioConfig, record: Callable[..., None],
        timeline: RequestTimeline | None,
    ) -> Response:
        client_wants_usage = bool(body.stream and body.stream_options and body.stream_options.include_usage)
        first, stream, ttft_ms = await self._pool_client.open(
            pool, call_method, body, request, prompt_tokens, scenario.priority, timeline
        )
        first_chunk = first[0] if isinstance(first, list) else first
        if isinstance(first_chunk, ErrorResponse):
            status = int(first_chunk.error.code or 500)
            if status >= 500:
                raise ApiError(502, f"llm request failed: {first_chunk.error.message}", code="llm_request_failed")
            raise ApiError(status, first_chunk.error.message, code=first_chunk.error.type)
        if isinstance(first_chunk, NON_STREAMING_RESPONSE_TYPES):
            content = first_chunk.model_dump()
            usage = content.get("usage") or {}
            record(status=200, usage=usage)
            cost = usage.get("cost_usd")
            headers = {wire.COST_HEADER: f"{cost:.6e}"} if cost is not None else {}
            return JSONResponse(content=content, headers=headers)
        first_token_at = time.perf_counter()

        def on_usage(usage: dict[str, Any]) -> None:
            record(status=200, usage=usage, ttft_s=ttft_ms / 1000, decode_s=time.perf_counter() - first_token_at)

        async def resume(following: Any, reason: str) -> tuple[str, AsyncGenerator]:
            """Goes on with the answer elsewhere: the dead pool is closed, the rest routed anew."""
            self._health.failed(pool, reason)
            sent = max_tokens - following.max_tokens
            decision = self._route(
                scenario_name, scenario, body.model, prompt_tokens + sent, following.max_tokens,
                request.headers.get(wire.POOL_HEADER),
            )
            # The client's own priority is not known here any more; 0 is every engine's default.
            following.priority = self._engine_priority(decision.pool, scenario, 0)
            _, rest, _ = await self._pool_client.open(
                decision.pool, call_method, following, request, prompt_tokens + sent, scenario.priority
            )
            return decision.pool, rest

        return StreamingResponse(
            relay(stream, pool, body=body, max_tokens=max_tokens, prompt_tokens=prompt_tokens,
                  keep_usage=client_wants_usage, on_usage=on_usage, resume=resume, timeline=timeline),
            media_type="text/event-stream",
            headers={wire.TTFT_HEADER: f"{ttft_ms:.1f}"},
        )

    def _engine_priority(self, pool: str, scenario: ScenarioConfig, client_priority: int) -> int:
        """Only an engine that schedules by priority accepts one: the scenario's there."""
        return scenario.priority if self._config.pools[pool].uses_priority_scheduling else client_priority

