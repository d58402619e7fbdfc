"""How a pool fails a request when a part of it dies, in words a client can act on.

A request fails in one of two ways: the request itself is wrong or unlucky (the engine's
answer says so, and sending it again would fail the same way), or the replica serving it is
gone: its engine process died, or the replica's own process did. Only the second is safe to
send to another replica, and only before any token reached the client.
"""

from __future__ import annotations

from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError, WorkerCrashedError
from ray.serve.exceptions import ReplicaUnavailableError

# vLLM's name for an engine whose core process has stopped; matched by name so that this
# module imports no vLLM (the fake engine's replicas have none).
_ENGINE_DEAD_ERRORS = ("EngineDeadError",)


class PoolOverloaded(Exception):
    """A request this replica will not serve now; the router answers it with 429."""

    def __init__(self, pool: str, priority: int, reason: str, retry_after_s: int) -> None:
        super().__init__(pool, priority, reason, retry_after_s)
        self.pool, self.priority, self.reason, self.retry_after_s = pool, priority, reason, retry_after_s

    @property
    def message(self) -> str:
        return f"pool {self.pool!r} is overloaded for priority {self.priority}: {self.reason}"

    def __str__(self) -> str:
        return self.message


class AdapterUnusable(Exception):
    """An adapter a replica will not load (its files, its base or its rank), said before any
    engine sees it: the request is refused and the replica goes on serving."""

    def __init__(self, pool: str, adapter: str, reason: str, over_rank: bool) -> None:
        super().__init__(pool, adapter, reason, over_rank)
        self.pool, self.adapter, self.reason, self.over_rank = pool, adapter, reason, over_rank

    @property
    def status(self) -> int:
        """400 for a rank the pool's engines are set up not to take (a limit, named); 422 for
        an adapter that cannot be served as configured."""
        return 400 if self.over_rank else 422

    @property
    def code(self) -> str:
        return "adapter_rank_too_high" if self.over_rank else "adapter_unusable"

    @property
    def message(self) -> str:
        return f"adapter {self.adapter!r} cannot be served by pool {self.pool!r}: {self.reason}"

    def __str__(self) -> str:
        return self.message


class BaseModelRefused(Exception):
    """A request without an adapter at a replica whose engines serve adapters and are not proven to
    keep such a request off the adapters in its batch (core.lora_isolation). The router sends none
    there; the replica refuses one that arrives all the same, before its engine sees it."""

    status = 500
    code = "base_model_refused"

    def __init__(self, pool: str, reason: str) -> None:
        super().__init__(pool, reason)
        self.pool, self.reason = pool, reason

    @property
    def message(self) -> str:
        return f"pool {self.pool!r} serves adapter requests only, so no request without an adapter: {self.reason}"

    def __str__(self) -> str:
        return self.message


class EngineDied(Exception):
    """What a pool replica raises for a request once its engine is dead: the router sends the
    request elsewhere, and Serve's health check replaces the replica."""

    def __init__(self, pool: str, reason: str) -> None:
        super().__init__(pool, reason)
        self.pool, self.reason = pool, reason

    def __str__(self) -> str:
        return f"pool {self.pool!r}: its engine died ({self.reason})"


def engine_death_reason(error: BaseException) -> str:
    """A short account of why an engine stopped; vLLM's own message only points at a log."""
    for candidate in _chain(error):
        if type(candidate).__name__ in _ENGINE_DEAD_ERRORS:
            return "the vLLM engine process stopped"
    return one_line(error)


def replica_failure(error: BaseException) -> str | None:
    """Why the replica serving a request is gone, or None when the failure is the request's own."""
    for candidate in _chain(error):
        if isinstance(candidate, EngineDied):
            return f"its engine died ({candidate.reason})"
        if isinstance(candidate, (ActorDiedError, WorkerCrashedError)):
            return "its replica process died"
        if isinstance(candidate, (ActorUnavailableError, ReplicaUnavailableError, RayActorError)):
            return "its replica became unreachable"
        if type(candidate).__name__ in _ENGINE_DEAD_ERRORS:
            return "its engine died (the vLLM engine process stopped)"
    return None


def _chain(error: BaseException) -> list[BaseException]:
    """The error and what it wraps: Ray's task errors keep the original as `cause`."""
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in seen:
        seen.append(current)
        current = getattr(current, "cause", None) or current.__cause__
    return seen


def one_line(error: BaseException) -> str:
    """The user-level message of a (possibly Ray-wrapped) exception, on one short line."""
    cause = getattr(error, "cause", None) or error.__cause__ or error
    return " ".join(str(cause).split())[:300] or type(cause).__name__
