"""The least-loaded replica router ranks every replica together, so Ray's selection takes the
one with the shortest queue rather than the better of two random ones; a request for a LoRA
adapter ranks first the replicas that hold it, unless they are much busier."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from router.replica_router import DEFAULT_ADAPTER_QUEUE_SLACK, LeastLoadedRouter, holders_not_much_busier


def _router() -> LeastLoadedRouter:
    # choose_replicas reads no router state; Ray's constructor needs a running deployment.
    return LeastLoadedRouter.__new__(LeastLoadedRouter)


async def test_every_replica_is_a_candidate_in_one_rank():
    replicas = [object() for _ in range(5)]
    assert await _router().choose_replicas(replicas) == [replicas]


async def test_no_replicas_no_ranks():
    assert await _router().choose_replicas([]) == []


@dataclass
class Replica:
    """What the router reads of a running replica: its id and the adapters it holds."""

    replica_id: str
    multiplexed_model_ids: set[str] = field(default_factory=set)


@dataclass
class Pending:
    metadata: SimpleNamespace


def adapter_request(adapter: str) -> Pending:
    return Pending(SimpleNamespace(multiplexed_model_id=adapter))


def router_with_queues(queues: dict[str, int | None], slack: int = DEFAULT_ADAPTER_QUEUE_SLACK) -> LeastLoadedRouter:
    router = _router()
    router._replica_queue_len_cache = SimpleNamespace(get=queues.get)
    router.initialize_state(adapter_queue_slack=slack)
    return router


async def test_an_adapters_request_ranks_the_replicas_holding_it_first():
    a, b, c = Replica("a"), Replica("b", {"tagged"}), Replica("c", {"tagged", "jsonish"})
    router = router_with_queues({"a": 0, "b": 2, "c": 1})
    assert await router.choose_replicas([a, b, c], adapter_request("tagged")) == [[b, c], [a, b, c]]
    assert await router.choose_replicas([a, b, c], adapter_request("other")) == [[a, b, c]]
    assert await router.choose_replicas([a, b, c], adapter_request("")) == [[a, b, c]]


async def test_a_holder_much_busier_than_the_least_loaded_replica_is_not_preferred():
    idle, busy = Replica("idle"), Replica("busy", {"tagged"})
    router = router_with_queues({"idle": 0, "busy": DEFAULT_ADAPTER_QUEUE_SLACK + 1})
    assert await router.choose_replicas([idle, busy], adapter_request("tagged")) == [[idle, busy]]
    # Within the slack it is preferred, and a queue not known yet counts as empty.
    router = router_with_queues({"idle": 0, "busy": DEFAULT_ADAPTER_QUEUE_SLACK})
    assert await router.choose_replicas([idle, busy], adapter_request("tagged")) == [[busy], [idle, busy]]
    assert holders_not_much_busier([idle, busy], "tagged", {}.get, 0) == [busy]
