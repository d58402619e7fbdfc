"""Replica choice inside a pool: the least-loaded replica, through Ray Serve's request router,
and for a request with a LoRA adapter, a replica that already holds the adapter first."""

from __future__ import annotations

from typing import Callable

from ray.serve._private.common import ReplicaID
from ray.serve.request_router import FIFOMixin, PendingRequest, RequestRouter, RunningReplica

# How many more requests a replica holding the adapter may have queued than the least loaded
# replica before the request goes to the least loaded one instead (which then loads the adapter).
DEFAULT_ADAPTER_QUEUE_SLACK = 4


class LeastLoadedRouter(FIFOMixin, RequestRouter):
    """Every replica of the pool is a candidate in one rank, so Ray's selection (cached or
    probed queue lengths) picks the one with the fewest requests, instead of the less loaded
    of two random ones. A pool has a handful of replicas, so asking all of them is cheap, and
    a replica with an empty queue is never passed over while another has a long one.

    A request for an adapter (its multiplexed model id, set by the router) ranks first the
    replicas that hold the adapter and are not much busier than the least loaded replica:
    loading an adapter costs a replica time and evicts another, but one popular adapter must not
    pile its traffic on one replica while the others idle.
    """

    def initialize_state(self, adapter_queue_slack: int = DEFAULT_ADAPTER_QUEUE_SLACK, **kwargs) -> None:
        self._adapter_queue_slack = adapter_queue_slack

    async def choose_replicas(
        self, candidate_replicas: list[RunningReplica], pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        if not candidate_replicas:
            return []
        adapter = pending_request.metadata.multiplexed_model_id if pending_request is not None else ""
        holders = holders_not_much_busier(
            candidate_replicas, adapter, self._replica_queue_len_cache.get,
            getattr(self, "_adapter_queue_slack", DEFAULT_ADAPTER_QUEUE_SLACK),
        ) if adapter else []
        return [holders, list(candidate_replicas)] if holders else [list(candidate_replicas)]


def holders_not_much_busier(
    replicas: list[RunningReplica], adapter: str, queue_len: Callable[[ReplicaID], int | None], slack: int,
) -> list[RunningReplica]:
    """The replicas holding `adapter` whose known queue is at most `slack` longer than the
    shortest known one (a replica whose queue is not known yet counts as idle)."""
    lengths = {replica.replica_id: queue_len(replica.replica_id) or 0 for replica in replicas}
    shortest = min(lengths.values())
    return [replica for replica in replicas
            if adapter in replica.multiplexed_model_ids and lengths[replica.replica_id] <= shortest + slack]
