"""vLLM's own endpoints as the router answers them: health from the pools, tokenizer calls
through a pool of the body's model, embeddings only where a pool embeds."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from core.errors import ApiError
from core.pool_config import engine_embeds
from core.upstream import ErrorResponse
from router.model_choice import ModelChoice
from router.pool_health import PoolHealth
from router.server_endpoints import ServerEndpoints
from tests.support import config_for_tests


class FakePools:
    """The router's PoolClient as far as these endpoints use it: a handle per pool whose method
    calls stream back one answer, and record what they were sent."""

    def __init__(self, answer) -> None:
        self.answer, self.calls = answer, []

    def handle(self, pool: str):
        def method(name: str):
            def remote(body, raw_request):
                self.calls.append((pool, name, body))

                async def stream():
                    yield self.answer
                return stream()
            return SimpleNamespace(remote=remote)
        return SimpleNamespace(tokenize=method("tokenize"), detokenize=method("detokenize"),
                               embeddings=method("embeddings"))


TOKENS = SimpleNamespace(model_dump=lambda: {"count": 2})  # what an engine's tokenizer answers


def endpoints(answer=TOKENS, config=None):
    config = config or config_for_tests()
    health = PoolHealth(config.pools)
    pools = FakePools(answer)
    return ServerEndpoints(config, ModelChoice(config), health, pools), health, pools


REQUEST = SimpleNamespace(headers={}, method="POST", url=SimpleNamespace(path="/tokenize"), query_params={})


@pytest.fixture(autouse=True)
def plain_request_info(monkeypatch):
    from router import server_endpoints

    monkeypatch.setattr(server_endpoints, "RawRequestInfo", SimpleNamespace(from_starlette_request=lambda r: r))


def test_health_is_200_while_one_pool_serves_and_503_naming_each_outage_when_none_does():
    server, health, _ = endpoints()
    health.observe("short", running=0, starting=1)
    assert server.health().status_code == 200 and server.health().body == b""
    health.observe("long", running=0, starting=0)
    with pytest.raises(ApiError) as refused:
        server.health()
    assert refused.value.status == 503 and "'short'" in refused.value.message and "'long'" in refused.value.message
    assert refused.value.headers["Retry-After"]


async def test_tokenize_goes_to_a_pool_of_the_default_model_when_the_body_names_none():
    server, _, pools = endpoints()
    body = SimpleNamespace(model=None)
    response = await server.through_pool("tokenize", body, REQUEST)
    assert json.loads(response.body) == {"count": 2}
    config = config_for_tests()
    assert body.model == config.default_model and pools.calls[0][:2] == (config.pools_serving(body.model)[0], "tokenize")


async def test_a_pool_that_is_down_is_passed_over():
    server, health, pools = endpoints()
    config = config_for_tests()
    first, second = config.pools_serving(config.default_model)[:2]
    health.observe(first, running=0, starting=1)
    await server.through_pool("detokenize", SimpleNamespace(model=None), REQUEST)
    assert pools.calls[0][0] == second


async def test_an_engines_error_passes_through_as_vllm_wrote_it():
    error = ErrorResponse.model_validate({"error": {"message": "bad", "type": "BadRequestError", "code": 400}})
    server, _, _ = endpoints(answer=error)
    response = await server.through_pool("tokenize", SimpleNamespace(model=None), REQUEST)
    assert response.status_code == 400 and json.loads(response.body)["error"]["type"] == "BadRequestError"


@pytest.mark.parametrize("answer", [None, [], "not a model"])
async def test_an_engine_that_answers_nothing_is_a_501_naming_the_pool_not_a_crash(answer):
    server, _, _ = endpoints(answer=answer)
    with pytest.raises(ApiError) as refused:
        await server.through_pool("tokenize", SimpleNamespace(model=None), REQUEST)
    assert refused.value.status == 501 and "cannot answer tokenize" in refused.value.message


async def test_an_unknown_model_is_404_before_any_pool_is_called():
    server, _, pools = endpoints()
    with pytest.raises(ApiError) as refused:
        await server.through_pool("tokenize", SimpleNamespace(model="no-such-model"), REQUEST)
    assert refused.value.status == 404 and not pools.calls


async def test_embeddings_of_a_model_no_pool_embeds_are_404_as_on_plain_vllm():
    server, _, pools = endpoints()
    with pytest.raises(ApiError) as refused:
        await server.through_pool("embeddings", SimpleNamespace(model=None), REQUEST)
    assert refused.value.status == 404 and "does not embed" in refused.value.message and not pools.calls


def test_a_pool_embeds_when_its_engine_runs_the_pooling_runner():
    assert engine_embeds({"runner": "pooling"}) and engine_embeds({"convert": "embed"})
    assert engine_embeds({"task": "embed"})
    assert not engine_embeds({}) and not engine_embeds({"runner": "generate"})
