"""The router's request path (router/pipeline.py) end to end without Ray: fake pool handles
behind the real PoolClient and PoolHealth, the real pool choice and route plans on the shipped
config, a token counter whose estimate and exact count each test sets, and a ledger that keeps
what the pipeline booked."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse

from contract.pool_faults import EngineDied, PoolOverloaded
from core import wire
from core.config import TrilemmaConfig
from core.errors import ApiError
from core.upstream import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    CompletionRequest,
    CompletionResponse,
    ErrorResponse,
)
from router.model_choice import ModelChoice
from router.pipeline import MAX_RETRIES, RequestPipeline, RouterParts
from router.pool_choice import PoolChooser
from router.pool_client import PoolClient
from router.pool_health import PoolHealth
from router.routed_request import RoutedRequest
from router.routing import RoutingPolicy
from router.token_counter import PromptSize
from tests.support import config_for_tests

CONFIG = config_for_tests()
MODEL = next(iter(CONFIG.models))
SHORT, LONG = 100, 3000  # prompt tokens either side of the 1024-token threshold


def answer(text: str = "hello", prompt_tokens: int = SHORT) -> ChatCompletionResponse:
    return ChatCompletionResponse.model_validate({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 1, "total_tokens": prompt_tokens + 1,
                  "cost_usd": 2e-7},
    })


def sse(event: dict[str, Any]) -> str:
    return f"data: {json.dumps(event)}\n\n"


STREAM = [
    sse({"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": MODEL,
         "choices": [{"index": 0, "delta": {"role": "assistant", "content": "hel"}}]}),
    sse({"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": MODEL,
         "choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]}),
    sse({"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": MODEL, "choices": [],
         "usage": {"prompt_tokens": SHORT, "completion_tokens": 2, "total_tokens": SHORT + 2, "cost_usd": 3e-7}}),
    "data: [DONE]\n\n",
]


class FakeCall:
    """A streaming handle call: the replica's items one by one, or the error it raised."""

    def __init__(self, outcome: list[Any] | BaseException) -> None:
        self._outcome = outcome
        self.cancelled = False

    def __aiter__(self) -> FakeCall:
        return self

    async def __anext__(self) -> Any:
        await asyncio.sleep(0)
        if isinstance(self._outcome, BaseException):
            raise self._outcome
        if not self._outcome:
            raise StopAsyncIteration
        return self._outcome.pop(0)

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class FakePoolHandle:
    """A pool's DeploymentHandle as PoolClient calls it; each call takes the next outcome."""

    outcomes: list[list[Any] | BaseException] = field(default_factory=list)
    sent: list[tuple[str, Any, dict[str, str]]] = field(default_factory=list)  # (method, body, headers)
    multiplexed: list[str | None] = field(default_factory=list)  # each call's multiplexed model id
    multiplexed_model_id: str | None = None

    def options(self, **options: Any) -> FakePoolHandle:
        if "multiplexed_model_id" in options:  # a handle of its own, sharing what is recorded
            return dataclasses.replace(self, multiplexed_model_id=options["multiplexed_model_id"])
        return self

    @property
    def chat(self) -> _Method:
        return _Method(self, "chat")

    @property
    def completions(self) -> _Method:
        return _Method(self, "completions")


@dataclass
class _Method:
    handle: FakePoolHandle
    name: str

    def remote(self, body: Any, raw_request: Any) -> FakeCall:
        self.handle.sent.append((self.name, body.model_copy(), dict(raw_request.headers)))
        self.handle.multiplexed.append(self.handle.multiplexed_model_id)
        outcome = self.handle.outcomes.pop(0) if self.handle.outcomes else [answer()]
        return FakeCall(list(outcome) if isinstance(outcome, list) else outcome)


class ScriptedCounter:
    """A prompt's estimate and exact count as the test sets them; the count is done at once, or
    when the test says (`count_done`)."""

    def __init__(self, estimate: int, exact: int, *, counted: bool = True) -> None:
        self.estimate, self.exact, self.counted = estimate, exact, counted
        self.pending: list[asyncio.Future[int]] = []

    def _size(self) -> PromptSize:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if self.counted:
            future.set_result(self.exact)
        else:
            self.pending.append(future)
        return PromptSize(self.estimate, future)

    def size_chat(self, messages: Any) -> PromptSize:
        return self._size()

    def size_completion(self, prompt: Any) -> PromptSize:
        return self._size()

    def count_done(self) -> None:
        for future in self.pending:
            future.set_result(self.exact)


class FakeMetrics:
    def __init__(self) -> None:
        self.moves: list[tuple[str, str, str]] = []

    def route_moved(self, scenario: str, was: str, now: str) -> None:
        self.moves.append((scenario, was, now))

    def prompt_tokens_saved(self, scenario: str, tokens: int) -> None:
        pass


