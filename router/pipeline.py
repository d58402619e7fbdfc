"""The router's request path, as stages over one RoutedRequest:

    admit             the tenant's key and budget, the scenario (and the cost profile in force), the model
    shape             the scenario's caps and defaults on the body, the prompt sized in the model's tokens
    route_and_forward a pool planned on the prompt's size and the request sent to it; moved when
                      the exact count changes the plan, sent again when its replica dies first
    answer            the route, the cost profile and the adjustments named in the answer's headers
    refused           a refusal metered and told where it was decided

Each stage reads and writes the request object; none calls back into the router. The stages are
plain code over their collaborators (router/ingress.py builds them), so the whole path runs in
tests with fake pool handles and no Ray (tests/unit/router/test_pipeline.py).
"""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass
from typing import Any, AsyncGenerator, Callable

from starlette.responses import JSONResponse, Response, StreamingResponse

from core import wire
from core.config import ScenarioConfig, TrilemmaConfig
from core.errors import ApiError
from core.upstream import NON_STREAMING_RESPONSE_TYPES, ErrorResponse, get_logger
from router.accounting import Accounting
from router.board_watch import BoardWatch
from router.cost_profile import CostProfileWatch, apply_cost_profile
from router.model_choice import ModelChoice
from router.pool_choice import PoolChooser, PoolRequest
from router.pool_client import PoolClient, PoolFailed
from router.pool_health import PoolHealth
from router.quality_ledger import QualityLedger
from router.route_plan import Replanned, RoutePlan, confirmed_plan, first_plan, fit_default_budget
from router.routed_request import RoutedRequest
from router.routing import RouteDecision
from router.routing_threshold import ThresholdInForce
from router.scenarios import apply_profile, normalize_request, requested_max_tokens
from router.stream_relay import relay
from router.token_counter import PromptSize, PromptTokenCounter

logger = get_logger(__name__)

# A request whose replica died before its first token is sent again at most this often: once
# is enough to survive a death, and a request that kills every engine it meets stops there.
MAX_RETRIES = 1


@dataclass(frozen=True)
class RouterParts:
    """What the pipeline decides with and sends through; the router builds them from its config."""

    config: TrilemmaConfig
    models: ModelChoice
    accounting: Accounting
    token_counters: dict[str, PromptTokenCounter]  # by public model name
    pool_chooser: PoolChooser
    health: PoolHealth
    pool_client: PoolClient
    quality: QualityLedger | None = None
    cost_profile: CostProfileWatch | None = None     # only the autoscaler puts one in force
    threshold: BoardWatch[ThresholdInForce] | None = None  # only the traffic split moves it


