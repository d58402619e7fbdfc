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

from autoscaling.control_board import RayControlBoard, cost_profile_key, split_key
from core import wire
from core.config import ScenarioConfig, TrilemmaConfig
from core.errors import ApiError, validation_error
from core.price_catalog import ReplicaRate
from core.upstream import (
    NON_STREAMING_RESPONSE_TYPES,
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    EmbeddingRequest,
    ErrorResponse,
    ModelCard,
    ModelList,
    OpenAiIngress,
    TokenizeRequest,
    get_logger,
)
from deployments.accounting import Accounting
from deployments.pool_client import PoolClient, PoolFailed
from deployments.pool_deployment import deployment_name
from deployments.pool_watch import PoolWatch
from deployments.server_endpoints import ServerEndpoints
from deployments.stream_relay import relay
from serving.cost_profile import CostProfileWatch, apply_cost_profile
from serving.routing_threshold import threshold_watch
from serving.model_choice import ModelChoice
from serving.pool_choice import PoolChooser, PoolRequest
from serving.pool_health import PoolHealth
from serving.quality_ledger import QualityLedger
from serving.request_timeline import RequestTimeline
from serving.route_plan import PlanFor, Replanned, RoutePlan, confirmed_plan, first_plan, fit_default_budget
from serving.routing import RouteDecision, RoutingPolicy
from serving.scenarios import AppliedProfile, apply_profile, normalize_request, requested_max_tokens
from serving.token_counter import PromptSize, PromptTokenCounter

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
        # The traffic split moves the threshold; without it the config's holds.
        self._threshold = threshold_watch(split_key(config.app_name), config.routing.short_context_threshold_tokens) \
            if config.autoscaling.enabled and config.autoscaling.split.enabled else None
        self._health = PoolHealth(pools)
        self._pool_chooser = PoolChooser(config, policy, self._health)
        self._pool_client = PoolClient(
            pools, self._health, config.router.request_timeout_s,
            by_reference=not config.transport.throughput_optimized,
        )
        self._pool_watch = PoolWatch(
            config.app_name, {name: deployment_name(name) for name in pools}, self._health, RayControlBoard()
        )
        self._server = ServerEndpoints(config, self._models, self._health, self._pool_client)

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

    async def server_health(self) -> Response:
        """`GET /health`: 200 while a pool can serve (vLLM's health check, for load balancers)."""
        self._pool_watch.start()
        return self._server.health()

    async def server_version(self) -> dict[str, str]:
        return self._server.version()

    async def server_metrics(self) -> Response:
        """`GET /metrics` on the serving port, as `vllm serve` has it: this node's metrics."""
        return await self._server.metrics()

    async def tokenize(self, body: TokenizeRequest, request: Request) -> Response:
        self._pool_watch.start()
        return await self._server.through_pool("tokenize", body, request)

    async def detokenize(self, body: DetokenizeRequest, request: Request) -> Response:
        self._pool_watch.start()
        return await self._server.through_pool("detokenize", body, request)

    async def embeddings(self, body: EmbeddingRequest, request: Request) -> Response:
        """`POST /v1/embeddings`: a tenant's request like any under /v1; the pool's engine embeds,
        or refuses as plain vLLM does for a model that does not embed."""
        self._pool_watch.start()
        self._accounting.authenticate(request.headers.get("authorization"))
        return await self._server.through_pool("embeddings", body, request)

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
            size = self._size_prompt(body, call_method, scenario_name, scenario)
            plan_for = functools.partial(
                self._plan, scenario_name, scenario, body.model, applied, request.headers.get(wire.POOL_HEADER)
            )
            headers[wire.PRIORITY_HEADER] = str(scenario.priority)
            response = await self._route_and_forward(
                body, call_method, request, scenario_name, scenario, tenant, size, plan_for, headers, timeline,
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
        bound = profile_cap is not None and body.max_tokens == profile_cap and (
            requested is None or requested > profile_cap)
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
        tenant: str, size: PromptSize, plan_for: PlanFor, headers: dict[str, str],
        timeline: RequestTimeline | None,
    ) -> Response:
        """Routes the request and forwards it: first on the prompt's estimated size while its
        tokens are counted, moved when the count changes the plan; a pool that loses its replica
        before the first token is marked down and the request routed again (headers say where
        it went and why)."""
        client_priority = body.priority
        failures: list[PoolFailed] = []
        moves: list[str] = []  # what came before this attempt, for the route's reason
        plan = await first_plan(size, plan_for)
        while True:
            history = "".join(f"; {move}" for move in moves)
            if plan.exact:  # else named once the count confirms the plan
                self._name_route(headers, plan, history)
            body.priority = self._engine_priority(plan.decision.pool, scenario, client_priority)
            body.max_tokens = plan.max_tokens  # the budget fitted to the plan's prompt size
            record = functools.partial(
                self._accounting.record, pool=plan.decision.pool, scenario=scenario_name, tenant=tenant,
                priority=scenario.priority,
            )
            confirming = None if plan.exact else asyncio.ensure_future(confirmed_plan(
                plan, size, plan_for, functools.partial(self._name_route, headers, history=history)
            ))
            try:
                return await self._forward(
                    plan, call_method, body, request, scenario_name, scenario, record, timeline, confirming,
                )
            except asyncio.CancelledError:  # the client left
                if confirming is not None:
                    confirming.cancel()
                raise
            except Replanned as moved:
                moves.append(str(moved))
                self._accounting.metrics.route_moved(scenario_name, moved.was.decision.pool, moved.plan.decision.pool)
                plan = moved.plan
                continue
            except PoolFailed as failure:
                self._health.failed(failure.pool, failure.reason)
                failures.append(failure)
                moves.append(f"retried after {failure}")
                if len(failures) > MAX_RETRIES:
                    raise ApiError(
                        502, f"llm request failed: {'; then '.join(map(str, failures))}; not sent "
                        f"again (at most {MAX_RETRIES} retry per request)", code="llm_request_failed",
                    ) from None
                logger.warning("%s; sending the request again", failure)
            plan = plan_for(await size.exact, exact=True)

    def _size_prompt(self, body: Any, call_method: str, scenario_name: str, scenario: ScenarioConfig) -> PromptSize:
        """In the tokens of the request's model (resolved before this is called), after the
        scenario's whitespace normalization, whose saving is metered once both counts are done."""
        counter = self._token_counters[body.model]

        def size() -> PromptSize:
            return counter.size_chat(body.messages) if call_method == "chat" else counter.size_completion(body.prompt)

        original = size()
        if not (scenario.normalize_whitespace and normalize_request(body)):
            return original
        normalized = size()

        def meter_saving(both: asyncio.Future) -> None:
            if not both.cancelled() and both.exception() is None:
                before, after = both.result()
                self._accounting.metrics.prompt_tokens_saved(scenario_name, before - after)

        asyncio.gather(original.exact, normalized.exact).add_done_callback(meter_saving)
        return normalized

    def _plan(
        self, scenario_name: str, scenario: ScenarioConfig, model: str, applied: AppliedProfile,
        pinned_pool: str | None, prompt_tokens: int, *, exact: bool,
    ) -> RoutePlan:
        """The pool and budget for a prompt of `prompt_tokens`; raises the request's refusal."""
        max_tokens = fit_default_budget(
            prompt_tokens, applied.max_tokens, defaulted=applied.defaulted,
            largest=self._config.largest_max_model_len_for(model, scenario),
        )
        decision = self._route(scenario_name, scenario, model, prompt_tokens, max_tokens, pinned_pool)
        return RoutePlan(decision, prompt_tokens, max_tokens, exact)

    @staticmethod
    def _name_route(headers: dict[str, str], plan: RoutePlan, history: str = "") -> None:
        """Where the request went, why, and its prompt's size: named on the exact count only."""
        headers.update({
            wire.POOL_HEADER: plan.decision.pool,
            wire.ROUTE_REASON_HEADER: plan.decision.reason + history,
            wire.PROMPT_TOKENS_HEADER: str(plan.prompt_tokens),
        })

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

    def _route(
        self, scenario_name: str, scenario: ScenarioConfig, model: str, prompt_tokens: int, max_tokens: int,
        pinned_pool: str | None,
    ) -> RouteDecision:
        return self._pool_chooser.choose(PoolRequest(
            scenario_name=scenario_name, scenario=scenario, model=model, prompt_tokens=prompt_tokens,
            max_tokens=max_tokens, pinned_pool=pinned_pool,
            threshold_tokens=self._split_threshold(),
        ))

    def _split_threshold(self) -> int | None:
        """The traffic split's threshold once it has set one; None: the config's."""
        if self._threshold is None:
            return None
        current = self._threshold.current()
        return current.tokens if current.set_by_split else None

    async def _forward(
        self, plan: RoutePlan, call_method: str, body: Any, request: Request, scenario_name: str,
        scenario: ScenarioConfig, record: Callable[..., None], timeline: RequestTimeline | None,
        confirming: asyncio.Future[RoutePlan] | None,
    ) -> Response:
        """Sends the request on `plan`; when that was made on the estimate, `confirming` holds
        its first item until the exact count confirms the plan (raising Replanned if not)."""
        pool, max_tokens = plan.decision.pool, plan.max_tokens
        client_wants_usage = bool(body.stream and body.stream_options and body.stream_options.include_usage)
        first, stream, ttft_ms = await self._pool_client.open(
            pool, call_method, body, request, plan.prompt_tokens, scenario.priority, timeline, hold=confirming
        )
        prompt_tokens = (confirming.result() if confirming else plan).prompt_tokens
        first_chunk = first[0] if isinstance(first, list) else first
        if isinstance(first_chunk, ErrorResponse):
            status = int(first_chunk.error.code or 500)
            if status >= 500:
                raise ApiError(502, f"llm request failed: {first_chunk.error.message}", code="llm_request_failed")
            # As vLLM wrote it: its type, param and code (the status again), as docs/api.md says.
            raise ApiError(status, first_chunk.error.message, code=first_chunk.error.code,
                           param=first_chunk.error.param, error_type=first_chunk.error.type)
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