class Ledger:
    """Accounting as the pipeline uses it, keeping what was booked: no Ray actor behind it."""

    def __init__(self, keys: dict[str, str] | None = None, default_adapters: dict[str, str] | None = None) -> None:
        self.keys = keys
        self.default_adapters = default_adapters or {}
        self.booked: list[dict[str, Any]] = []
        self.metrics = FakeMetrics()

    def authenticate(self, authorization: str | None) -> str:
        if self.keys is None:
            return "default"
        tenant = self.keys.get((authorization or "").removeprefix("Bearer "))
        if tenant is None:
            raise ApiError(401, "invalid API key", code="invalid_api_key")
        return tenant

    async def check_budget(self, tenant: str) -> None:
        pass

    def default_adapter(self, tenant: str) -> str | None:
        return self.default_adapters.get(tenant)

    def record(self, **booking: Any) -> None:
        self.booked.append(booking)


@dataclass
class Router:
    pipeline: RequestPipeline
    pools: dict[str, FakePoolHandle]
    ledger: Ledger
    health: PoolHealth


def router(counter: ScriptedCounter, *, ledger: Ledger | None = None, config: TrilemmaConfig = CONFIG) -> Router:
    pools = {name: FakePoolHandle() for name in config.pools}
    health = PoolHealth(pools)
    ledger = ledger or Ledger()
    policy = RoutingPolicy.from_config(config.routing, {name: 1.0 for name in config.pools}, None)
    parts = RouterParts(
        config=config, models=ModelChoice(config), accounting=ledger, token_counters={MODEL: counter},
        pool_chooser=PoolChooser(config, policy, health), health=health,
        pool_client=PoolClient(pools, health, request_timeout_s=30.0, by_reference=False),
    )
    return Router(RequestPipeline(parts), pools, ledger, health)


