"""Replica choice inside a pool: the least-loaded replica, through Ray Serve's request router."""

from __future__ import annotations

from ray.serve.request_router import FIFOMixin, PendingRequest, RequestRouter, RunningReplica


class LeastLoadedRouter(FIFOMixin, RequestRouter):
    """Every replica of the pool is a candidate in one rank, so Ray's selection (cached or
    probed queue lengths) picks the one with the fewest requests, instead of the less loaded
    of two random ones. A pool has a handful of replicas, so asking all of them is cheap, and
    a replica with an empty queue is never passed over while another has a long one."""

    async def choose_replicas(
        self, candidate_replicas: list[RunningReplica], pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        return [list(candidate_replicas)] if candidate_replicas else []