class RequestPipeline:
    def __init__(self, parts: RouterParts) -> None:
        self._parts = parts
        self._config = parts.config

    async def serve(self, request: RoutedRequest) -> Response:
        """The answer to `request`, or its refusal raised as an ApiError."""
        try:
            await self.admit(request)
            self.shape(request)
            response = await self.route_and_forward(request)
        except ApiError as error:
            self.refused(request, error)
            raise
        return self.answer(request, response)

    # The stages, in order.

    async def admit(self, request: RoutedRequest) -> None:
        parts = self._parts
        # First: a caller without a key learns no more.
        request.tenant = parts.accounting.authenticate(request.http.headers.get("authorization"))
        scenario = self.scenario(request.scenario_name, from_path=request.scenario_in_path)
        request.answer_headers[wire.SCENARIO_ANSWER_HEADER] = request.scenario_name
        profile = parts.cost_profile.current() if parts.cost_profile else None
        if profile is not None and profile.in_force:
            cheaper = apply_cost_profile(scenario, self._config.autoscaling.cost_profile)
            if cheaper is not scenario:
                if cheaper.max_tokens_cap != scenario.max_tokens_cap:
                    request.profile_cap = cheaper.max_tokens_cap
                scenario = cheaper
                request.answer_headers[wire.COST_PROFILE_HEADER] = profile.reason
        request.scenario = scenario
        # A request that names no model gets its tenant's adapter, where the tenant has one.
        requested = request.body.model or parts.accounting.default_adapter(request.tenant)
        pick = parts.models.pick(requested, request.scenario_name, scenario, request.pinned_pool)
        # The engine behind every pool of the model knows it by this name (an adapter's by its own,
        # set as the request leaves: router.pool_client).
        request.body.model, request.adapter = pick.model, pick.adapter
        await parts.accounting.check_budget(request.tenant)

    def shape(self, request: RoutedRequest) -> None:
        request.requested_max_tokens = requested = requested_max_tokens(request.body)
        if requested is not None and requested < 1:
            raise ApiError(400, f"max_tokens must be at least 1, got {requested}",
                           code="invalid_request", param="max_tokens")
        request.applied = apply_profile(request.body, request.scenario)
        request.size = self._size_prompt(request)
        request.client_priority = request.body.priority
        request.answer_headers[wire.PRIORITY_HEADER] = str(request.scenario.priority)

    async def route_and_forward(self, request: RoutedRequest) -> Response:
        """Routes the request and forwards it: first on the prompt's estimated size while its
        tokens are counted, moved when the count changes the plan; a pool that loses its replica
        before the first token is marked down and the request routed again (headers say where
        it went and why)."""
        failures: list[PoolFailed] = []
        plan_for = functools.partial(self.plan, request)
        plan = await first_plan(request.size, plan_for)
        while True:
            if plan.exact:  # else named once the count confirms the plan
                request.name_route(plan)
            request.body.priority = self._engine_priority(plan.decision.pool, request.scenario, request.client_priority)
            request.body.max_tokens = plan.max_tokens  # the budget fitted to the plan's prompt size
            confirming = None if plan.exact else asyncio.ensure_future(
                confirmed_plan(plan, request.size, plan_for, request.name_route))
            try:
                return await self.forward(request, plan, confirming)
            except asyncio.CancelledError:  # the client left
                if confirming is not None:
                    confirming.cancel()
                raise
            except Replanned as moved:
                request.moves.append(str(moved))
                self._parts.accounting.metrics.route_moved(
                    request.scenario_name, moved.was.decision.pool, moved.plan.decision.pool)
                plan = moved.plan
                continue
            except PoolFailed as failure:
                self._parts.health.failed(failure.pool, failure.reason)
                failures.append(failure)
                request.moves.append(f"retried after {failure}")
                if len(failures) > MAX_RETRIES:
                    raise ApiError(
                        502, f"llm request failed: {'; then '.join(map(str, failures))}; not sent "
                        f"again (at most {MAX_RETRIES} retry per request)", code="llm_request_failed",
                    ) from None
                logger.warning("%s; sending the request again", failure)
            plan = plan_for(await request.size.exact, exact=True)

    async def forward(
        self, request: RoutedRequest, plan: RoutePlan, confirming: asyncio.Future[RoutePlan] | None,
    ) -> Response:
        """Sends the request on `plan`; when that was made on the estimate, `confirming` holds
        its first item until the exact count confirms the plan (raising Replanned if not)."""
        body, pool = request.body, plan.decision.pool
        client_wants_usage = bool(body.stream and body.stream_options and body.stream_options.include_usage)
        first, stream, ttft_ms = await self._parts.pool_client.open(
            pool, request.call_method, body, request.http, plan.prompt_tokens, request.scenario.priority,
            request.timeline, hold=confirming, adapter=request.adapter,
        )
        prompt_tokens = (confirming.result() if confirming else plan).prompt_tokens
        record = self._recorder(request, pool)
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

        return StreamingResponse(
            relay(stream, pool, body=body, max_tokens=plan.max_tokens, prompt_tokens=prompt_tokens,
                  keep_usage=client_wants_usage, on_usage=on_usage,
                  resume=functools.partial(self._resume, request, pool, plan.max_tokens, prompt_tokens),
                  timeline=request.timeline),
            media_type="text/event-stream",
            headers={wire.TTFT_HEADER: f"{ttft_ms:.1f}"},
        )

    def answer(self, request: RoutedRequest, response: Response) -> Response:
        headers = request.answer_headers
        cap, requested = request.profile_cap, request.requested_max_tokens
        bound = cap is not None and request.body.max_tokens == cap and (requested is None or requested > cap)
        if bound and self._parts.quality is not None:  # the cap cut this request's budget
            note = self._parts.quality.token_cap_note(headers[wire.POOL_HEADER], cap)
            if note:
                headers[wire.COST_PROFILE_HEADER] += f"; {note}"
        response.headers.update(headers)
        if request.applied.adjustments:
            response.headers[wire.ADJUSTMENTS_HEADER] = "; ".join(request.applied.adjustments)
        return response

    def refused(self, request: RoutedRequest, error: ApiError) -> None:
        # Errors say as much of the route as was decided, like answers do.
        error.headers.update(request.answer_headers)
        # Label values come from the config, never from the request: bounded series.
        known = self._config.scenarios.get(request.scenario_name)
        self._parts.accounting.record(
            pool=request.answer_headers.get(wire.POOL_HEADER, "none"),
            scenario=request.scenario_name if known else "unknown", tenant=request.tenant,
            adapter=request.adapter_label, priority=known.priority if known else None, status=error.status,
            usage=None,
        )

    # What the stages share.

    def scenario(self, name: str, *, from_path: bool) -> ScenarioConfig:
        scenario = self._config.scenarios.get(name)
        if scenario is None:
            where = "path /api/<scenario>" if from_path else "X-Scenario header"
            raise ApiError(
                404 if from_path else 400,
                f"unknown scenario {name!r} in {where}; configured: {sorted(self._config.scenarios)}",
                code="unknown_scenario",
            )
        return scenario

    def plan(self, request: RoutedRequest, prompt_tokens: int, *, exact: bool) -> RoutePlan:
        """The pool and budget for a prompt of `prompt_tokens`; raises the request's refusal."""
        applied = request.applied
        max_tokens = fit_default_budget(
            prompt_tokens, applied.max_tokens, defaulted=applied.defaulted,
            largest=self._config.largest_max_model_len_for(request.body.model, request.scenario),
        )
        return RoutePlan(self._route(request, prompt_tokens, max_tokens), prompt_tokens, max_tokens, exact)

    def _route(self, request: RoutedRequest, prompt_tokens: int, max_tokens: int) -> RouteDecision:
        return self._parts.pool_chooser.choose(PoolRequest(
            scenario_name=request.scenario_name, scenario=request.scenario, model=request.body.model,
            prompt_tokens=prompt_tokens, max_tokens=max_tokens, pinned_pool=request.pinned_pool,
            threshold_tokens=self._split_threshold(), adapter=request.adapter,
        ))

    def _split_threshold(self) -> int | None:
        """The traffic split's threshold once it has set one; None: the config's."""
        if self._parts.threshold is None:
            return None
        current = self._parts.threshold.current()
        return current.tokens if current.set_by_split else None

    def _size_prompt(self, request: RoutedRequest) -> PromptSize:
        """In the tokens of the request's model (resolved by admit), after the scenario's
        whitespace normalization, whose saving is metered once both counts are done."""
        body, counter = request.body, self._parts.token_counters[request.body.model]

        def size() -> PromptSize:
            if request.call_method == "chat":
                return counter.size_chat(body.messages)
            return counter.size_completion(body.prompt)

        original = size()
        if not (request.scenario.normalize_whitespace and normalize_request(body)):
            return original
        normalized = size()

        def meter_saving(both: asyncio.Future) -> None:
            if not both.cancelled() and both.exception() is None:
                before, after = both.result()
                self._parts.accounting.metrics.prompt_tokens_saved(request.scenario_name, before - after)

        asyncio.gather(original.exact, normalized.exact).add_done_callback(meter_saving)
        return normalized

    def _recorder(self, request: RoutedRequest, pool: str) -> Callable[..., None]:
        """Meters the request's outcome on `pool` (the answer's usage, or its status)."""
        return functools.partial(self._parts.accounting.record, pool=pool, scenario=request.scenario_name,
                                 tenant=request.tenant, adapter=request.adapter_label,
                                 priority=request.scenario.priority)

    async def _resume(
        self, request: RoutedRequest, pool: str, max_tokens: int, prompt_tokens: int, following: Any, reason: str,
    ) -> tuple[str, AsyncGenerator]:
        """Goes on with a stream whose pool died mid-answer: the dead pool is closed, the rest
        (`following`, the request less what was sent) routed anew."""
        self._parts.health.failed(pool, reason)
        sent = max_tokens - following.max_tokens
        decision = self._route(request, prompt_tokens + sent, following.max_tokens)
        # The client's own priority is not known here any more; 0 is every engine's default.
        following.priority = self._engine_priority(decision.pool, request.scenario, 0)
        _, rest, _ = await self._parts.pool_client.open(
            decision.pool, request.call_method, following, request.http, prompt_tokens + sent,
            request.scenario.priority, adapter=request.adapter,
        )
        return decision.pool, rest

    def _engine_priority(self, pool: str, scenario: ScenarioConfig, client_priority: int) -> int:
        """Only an engine that schedules by priority accepts one: the scenario's there."""
        return scenario.priority if self._config.pools[pool].uses_priority_scheduling else client_priority