def http(headers: dict[str, str] | None = None) -> Request:
    return Request({"type": "http", "method": "POST", "path": "/v1/chat/completions", "query_string": b"",
                    "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]})


def chat(**fields: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest(**{"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **fields})


async def serve(r: Router, body: Any, *, headers: dict[str, str] | None = None, scenario_in_path: str | None = None,
                call_method: str = "chat"):
    request = RoutedRequest.received(body, call_method, http(headers), scenario_in_path=scenario_in_path,
                                     default_scenario=CONFIG.routing.default_scenario)
    return await r.pipeline.serve(request)


async def read_stream(response: StreamingResponse) -> str:
    return "".join([part if isinstance(part, str) else part.decode() async for part in response.body_iterator])


async def test_a_short_prompt_is_served_by_the_short_pool_and_the_answer_says_why():
    r = router(ScriptedCounter(SHORT, SHORT))
    response = await serve(r, chat())
    assert isinstance(response, JSONResponse)
    assert json.loads(response.body)["choices"][0]["message"]["content"] == "hello"
    headers = response.headers
    assert headers[wire.POOL_HEADER] == "short" and headers[wire.PROMPT_TOKENS_HEADER] == str(SHORT)
    assert headers[wire.SCENARIO_ANSWER_HEADER] == "chat" and headers[wire.PRIORITY_HEADER] == "0"
    assert "1024" in headers[wire.ROUTE_REASON_HEADER]
    assert headers[wire.COST_HEADER] == f"{2e-7:.6e}"
    assert [method for method, _, _ in r.pools["short"].sent] == ["chat"] and not r.pools["long"].sent
    (booking,) = r.ledger.booked
    assert booking["pool"] == "short" and booking["scenario"] == "chat" and booking["status"] == 200
    assert booking["usage"]["cost_usd"] == 2e-7


async def test_a_long_prompt_goes_to_the_long_pool():
    r = router(ScriptedCounter(LONG, LONG))
    response = await serve(r, chat())
    assert response.headers[wire.POOL_HEADER] == "long" and not r.pools["short"].sent


async def test_the_pool_gets_the_scenario_budget_priority_and_the_routers_count():
    r = router(ScriptedCounter(SHORT, SHORT))
    await serve(r, chat(max_tokens=1000, priority=5), headers={wire.SCENARIO_HEADER: "cost"})
    (_, body, headers), = r.pools["short"].sent
    assert body.max_tokens == CONFIG.scenarios["cost"].max_tokens_cap  # the scenario's cap
    # The short pool schedules by priority: the scenario's, not the client's.
    assert body.priority == CONFIG.scenarios["cost"].priority
    assert headers[wire.PROMPT_TOKENS_HEADER.lower()] == str(SHORT)
    assert headers[wire.PRIORITY_HEADER.lower()] == str(CONFIG.scenarios["cost"].priority)


async def test_the_scenario_comes_from_the_path_before_the_header():
    r = router(ScriptedCounter(SHORT, SHORT))
    response = await serve(r, chat(), headers={wire.SCENARIO_HEADER: "cost"}, scenario_in_path="batch")
    assert response.headers[wire.SCENARIO_ANSWER_HEADER] == "batch"


@pytest.mark.parametrize(("in_path", "status", "where"), [(False, 400, "X-Scenario header"),
                                                          (True, 404, "path /api/<scenario>")])
async def test_an_unknown_scenario_is_refused_and_booked_without_its_name(in_path, status, where):
    r = router(ScriptedCounter(SHORT, SHORT))
    with pytest.raises(ApiError) as refused:
        await serve(r, chat(), headers=None if in_path else {wire.SCENARIO_HEADER: "nope"},
                    scenario_in_path="nope" if in_path else None)
    assert refused.value.status == status and where in refused.value.message
    assert "configured: ['batch', 'chat', 'closed', 'cost', 'quality']" in refused.value.message
    (booking,) = r.ledger.booked
    assert booking == {"pool": "none", "scenario": "unknown", "tenant": "default", "priority": None, "adapter": "base",
                       "status": status, "usage": None}


async def test_a_caller_without_a_key_learns_nothing_more():
    r = router(ScriptedCounter(SHORT, SHORT), ledger=Ledger(keys={"secret": "acme"}))
    with pytest.raises(ApiError) as refused:
        await serve(r, chat(), headers={wire.SCENARIO_HEADER: "nope"})
    assert refused.value.status == 401 and wire.SCENARIO_ANSWER_HEADER not in refused.value.headers
    response = await serve(r, chat(), headers={"Authorization": "Bearer secret"})
    assert r.ledger.booked[-1]["tenant"] == "acme" and response.status_code == 200


@pytest.mark.parametrize("fields", [{"max_tokens": 0}, {"max_completion_tokens": 0}])
async def test_a_budget_below_one_token_is_a_400_naming_it(fields):
    r = router(ScriptedCounter(SHORT, SHORT))
    with pytest.raises(ApiError) as refused:
        await serve(r, chat(**fields))
    assert refused.value.status == 400 and refused.value.param == "max_tokens"
    assert "got 0" in refused.value.message
    assert refused.value.headers[wire.SCENARIO_ANSWER_HEADER] == "chat"  # as far as it was decided
    assert not r.pools["short"].sent


async def test_a_scenario_no_pool_serves_is_refused_before_any_pool_is_called():
    r = router(ScriptedCounter(SHORT, SHORT))
    with pytest.raises(ApiError) as refused:
        await serve(r, chat(), headers={wire.SCENARIO_HEADER: "closed"})
    assert (refused.value.status, refused.value.code) == (503, "no_provider")
    assert not any(pool.sent for pool in r.pools.values())


async def sent_while_the_count_runs(r, request) -> asyncio.Future:
    """The request served as far as its first item to the short pool; the count has not returned."""
    serving = asyncio.ensure_future(serve(r, request))
    while not r.pools["short"].sent:
        await asyncio.sleep(0)
    return serving


async def test_a_plan_made_on_the_estimate_moves_when_the_exact_count_differs():
    counter = ScriptedCounter(SHORT, LONG, counted=False)
    r = router(counter)
    # The short pool holds the request's first item until the count confirms its plan.
    serving = await sent_while_the_count_runs(r, chat())
    counter.count_done()
    response = await serving
    assert response.headers[wire.POOL_HEADER] == "long"
    assert response.headers[wire.PROMPT_TOKENS_HEADER] == str(LONG)
    assert "moved from pool 'short'" in response.headers[wire.ROUTE_REASON_HEADER]
    assert r.ledger.metrics.moves == [("chat", "short", "long")]
    assert [booking["pool"] for booking in r.ledger.booked] == ["long"]  # the withdrawn call is not booked


async def test_a_plan_the_exact_count_confirms_stays_and_is_named_then():
    counter = ScriptedCounter(SHORT, SHORT + 7, counted=False)
    r = router(counter)
    serving = await sent_while_the_count_runs(r, chat())
    counter.count_done()
    response = await serving
    assert response.headers[wire.POOL_HEADER] == "short"
    assert response.headers[wire.PROMPT_TOKENS_HEADER] == str(SHORT + 7)
    assert "moved" not in response.headers[wire.ROUTE_REASON_HEADER] and not r.ledger.metrics.moves


async def test_a_replica_that_dies_before_the_first_token_is_retried_elsewhere():
    r = router(ScriptedCounter(SHORT, SHORT))
    r.pools["short"].outcomes = [EngineDied("short", "killed")]
    response = await serve(r, chat())
    assert response.headers[wire.POOL_HEADER] == "long"  # the short pool is marked down
    assert "retried after pool 'short' failed: its engine died (killed)" in response.headers[wire.ROUTE_REASON_HEADER]
    assert r.health.outage("short") is not None


async def test_a_request_that_kills_every_replica_it_meets_stops_after_one_retry():
    r = router(ScriptedCounter(SHORT, SHORT))
    r.pools["short"].outcomes = [EngineDied("short", "killed")]
    r.pools["long"].outcomes = [EngineDied("long", "killed too")]
    with pytest.raises(ApiError) as refused:
        await serve(r, chat())
    assert refused.value.status == 502 and refused.value.code == "llm_request_failed"
    assert f"at most {MAX_RETRIES} retry per request" in refused.value.message
    assert "its engine died (killed); then pool 'long' failed" in refused.value.message
    assert r.ledger.booked[-1]["status"] == 502 and r.ledger.booked[-1]["pool"] == "long"


async def test_a_pool_that_sheds_the_request_answers_429_with_retry_after():
    r = router(ScriptedCounter(SHORT, SHORT))
    r.pools["short"].outcomes = [PoolOverloaded("short", 0, "queue of 8 full", retry_after_s=3)]
    with pytest.raises(ApiError) as refused:
        await serve(r, chat())
    assert refused.value.status == 429 and refused.value.headers["Retry-After"] == "3"
    assert refused.value.headers[wire.POOL_HEADER] == "short"
    assert not r.pools["long"].sent  # a refusal is not a death: not sent elsewhere


async def test_an_engine_refusal_passes_through_as_vllm_wrote_it():
    r = router(ScriptedCounter(SHORT, SHORT))
    refusal = ErrorResponse.model_validate({"error": {"message": "bad logit_bias", "type": "BadRequestError",
                                                      "param": "logit_bias", "code": 400}})
    r.pools["short"].outcomes = [[refusal]]
    with pytest.raises(ApiError) as refused:
        await serve(r, chat())
    error = refused.value
    assert (error.status, error.param, error.error_type, error.message) == (400, "logit_bias", "BadRequestError",
                                                                            "bad logit_bias")


async def test_an_engine_failure_is_a_502():
    r = router(ScriptedCounter(SHORT, SHORT))
    failure = ErrorResponse.model_validate({"error": {"message": "boom", "type": "InternalServerError",
                                                      "code": 500}})
    r.pools["short"].outcomes = [[failure]]
    with pytest.raises(ApiError) as refused:
        await serve(r, chat())
    assert refused.value.status == 502 and "boom" in refused.value.message


async def test_a_stream_is_relayed_and_its_usage_booked_with_its_timings():
    r = router(ScriptedCounter(SHORT, SHORT))
    r.pools["short"].outcomes = [list(STREAM)]
    response = await serve(r, chat(stream=True))
    assert isinstance(response, StreamingResponse)
    assert response.headers[wire.POOL_HEADER] == "short" and wire.TTFT_HEADER in response.headers
    text = await read_stream(response)
    assert '"content": "hel"' in text and text.endswith("data: [DONE]\n\n")
    assert '"usage"' not in text  # the client did not ask for it
    (booking,) = r.ledger.booked
    assert booking["usage"]["completion_tokens"] == 2 and "ttft_s" in booking and "decode_s" in booking
    (_, body, _), = r.pools["short"].sent
    assert body.stream_options.include_usage  # the router always asks the engine for it


async def test_a_stream_whose_client_asked_for_usage_gets_it():
    r = router(ScriptedCounter(SHORT, SHORT))
    r.pools["short"].outcomes = [list(STREAM)]
    response = await serve(r, chat(stream=True, stream_options={"include_usage": True}))
    assert '"cost_usd"' in await read_stream(response)


async def test_a_completion_goes_to_the_pools_completions_method():
    r = router(ScriptedCounter(SHORT, SHORT))
    completion = {"id": "cmpl-1", "object": "text_completion", "created": 0, "model": MODEL,
                  "choices": [{"index": 0, "text": "hi", "finish_reason": "stop"}],
                  "usage": {"prompt_tokens": SHORT, "completion_tokens": 1, "total_tokens": SHORT + 1}}
    r.pools["short"].outcomes = [[CompletionResponse.model_validate(completion)]]
    response = await serve(r, CompletionRequest(model=MODEL, prompt="hi"), call_method="completions")
    assert json.loads(response.body)["choices"][0]["text"] == "hi"
    assert [method for method, _, _ in r.pools["short"].sent] == ["completions"]


async def test_the_client_leaving_while_the_count_runs_withdraws_the_request():
    counter = ScriptedCounter(SHORT, SHORT, counted=False)
    r = router(counter)
    serving = await sent_while_the_count_runs(r, chat())
    serving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await serving
    assert r.ledger.booked == []  # nothing answered, nothing refused
