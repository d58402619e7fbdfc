"""Which model a request gets: the one it names, where its scenario serves it, else the scenario's
first; a LoRA adapter's name stands for its base model with the adapter applied."""

from __future__ import annotations

from dataclasses import dataclass

from core.config import ScenarioConfig, TrilemmaConfig
from core.errors import ApiError


@dataclass(frozen=True)
class ModelPick:
    model: str                  # the public name of the base model: the pools, the tokenizer, the lengths
    adapter: str | None = None  # the adapter applied on it, if any


class ModelChoice:
    """The public model names of an app, its adapters, and which of them each scenario may serve."""

    def __init__(self, config: TrilemmaConfig) -> None:
        self._config = config

    @property
    def served(self) -> list[str]:
        return list(self._config.models)

    @property
    def adapters(self) -> list[str]:
        return list(self._config.adapters)

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
        """The base model of the request (see `pick`)."""
        return self.pick(requested, scenario_name, scenario, pinned_pool).model

    def pick(self, requested: str | None, scenario_name: str, scenario: ScenarioConfig,
             pinned_pool: str | None = None) -> ModelPick:
        """`pinned_pool` (X-Trilemma-Pool) stands in for a model the request does not name: the
        pool's own, so that pinning a pool for debugging needs no model name."""
        adapter = self._config.adapters.get(requested) if requested is not None else None
        if adapter is not None:
            self._check_adapter_served(requested, adapter.base, scenario_name, scenario)
            return ModelPick(self._model(adapter.base, scenario_name, scenario), requested)
        if requested is None and pinned_pool in self._config.pools:
            requested = self._config.pool_model(pinned_pool).name
        return ModelPick(self._model(requested, scenario_name, scenario))

    def _model(self, requested: str | None, scenario_name: str, scenario: ScenarioConfig) -> str:
        # A scenario that may use no pool at all is the pool choice's to refuse (503, no provider).
        allowed = self.allowed(scenario)
        if requested is None:
            return allowed[0] if allowed else self._config.default_model
        if requested not in self._config.models:
            adapters = f" and adapters {self.adapters}" if self.adapters else ""
            raise ApiError(404, f"model {requested!r} does not exist; this server serves models {self.served}"
                           f"{adapters}", code="model_not_found", param="model")
        if allowed and requested not in allowed:
            raise ApiError(400, f"model {requested!r} is not served to scenario {scenario_name!r}; "
                           f"its models: {allowed}", code="model_not_allowed", param="model")
        return requested

    def _check_adapter_served(self, adapter: str, base: str, scenario_name: str, scenario: ScenarioConfig) -> None:
        if self._config.pools_serving(base, scenario) and not self._config.pools_serving(base, scenario, adapters=True):
            raise ApiError(400, f"adapter {adapter!r} is not served to scenario {scenario_name!r}: none of the pools "
                           f"it may use for {base!r} sets `lora`", code="model_not_allowed", param="model")
