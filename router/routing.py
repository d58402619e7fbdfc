"""Routing policies: which pool serves a request, decided as data with a reason."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Mapping

from core.config import PoolConfig, QualityLossLimit, RoutingConfig
from router.quality_ledger import QualityLedger


@dataclass(frozen=True)
class RouteRequest:
    """What a policy knows of a request: its size and what its scenario asks for."""

    prompt_tokens: int
    max_tokens: int
    scenario: str
    prefer_cheapest: bool = False
    max_quality_loss: QualityLossLimit | None = None  # how far a move to a cheaper pool may go
    threshold_tokens: int | None = None  # the traffic split's threshold; None: the config's

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.max_tokens


@dataclass(frozen=True)
class RouteDecision:
    pool: str
    reason: str


class RoutingPolicy:
    """Picks one of the candidate pools, or None when none of them can take the request.

    Candidates are already limited to the pools the request's scenario may use; subclasses
    register under a name that configs refer to (`routing.policy`).
    """

    registry: ClassVar[dict[str, type[RoutingPolicy]]] = {}

    def __init_subclass__(cls, *, name: str, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        RoutingPolicy.registry[name] = cls

    def __init__(self, config: RoutingConfig, usd_per_hour: Mapping[str, float],
                 quality: QualityLedger | None = None) -> None:
        self.config = config
        self.usd_per_hour = usd_per_hour  # one replica of each pool, all terms included
        self.quality = quality or QualityLedger({}, "no quality measurement")

    @classmethod
    def from_config(cls, config: RoutingConfig, usd_per_hour: Mapping[str, float],
                    quality: QualityLedger | None = None) -> RoutingPolicy:
        try:
            policy_cls = cls.registry[config.policy]
        except KeyError:
            raise ValueError(
                f"unknown routing policy {config.policy!r}; known: {sorted(cls.registry)}"
            ) from None
        return policy_cls(config, usd_per_hour, quality)

    def choose(
        self, request: RouteRequest, candidates: dict[str, PoolConfig]
    ) -> RouteDecision | None:
        raise NotImplementedError


class ContextLengthPolicy(RoutingPolicy, name="context_length"):
    """Short requests to short pools, long ones to long pools, so a long prompt never
    queues in front of a chat reply. Size is prompt + max_tokens: the KV cache a request
    may grow to, which is what makes it slow for its neighbours."""

    def choose(
        self, request: RouteRequest, candidates: dict[str, PoolConfig]
    ) -> RouteDecision | None:
        need = request.total_tokens
        fitting = {name: pool for name, pool in candidates.items() if pool.max_model_len >= need}
        if not fitting:
            return None
        tuned = request.threshold_tokens is not None
        threshold = request.threshold_tokens if tuned else self.config.short_context_threshold_tokens
        role = "short" if need <= threshold else "long"
        size = (
            f"prompt {request.prompt_tokens} + max_tokens {request.max_tokens} = {need} "
            f"{'<=' if role == 'short' else '>'} {'traffic split ' if tuned else ''}threshold {threshold}"
        )
        in_role = {name: pool for name, pool in fitting.items() if pool.role == role}
        if in_role:
            home = RouteDecision(next(iter(in_role)), f"{size}: {role} pool")
        else:
            # No pool of the wanted kind is open to this scenario: the smallest that fits wastes least.
            name = min(fitting, key=lambda n: fitting[n].max_model_len)
            home = RouteDecision(name, f"{size}: no {role} pool for this scenario; smallest pool that fits")
        if not request.prefer_cheapest:
            return home
        return self._cheapest(request, fitting, role, size, home.pool)

    def _cheapest(self, request: RouteRequest, fitting: dict[str, PoolConfig], role: str, size: str,
                  home: str) -> RouteDecision:
        """The cheapest pool that fits, of those whose quality loss against `home` (the pool of
        the request's length class) stays within the scenario's limit; the reason says what the
        move gives up, where it was measured, and which cheaper pools were refused and why."""
        refusals = {name: self.quality.refusal(home, name, request.max_quality_loss) for name in fitting}
        allowed = [name for name, refused in refusals.items() if refused is None]
        name = min(allowed, key=lambda n: (self.usd_per_hour[n], fitting[n].role != role))
        reason = f"{size}; cheapest pool that fits (${self.usd_per_hour[name]:.4g}/h)"
        loss = self.quality.loss(home, name) if name != home else None
        if loss is not None:
            reason += f"; {loss.describe()} ({self.quality.source})"
        cheaper_refused = [why for other, why in refusals.items()
                           if why is not None and self.usd_per_hour[other] < self.usd_per_hour[name]]
        return RouteDecision(name, "; ".join([reason, *cheaper_refused]))
