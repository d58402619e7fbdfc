"""The router's path for a LoRA adapter (router/pipeline.py, with the fakes of test_pipeline):
the adapter named or a tenant's default goes to a pool that serves adapters, as the request's
model and its multiplexed model id, the route says so, and the books carry its name; a
replica's refusal of the adapter reaches the client with its status, not as a pool failure."""

from __future__ import annotations

import pytest

from contract.pool_faults import AdapterUnusable
from core import wire
from core.config import TrilemmaConfig
from core.errors import ApiError
from tests.support import config_for_tests
from tests.unit.router.test_pipeline import MODEL, SHORT, Ledger, ScriptedCounter, chat, router, serve


def adapter_config() -> TrilemmaConfig:
    """The shipped config with adapters of its model, served by the long pool only."""
    raw = config_for_tests().model_dump(mode="json")
    raw["pools"]["long"]["lora"] = {"max_lora_rank": 16}
    raw["adapters"] = {"tagged": {"base": MODEL, "source": "/adapters/tagged"}}
    return TrilemmaConfig.from_dict(raw)


CONFIG = adapter_config()


async def test_an_adapter_goes_as_the_requests_model_and_multiplexed_id_to_a_pool_that_serves_adapters():
    r = router(ScriptedCounter(SHORT, SHORT), config=CONFIG)
    response = await serve(r, chat(model="tagged"))
    # A short prompt, which the short pool would take, goes to the long pool: the one with `lora`.
    assert response.headers[wire.POOL_HEADER] == "long" and not r.pools["short"].sent
    (method, body, _), = r.pools["long"].sent
    assert body.model == "tagged" and r.pools["long"].multiplexed == ["tagged"]
    assert "adapter 'tagged'" in response.headers[wire.ROUTE_REASON_HEADER]
    (booking,) = r.ledger.booked
    assert booking["adapter"] == "tagged" and booking["status"] == 200


async def test_a_base_model_request_carries_no_adapter():
    r = router(ScriptedCounter(SHORT, SHORT), config=CONFIG)
    await serve(r, chat())
    assert r.pools["short"].multiplexed == [None] and r.pools["short"].sent[0][1].model == MODEL
    assert r.ledger.booked[0]["adapter"] == "base"


async def test_a_tenants_default_adapter_applies_only_when_the_request_names_no_model():
    ledger = Ledger(keys={"k": "acme"}, default_adapters={"acme": "tagged"})
    r = router(ScriptedCounter(SHORT, SHORT), ledger=ledger, config=CONFIG)
    await serve(r, chat(model=None), headers={"Authorization": "Bearer k"})
    await serve(r, chat(), headers={"Authorization": "Bearer k"})
    assert r.pools["long"].multiplexed == ["tagged"] and r.pools["short"].multiplexed == [None]


async def test_pinning_a_pool_without_lora_for_an_adapter_is_a_400():
    r = router(ScriptedCounter(SHORT, SHORT), config=CONFIG)
    with pytest.raises(ApiError) as refused:
        await serve(r, chat(model="tagged"), headers={wire.POOL_HEADER: "short"})
    assert refused.value.status == 400 and "sets no `lora`" in refused.value.message


@pytest.mark.parametrize("over_rank, status, code", [(True, 400, "adapter_rank_too_high"),
                                                      (False, 422, "adapter_unusable")])
async def test_a_replicas_refusal_of_the_adapter_is_the_clients_answer_and_no_pool_failure(over_rank, status, code):
    r = router(ScriptedCounter(SHORT, SHORT), config=CONFIG)
    r.pools["long"].outcomes.append(AdapterUnusable("long", "tagged", "rank 64 is over 16", over_rank))
    with pytest.raises(ApiError) as refused:
        await serve(r, chat(model="tagged"))
    assert (refused.value.status, refused.value.code) == (status, code)
    assert "'tagged'" in refused.value.message and "rank 64 is over 16" in refused.value.message
    assert len(r.pools["long"].sent) == 1 and r.health.outage("long") is None  # not retried, not marked down
    assert r.ledger.booked[-1]["adapter"] == "tagged" and r.ledger.booked[-1]["status"] == status

