"""Which pool serves a request: the one it pins, or the routing policy's pick among the pools
that serve its model, that its scenario may use and that are up; or the error that says why none."""

from __future__ import annotations

import dataclasses
from typing import Mapping

from core.config import PoolConfig, ScenarioConfig, TrilemmaConfig
from core.errors import ApiError
from router.pool_health import Outage, PoolHealth
from router.routing import RouteDecision, RouteRequest, RoutingPolicy


@dataclasses.dataclass(frozen=True)
class PoolRequest:
    """What the choice depends on: the request's scenario, model and size, a pinned pool, and
    the traffic split's threshold where one is in force."""

    scenario_name: str
    scenario: ScenarioConfig
    model: str
    prompt_tokens: int
    max_tokens: int
    pinned_pool: str | None = None
    threshold_tokens: int | None = None
    adapter: str | None = None  # a LoRA adapter of `model`: only pools that set `lora` serve it

    @property
    def need(self) -> int:
        return self.prompt_tokens + self.max_tokens


class PoolChooser:
    """`adapter_only`: the pools whose engines may batch no request without an adapter beside
    adapter requests (core.lora_isolation), each with the reason; they take adapter requests only."""

    def __init__(self, config: TrilemmaConfig, policy: RoutingPolicy, health: PoolHealth,
                 adapter_only: Mapping[str, str] | None = None) -> None:
        self._config, self._policy, self._health = config, policy, health
        self._adapter_only = dict(adapter_only or {})

    def choose(self, request: PoolRequest) -> RouteDecision:
        largest = self._config.largest_max_model_len_for(request.model, request.scenario)
        if request.need > largest:
            raise ApiError(
                400,
                f"request needs {request.need} tokens (prompt {request.prompt_tokens} + max_tokens "
                f"{request.max_tokens}), over the largest pool's max_model_len of {largest} (model "
                f"{request.model!r} in scenario {request.scenario_name!r})",
                code="context_length_exceeded",
                param="messages",
            )
        decision = self._pinned(request) if request.pinned_pool is not None else self._chosen(request)
        if request.adapter is not None:
            where = ("to a replica that holds it unless that one is much busier"
                     if self._config.pools[decision.pool].replica_router == "least_loaded"
                     else "to the replica the pool's replica router picks, holding it or not")
            decision = dataclasses.replace(decision, reason=f"{decision.reason}; adapter {request.adapter!r}: {where}")
        return decision

    def _chosen(self, request: PoolRequest) -> RouteDecision:
        candidates = {name: self._config.pools[name] for name in self._config.pools_serving(
            request.model, request.scenario, adapters=request.adapter is not None)
            if request.adapter is not None or name not in self._adapter_only}
        # Pools that would take the request but are down: skipped, and named in the answer.
        outages = [
            outage for name, pool in candidates.items()
            if pool.max_model_len >= request.need and (outage := self._health.outage(name)) is not None
        ]
        down = {outage.pool for outage in outages}
        up = {name: pool for name, pool in candidates.items() if name not in down}
        decision = self._base_off_lora_pools(request, up) if up else None
        if decision is None and outages:
            raise unavailable(outages, f"scenario {request.scenario_name!r} may use no other pool that takes "
                                       f"{request.need} tokens")
        if decision is None:
            detail = (f" and model {request.model!r}: none of its pools {sorted(candidates)} takes "
                      f"{request.need} tokens" if candidates else "")
            raise ApiError(503, f"no inference provider configured for scenario {request.scenario_name}{detail}",
                           code="no_provider")
        if outages:
            skipped = "; ".join(f"skipped {outage.describe()}" for outage in outages)
            decision = dataclasses.replace(decision, reason=f"{decision.reason}; {skipped}")
        return decision

    def _base_off_lora_pools(self, request: PoolRequest, up: dict[str, PoolConfig]) -> RouteDecision | None:
        """The policy's pick; for a base-model request that it sends to a pool with `lora`, a twin
        without `lora` in its place where one is up: the same role and precision, room for the
        request and no higher price. In a batch that holds an adapter request every request pays
        the LoRA kernels (on an H100, 1.5x to 2.3x a base request's TPOT: bench/results/adapters-h100)."""
        decision = self._policy.choose(self._route_request(request), up)
        if decision is None or request.adapter is not None or up[decision.pool].lora is None:
            return decision
        chosen, prices = up[decision.pool], self._policy.usd_per_hour
        twin = next((name for name, pool in up.items()
                     if pool.lora is None and pool.role == chosen.role and pool.quantization == chosen.quantization
                     and pool.max_model_len >= request.need
                     and prices[name] <= prices[decision.pool]), None)
        if twin is None:
            return decision
        return RouteDecision(twin, f"{decision.reason}; base model: {twin!r} in place of {decision.pool!r}, which "
                                   f"serves adapters (`lora`), so the request stays out of their batches")

    def _pinned(self, request: PoolRequest) -> RouteDecision:
        name = request.pinned_pool
        pool = self._config.pools.get(name)
        if pool is None:
            raise ApiError(400, f"X-Trilemma-Pool names unknown pool {name!r}; pools: {sorted(self._config.pools)}",
                           code="unknown_pool")
        served = self._config.pool_model(name).name
        if served != request.model:
            raise ApiError(400, f"X-Trilemma-Pool names pool {name!r}, which serves model {served!r}, "
                                f"not {request.model!r}", code="pool_model_mismatch", param="model")
        if request.adapter is not None and pool.lora is None:
            raise ApiError(400, f"X-Trilemma-Pool names pool {name!r}, which serves no adapters (it sets no `lora`), "
                                f"for adapter {request.adapter!r}", code="pool_model_mismatch", param="model")
        if request.adapter is None and name in self._adapter_only:
            raise ApiError(400, f"X-Trilemma-Pool names pool {name!r}, which serves adapter requests only, for model "
                                f"{request.model!r} without an adapter: {self._adapter_only[name]}",
                           code="pool_model_mismatch", param="model")
        if pool.max_model_len < request.need:
            raise ApiError(400, f"request needs {request.need} tokens, over pool {name!r}'s max_model_len "
                                f"of {pool.max_model_len}", code="context_length_exceeded")
        outage = self._health.outage(name)
        if outage is not None:
            raise unavailable([outage], "it is pinned by X-Trilemma-Pool")
        return RouteDecision(name, f"pinned by X-Trilemma-Pool; {request.need} tokens")

    @staticmethod
    def _route_request(request: PoolRequest) -> RouteRequest:
        return RouteRequest(
            prompt_tokens=request.prompt_tokens,
            max_tokens=request.max_tokens,
            scenario=request.scenario_name,
            prefer_cheapest=request.scenario.prefer == "cheapest",
            max_quality_loss=request.scenario.max_quality_loss,
            threshold_tokens=request.threshold_tokens,
        )


def unavailable(outages: list[Outage], why_no_other: str) -> ApiError:
    """A 503 that names the pools that are down and when to try again: at once, not after a timeout."""
    return ApiError(
        503,
        f"no pool can take this request now: {'; '.join(outage.describe() for outage in outages)}; "
        f"{why_no_other}",
        code="pool_unavailable",
        headers={"Retry-After": str(min(outage.retry_after_s for outage in outages))},
    )
