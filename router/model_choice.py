"""Which model a request gets: the one it names, where its scenario serves it, else the scenario's first."""

from __future__ import annotations

from core.config import ScenarioConfig, TrilemmaConfig
from core.errors import ApiError


class ModelChoice:
    """The public model names of an app, and which of them each scenario may serve."""

    def __init__(self, config: TrilemmaConfig) -> None:
        self._config = config

    @property
    def served(self) -> list[str]:
        return list(self._config.models)

    def allowed(self, scenario: ScenarioConfig) -> list[str]:
        """The scenario's own list, or every model that one of the scenario's pools serves (the
        app's default first)."""
        if scenario.models is not None:
            return list(scenario.models)
        default = self._config.default_model
        reachable = [name for name in self.served if self._config.pools_serving(name, scenario)]
        return sorted(reachable, key=lambda name: name != default)

    def resolve(self, requested: str | None, scenario_name: str, scenario: ScenarioConfig,
                pinned_pool: str | None = None) -> str:
        """`pinned_pool` (X-Trilemma-Pool) stands in for a model the request does not name: the
        pool's own, so that pinning a pool for debugging needs no model name."""
        if requested is None and pinned_pool in self._config.pools:
            requested = self._config.pool_model(pinned_pool).name
        # A scenario that may use no pool at all is the pool choice's to refuse (503, no provider).
        allowed = self.allowed(scenario)
        if requested is None:
            return allowed[0] if allowed else self._config.default_model
        if requested not in self._config.models:
            raise ApiError(404, f"model {requested!r} does not exist; this server serves {self.served}",
                           code="model_not_found", param="model")
        if allowed and requested not in allowed:
            raise ApiError(400, f"model {requested!r} is not served to scenario {scenario_name!r}; "
                           f"its models: {allowed}", code="model_not_allowed", param="model")
        return requested
