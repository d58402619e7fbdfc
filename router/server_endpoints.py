"""The endpoints plain `vllm serve` answers beside the OpenAI ones, answered by the router from
its pools, so that clients, load balancers and dashboards pointed at vLLM work unchanged:
`/health`, `/version`, `/metrics`, `/tokenize`, `/detokenize` and `/v1/embeddings`
(docs/api.md, "Beside the OpenAI API")."""

from __future__ import annotations

import asyncio
import importlib.metadata
import urllib.error
import urllib.request
from typing import Any

import ray
from fastapi import Request
from starlette.responses import JSONResponse, Response

from core.config import TrilemmaConfig
from core.errors import ApiError
from core.upstream import ErrorResponse, RawRequestInfo, router_request_timeout, sanitize_chat_completion_request
from router.model_choice import ModelChoice
from router.pool_client import PoolClient
from router.pool_health import PoolHealth

# Ray's metrics exposition of a busy node is over 1 MB; reading it locally takes well under this.
METRICS_TIMEOUT_S = 10.0


class ServerEndpoints:
    """What the router answers for vLLM's own endpoints: health from the pools it watches, the
    versions, this node's metrics, and tokenizer and embedding calls through a pool of the model."""

    def __init__(self, config: TrilemmaConfig, models: ModelChoice, health: PoolHealth, pools: PoolClient) -> None:
        self._config = config
        self._models = models
        self._health = health
        self._pools = pools
        self._metrics_url: str | None = None

    def health(self) -> Response:
        """200 with no body (as vLLM) while a pool can serve; else 503 naming each pool's outage,
        so that a load balancer stops sending here only when nothing here could answer."""
        outages = [self._health.outage(pool) for pool in self._config.pools]
        if any(outage is None for outage in outages):
            return Response(status_code=200)
        longest = max(outage.retry_after_s for outage in outages)
        raise ApiError(503, "no pool can serve: " + "; ".join(outage.describe() for outage in outages),
                       code="pool_unavailable", headers={"Retry-After": str(longest)})

    @staticmethod
    def version() -> dict[str, str]:
        """vLLM's version, as `vllm serve` gives it, and this app's beside it."""
        import vllm

        return {"version": vllm.__version__, "trilemma": importlib.metadata.version("trilemma")}

    async def metrics(self) -> Response:
        """The Prometheus exposition of the node this router replica runs on (Ray exports every
        process's metrics there: the app's `trilemma_*` and the engines' `vllm:*` of this node).
        A cluster of several nodes is scraped node by node (docs/observability.md)."""
        url = self._metrics_url or await asyncio.to_thread(_this_nodes_metrics_url)
        self._metrics_url = url
        try:
            body, content_type = await asyncio.to_thread(_read, url)
        except (OSError, urllib.error.URLError) as error:
            raise ApiError(503, f"this node's metrics at {url} could not be read: {error}",
                           code="metrics_unavailable") from None
        return Response(content=body, media_type=content_type)

    async def through_pool(self, method: str, body: Any, request: Request) -> Response:
        """`method` (tokenize, detokenize, embeddings) answered by a pool serving the body's
        model, the default one when it names none, as plain vLLM answers for its only model."""
        scenario_name = self._config.routing.default_scenario
        body.model = self._models.resolve(getattr(body, "model", None), scenario_name,
                                          self._config.scenarios[scenario_name])
        serving = self._config.pools_serving(body.model)
        if method == "embeddings":
            serving = [name for name in serving if self._config.pools[name].embeds]
            if not serving:  # as plain vLLM, whose embeddings path exists only for a model that embeds
                raise ApiError(404, f"model {body.model!r} does not embed: no pool of it runs an embedding model "
                               "(engine_kwargs runner: pooling)", code="embeddings_not_served", param="model")
        pool = next((name for name in serving if self._health.available(name)), None)
        if pool is None:
            outage = self._health.outage(serving[0])
            raise ApiError(503, outage.describe(), code="pool_unavailable",
                           headers={"Retry-After": str(outage.retry_after_s)})
        if getattr(body, "messages", None) is not None:
            # As the chat path does: a message's content parsed as an iterable cannot be pickled
            # for the pool (pydantic's ValidatorIterator); made a list.
            body = sanitize_chat_completion_request(body)
        call = getattr(self._pools.handle(pool), method).remote(body, RawRequestInfo.from_starlette_request(request))
        answer = None
        async with router_request_timeout(self._config.router.request_timeout_s):
            async for answer in call:
                break
        return answer_of_pool(pool, method, answer)


def answer_of_pool(pool: str, method: str, answer: Any) -> Response:
    """A pool's answer as the client gets it: the engine's own error as it wrote it; 501 naming
    the pool where its engine has no such method (Ray's engine protocol then answers nothing)."""
    if isinstance(answer, list):  # a batch of one, where the pool batches its output
        answer = answer[0] if answer else None
    if isinstance(answer, ErrorResponse):
        return JSONResponse(status_code=answer.error.code, content=answer.model_dump())
    if answer is None or not hasattr(answer, "model_dump"):
        raise ApiError(501, f"pool {pool!r} cannot answer {method}: its engine gave no answer ({answer!r})",
                       code="not_implemented")
    return JSONResponse(content=answer.model_dump())


def _this_nodes_metrics_url() -> str:
    node_id = ray.get_runtime_context().get_node_id()
    node = next(node for node in ray.nodes() if node["NodeID"] == node_id)
    return f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics"


def _read(url: str) -> tuple[bytes, str]:
    with urllib.request.urlopen(url, timeout=METRICS_TIMEOUT_S) as response:
        return response.read(), response.headers.get("Content-Type", "text/plain; version=0.0.4")
