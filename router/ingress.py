"""The router: an OpenAI ingress that gives every request a scenario and a pool. Its HTTP
endpoints live here; the request path is router/pipeline.py."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import Request
from pydantic import ValidationError
from ray.serve.handle import DeploymentHandle
from starlette.responses import Response

from autoscaling.control_board import RayControlBoard, cost_profile_key, split_key
from core.config import TrilemmaConfig
from core.errors import ApiError, validation_error
from core.price_catalog import ReplicaRate
from core.upstream import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    EmbeddingRequest,
    ModelCard,
    ModelList,
    OpenAiIngress,
    TokenizeRequest,
)
from core.wire import deployment_name
from router.accounting import Accounting
from router.cost_profile import CostProfileWatch
from router.model_choice import ModelChoice
from router.pipeline import RequestPipeline, RouterParts
from router.pool_choice import PoolChooser
from router.pool_client import PoolClient
from router.pool_health import PoolHealth
from router.pool_watch import PoolWatch
from router.quality_ledger import QualityLedger
from router.routed_request import RoutedRequest
from router.routing import RoutingPolicy
from router.routing_threshold import threshold_watch
from router.server_endpoints import ServerEndpoints
from router.token_counter import PromptTokenCounter

# A replica that cannot report its clock in this long is stuck; say so rather than hang.
POOL_ACTIVITY_TIMEOUT_S = 10.0


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
        adapter_only: dict[str, str] | None = None,
    ) -> None:
        # The base class answers /v1/models from its model cards, one per public name; the handle
        # beside each is never called (requests go through the pool choice).
        super().__init__(
            llm_deployments={name: pools[config.pools_serving(_base_model(config, name))[0]] for name in model_cards},
            model_cards=model_cards,
        )
        self._config = config
        self._models = ModelChoice(config)
        self._rates = {name: ReplicaRate(**rate) for name, rate in rates.items()}
        ledger = QualityLedger.from_dict(quality) if quality else None
        policy = RoutingPolicy.from_config(
            config.routing, {name: rate.usd_per_hour for name, rate in self._rates.items()}, ledger,
        )
        self._accounting = Accounting(tenants, config.tenants.spend_file)
        # One tokenizer per source: models that share one count alike.
        by_source = {source: PromptTokenCounter(source) for source in set(tokenizer_sources.values())}
        for counter in by_source.values():
            counter.load()
        self._health = PoolHealth(pools)
        self._pool_client = PoolClient(
            pools, self._health, config.router.request_timeout_s,
            by_reference=not config.transport.throughput_optimized,
        )
        autoscaled = config.autoscaling.enabled
        self._pipeline = RequestPipeline(RouterParts(
            config=config, models=self._models, accounting=self._accounting,
            token_counters={name: by_source[source] for name, source in tokenizer_sources.items()},
            pool_chooser=PoolChooser(config, policy, self._health, adapter_only), health=self._health,
            pool_client=self._pool_client, quality=ledger,
            # Only the autoscaler puts the cost profile in force.
            cost_profile=CostProfileWatch(cost_profile_key(config.app_name)) if autoscaled else None,
            # The traffic split moves the threshold; without it the config's holds.
            threshold=threshold_watch(split_key(config.app_name), config.routing.short_context_threshold_tokens)
            if autoscaled and config.autoscaling.split.enabled else None,
        ))
        self._pool_watch = PoolWatch(
            config.app_name, {name: deployment_name(name) for name in pools}, self._health, RayControlBoard()
        )
        self._server = ServerEndpoints(config, self._models, self._health, self._pool_client)

    # HTTP endpoints (paths in router.http_api).

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
        config = self._pipeline.scenario(scenario, from_path=True)
        allowed = self._models.allowed(config)
        with_adapters = {model for model in allowed if self._config.pools_serving(model, config, adapters=True)}
        every = await self.models()
        return ModelList(data=[card for card in every.data if card.id in allowed
                               or _base_model(self._config, card.id) in with_adapters])

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

    async def _serve(self, body: Any, call_method: str, request: Request, scenario_in_path: str | None) -> Response:
        self._pool_watch.start()
        return await self._pipeline.serve(RoutedRequest.received(
            body, call_method, request, scenario_in_path=scenario_in_path,
            default_scenario=self._config.routing.default_scenario,
        ))


def _base_model(config: TrilemmaConfig, name: str) -> str:
    """The model a public name runs on: its own, or an adapter's base."""
    adapter = config.adapters.get(name)
    return adapter.base if adapter is not None else name
