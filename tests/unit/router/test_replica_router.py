"""The least-loaded replica router ranks every replica together, so Ray's selection takes the
one with the shortest queue rather than the better of two random ones."""

from __future__ import annotations

from router.replica_router import LeastLoadedRouter


def _router() -> LeastLoadedRouter:
    # choose_replicas reads no router state; Ray's constructor needs a running deployment.
    return LeastLoadedRouter.__new__(LeastLoadedRouter)


async def test_every_replica_is_a_candidate_in_one_rank():
    replicas = [object() for _ in range(5)]
    assert await _router().choose_replicas(replicas) == [replicas]


async def test_no_replicas_no_ranks():
    assert await _router().choose_replicas([]) == []
