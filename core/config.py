"""The one YAML config: model, pools, scenarios and routing, validated before anything starts."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

# The sections below live in modules of their own; they are re-exported here, where every
# caller looks for the config's parts.
from core.adapter_config import NO_ADAPTER, AdapterConfig, PoolLoraConfig
from core.alerts_config import AlertsConfig
from core.autoscaling_config import AutoscalingConfig, PoolScalingConfig
from core.config_base import ConfigError, StrictModel, read_yaml
from core.model_spec import EMBEDDED_MODEL_REF, ModelSpec
from core.pool_config import (
    ARRIVAL_HEADROOM,
    DEFAULT_QUEUE_SHARE,
    REPLICA_ROUTERS,
    AdmissionConfig,
    IdleSleepConfig,
    PoolConfig,
    StreamBatchingConfig,
)

__all__ = [
    "ARRIVAL_HEADROOM", "AlertsConfig", "CONFIG_DIR", "EMBEDDED_MODEL_REF", "DEFAULT_CONFIG_PATH", "PROJECT_ROOT", "DEFAULT_QUEUE_SHARE", "REPLICA_ROUTERS",
    "AdapterConfig", "NO_ADAPTER", "PoolLoraConfig",
    "AdmissionConfig", "AutoscalingConfig", "ConfigError", "CostConfig", "HttpConfig", "IdleSleepConfig", "LocalRayConfig",
    "ModelSpec", "PoolConfig", "PoolScalingConfig", "RouterConfig", "RoutingConfig", "ScenarioConfig",
    "StreamBatchingConfig", "StrictModel", "TenantsConfig", "TransportConfig", "TrilemmaConfig", "resolve_config_path",
]

# The folder that holds serve_app/: the repository root, or site-packages once installed.
PROJECT_ROOT = Path(__file__).parent.parent
# The shipped configs are the app's (serve_app/configs); this layer only names where they are.
CONFIG_DIR = PROJECT_ROOT / "serve_app" / "configs"
DEFAULT_CONFIG_PATH = CONFIG_DIR / "local-cpu.yaml"

_NAME = re.compile(r"^[a-z][a-z0-9-]{0,39}$")


class QualityLossLimit(StrictModel):
    perplexity: NonNegativeFloat | None = Field(
        None, description="Most perplexity a move may add over the pool the request would have had; null: no limit.",
    )
    task_points: NonNegativeFloat | None = Field(
        None, description="Most task score a move may lose, in percentage points; null: no limit.",
    )


class QualityConfig(StrictModel):
    results: str | None = Field(
        None,
        description="A `trilemma bench quality` JSON result: each pool's measured perplexity and task score, "
        "which moves to a cheaper pool are reported and checked against; null: none measured.",
    )


class ScenarioConfig(StrictModel):
    description: str = Field("", description="What the scenario is for, for people.")
    priority: int = Field(
        description="Priority class; lower is served first (vLLM's convention), 0 is real-time."
    )
    default_max_tokens: PositiveInt = Field(
        256, description="Completion budget assumed when a request sets no max_tokens."
    )
    max_tokens_cap: PositiveInt | None = Field(
        None, description="Largest max_tokens the scenario allows; larger requests are capped."
    )
    max_temperature: NonNegativeFloat | None = Field(
        None, description="Highest sampling temperature allowed; higher or unset is lowered to it."
    )
    unquantized_only: bool = Field(False, description="Only pools without quantization may serve it.")
    normalize_whitespace: bool = Field(
        False, description="Collapse runs of spaces, trailing blanks and empty lines in prompts "
        "before they are counted and served (tokens saved are counted on the metrics).",
    )
    prefer: Literal["context_fit", "cheapest"] = Field(
        "context_fit",
        description="`context_fit`: the pool of the request's length class; "
        "`cheapest`: the pool with the lowest $/hour per replica among those that fit.",
    )
    pools: list[str] | None = Field(
        None, description="Pools the scenario may use; null means all (an empty list: none)."
    )
    models: list[str] | None = Field(
        None, min_length=1,
        description="Public model names the scenario may serve; a request that names another is refused, "
        "one that names none gets the first. Null: any model, and the app's default when none is named.",
    )
    max_quality_loss: QualityLossLimit | None = Field(
        None,
        description="Most quality a move to a cheaper pool (`prefer: cheapest`, the cost profile) may give up, "
        "as `quality.results` measured it; a move beyond it, or not measured, is not made. Null: any move.",
    )
    slo_ttft_ms: PositiveInt | None = Field(
        None, description="p99 time to first token the autoscaler holds for this scenario; null: none.",
    )
    slo_tpot_ms: PositiveInt | None = Field(
        None, description="p99 time per output token the autoscaler holds for this scenario; null: none.",
    )

    @model_validator(mode="after")
    def _default_within_cap(self) -> ScenarioConfig:
        if self.max_tokens_cap is not None and self.default_max_tokens > self.max_tokens_cap:
            # A default above the cap would only be capped again; keep the two consistent.
            object.__setattr__(self, "default_max_tokens", self.max_tokens_cap)
        return self

    def admits(self, pool_name: str, pool: PoolConfig) -> bool:
        if self.pools is not None and pool_name not in self.pools:
            return False
        return not (self.unquantized_only and pool.quantization)


class RoutingConfig(StrictModel):
    policy: str = Field("context_length", description="Routing policy, by registered name.")
    short_context_threshold_tokens: PositiveInt = Field(
        1024, description="prompt + max_tokens at or under this goes to a short pool."
    )
    default_scenario: str = Field(
        "chat", description="Scenario of /v1/* requests that carry no X-Scenario header."
    )


class RouterConfig(StrictModel):
    replicas: PositiveInt = Field(1, description="Router (ingress) replicas.")
    max_ongoing_requests: PositiveInt = Field(
        1000, description="Requests one router replica handles at once."
    )
    num_cpus: NonNegativeFloat = Field(
        0.0, description="CPUs Ray reserves per router replica; it waits on I/O, so 0 by default."
    )
    request_timeout_s: PositiveInt = Field(600, description="Longest a request may take in all.")
    max_body_bytes: PositiveInt = Field(
        8 * 1024 * 1024,
        description="Largest request body a router accepts; a larger one gets 413 before it is "
        "parsed. The default holds a prompt far past any pool's context.",
    )
    drain_timeout_s: PositiveFloat = Field(
        120.0,
        description="How long a router replica that is being removed (a redeploy, shutdown) goes "
        "on serving the requests it holds; new requests go to the other router replicas.",
    )
    max_queued_requests: PositiveInt = Field(
        2000, description="Requests waiting for a router replica before the proxy answers 429.",
    )
    retry_after_s: PositiveInt = Field(
        1, description="Retry-After of the proxy's 429 when the routers' queue is full.",
    )


class LocalRayConfig(StrictModel):
    num_cpus: PositiveInt | None = Field(
        4,
        description="Logical CPUs a locally started Ray advertises (null: the machine's cores). "
        "Engines reserve whole CPUs, so a small machine advertises more than it has.",
    )
    metrics_export_port: int = Field(
        8080, ge=1, le=65535,
        description="Where a Ray started by the app serves its Prometheus metrics: "
        "http://<node>:<port>/metrics (a joined cluster keeps its own port).",
    )


class HttpConfig(StrictModel):
    host: str = Field("127.0.0.1", description="Address the HTTP proxy binds.")
    port: int = Field(8000, ge=1, le=65535, description="Port the HTTP proxy listens on.")


class TransportConfig(StrictModel):
    ingress: Literal["haproxy", "serve_proxy"] = Field(
        "haproxy",
        description="`haproxy`: HAProxy on each node forwards HTTP straight to a router replica; "
        "`serve_proxy`: Ray Serve's Python proxy does (one more hop in Python for every token).",
    )
    throughput_optimized: bool = Field(
        True,
        description="Ray Serve's fast path between deployments: gRPC instead of the object store, "
        "user code on the replica's own event loop, the garbage collector frozen after start.",
    )
    ingress_max_connections: PositiveInt = Field(
        4096,
        description="With `haproxy`: most client connections it holds at once; lowered to what the "
        "open-file limit allows (each takes two descriptors), or HAProxy would not start.",
    )
    ingress_drain_s: NonNegativeFloat = Field(
        2.0,
        description="With `haproxy`: how long a stopping router still answers, so HAProxy stops "
        "sending it requests first (Ray's default of 30 s is meant for outside load balancers).",
    )
    ingress_replay_unanswered: bool = Field(
        True,
        description="With `haproxy`: a request whose router died before answering a byte is sent "
        "to another router (its tokens may then be generated twice); false: the client gets a 500.",
    )


class CostConfig(StrictModel):
    catalog: str | None = Field(
        None, description="Price catalog YAML; null: the one this package ships (core/prices.yaml)."
    )
    live_prices: Literal["auto", "off"] = Field(
        "auto",
        description="`auto`: AWS prices replace the catalog's when AWS credentials are present.",
    )
    aws_region: str = Field("us-east-1", description="Region whose on-demand and spot prices apply.")
    live_price_ttl_s: PositiveInt = Field(3600, description="How long live prices are reused.")


class TenantsConfig(StrictModel):
    keys_file: str | None = Field(
        None, description="YAML of tenants with hashed API keys and daily budgets "
        "(`trilemma tenants add` writes it); null: none from a file.",
    )
    keys_env: str | None = Field(
        "TRILEMMA_API_KEYS", description="Environment variable with more keys as `name:key,...`.",
    )
    spend_file: str | None = Field(
        None, description="Where the day's spend per tenant is kept across restarts; null: in memory only.",
    )


class TrilemmaConfig(StrictModel):
    app_name: str = Field("trilemma", description="Ray Serve application name.")
    model: ModelSpec = Field(
        default_factory=ModelSpec,
        description="The model every pool serves unless it names its own (`pools.<name>.model`), and "
        "the one a request that names no model gets.",
    )
    routing: RoutingConfig = Field(default_factory=RoutingConfig, description="How a request finds its scenario and pool.")
    router: RouterConfig = Field(default_factory=RouterConfig, description="The router (ingress) deployment.")
    pools: dict[str, PoolConfig] = Field(description="Engine pools by name.")
    adapters: dict[str, AdapterConfig] = Field(
        default_factory=dict,
        description="LoRA adapters by public name: a request that names one as its `model` is served by its "
        "base model's pools that set `lora`, with the adapter applied; /v1/models lists each with its base.",
    )
    scenarios: dict[str, ScenarioConfig] = Field(description="Scenario profiles by name.")
    costs: CostConfig = Field(default_factory=CostConfig, description="Prices: the catalog and live cloud prices.")
    autoscaling: AutoscalingConfig = Field(
        default_factory=AutoscalingConfig, description="Replicas per pool from latency, utilization and cost."
    )
    tenants: TenantsConfig = Field(default_factory=TenantsConfig, description="API keys and daily budgets.")
    alerts: AlertsConfig = Field(default_factory=AlertsConfig, description="Thresholds of the Prometheus alert rules.")
    local_ray: LocalRayConfig = Field(default_factory=LocalRayConfig, description="The Ray the app starts when none runs.")
    http: HttpConfig = Field(default_factory=HttpConfig, description="Where Ray Serve's HTTP proxy listens.")
    transport: TransportConfig = Field(
        default_factory=TransportConfig, description="How requests and tokens travel between Ray Serve's processes."
    )
    quality: QualityConfig = Field(
        default_factory=QualityConfig, description="Each pool's measured quality, for the moves to cheaper pools."
    )

    @model_validator(mode="after")
    def _names_and_references(self) -> TrilemmaConfig:
        if not self.pools:
            raise ValueError("pools: at least one pool is required")
        for kind, names in (("pool", self.pools), ("scenario", self.scenarios)):
            for name in names:
                if not _NAME.match(name):
                    raise ValueError(f"{kind} name {name!r} must match {_NAME.pattern}")
        for scenario_name, scenario in self.scenarios.items():
            unknown = sorted(set(scenario.pools or ()) - set(self.pools))
            if unknown:
                raise ValueError(
                    f"scenarios.{scenario_name}.pools names unknown pools {unknown}; "
                    f"configured: {sorted(self.pools)}"
                )
        self._check_models()
        self._check_adapters()
        for pool_name, pool in self.pools.items():
            unlisted = sorted({s.priority for s in self.scenarios.values()} - set(pool.admission.queue_share))
            if unlisted:
                raise ValueError(
                    f"pools.{pool_name}.admission.queue_share lists no share for scenario "
                    f"priorities {unlisted}; listed: {sorted(pool.admission.queue_share)}"
                )
        for section, names in (("autoscaling.pools", self.autoscaling.pools),
                               ("autoscaling.shrink_order", self.autoscaling.shrink_order)):
            unknown = sorted(set(names) - set(self.pools))
            if unknown:
                raise ValueError(f"{section} names unknown pools {unknown}; configured: {sorted(self.pools)}")
        for pool_name, scaling in self.autoscaling.pools.items():
            self._check_concurrency_rule(pool_name, scaling)
        if self.autoscaling.split.enabled:
            self.split_pools()  # raises when the split has no pair of pools to move work between
        limited = sorted(name for name, scenario in self.scenarios.items() if scenario.max_quality_loss)
        if limited and self.quality.results is None:
            raise ValueError(
                f"scenarios {limited} set max_quality_loss, but quality.results names no measurement to hold "
                "moves against: run `trilemma bench quality` and set quality.results to its JSON"
            )
        if self.routing.default_scenario not in self.scenarios:
            raise ValueError(
                f"routing.default_scenario {self.routing.default_scenario!r} is not a scenario; "
                f"configured: {sorted(self.scenarios)}"
            )
        return self

    def _check_models(self) -> None:
        sources: dict[str, tuple[str, str]] = {}
        for pool_name in self.pools:
            model = self.pool_model(pool_name)
            first = sources.setdefault(model.name, (pool_name, model.source))
            if first[1] != model.source:
                raise ValueError(
                    f"pools {first[0]} and {pool_name} both serve model {model.name!r} but load different "
                    f"sources ({first[1]!r}, {model.source!r}); give each source a public name of its own"
                )
        for scenario_name, scenario in self.scenarios.items():
            for model_name in scenario.models or ():
                if model_name not in sources:
                    raise ValueError(
                        f"scenarios.{scenario_name}.models names model {model_name!r}, which no pool serves; "
                        f"served: {sorted(sources)}"
                    )
                if not self.pools_serving(model_name, scenario):
                    raise ValueError(
                        f"scenarios.{scenario_name}.models names model {model_name!r}, but none of the pools "
                        f"serving it ({sorted(self.pools_serving(model_name))}) is one the scenario may use"
                    )

    def _check_adapters(self) -> None:
        for name, adapter in self.adapters.items():
            if name in self.models or name == NO_ADAPTER:
                reserved = "the label of requests without an adapter" if name == NO_ADAPTER else "a model's name"
                raise ValueError(f"adapters.{name}: the name is {reserved}; give the adapter a name of its own")
            if adapter.base not in self.models:
                raise ValueError(f"adapters.{name}.base {adapter.base!r} is not a model the app serves; "
                                 f"served: {sorted(self.models)}")
            if not self.pools_serving(adapter.base, adapters=True):
                raise ValueError(
                    f"adapters.{name}: no pool serving its base {adapter.base!r} sets `lora` "
                    f"(pools serving it: {sorted(self.pools_serving(adapter.base))})")

    def pool_model(self, pool_name: str) -> ModelSpec:
        """The model a pool's engines serve: its own, or the app's."""
        return self.pools[pool_name].model or self.model

    @property
    def models(self) -> dict[str, ModelSpec]:
        """Every public model name the app serves, in the order the pools name them."""
        return {model.name: model for model in map(self.pool_model, self.pools)}

    @property
    def default_model(self) -> str:
        """The model of a request that names none: the app's, or the first pool's when no pool serves it."""
        return self.model.name if self.model.name in self.models else next(iter(self.models))

    def pools_serving(self, model_name: str, scenario: ScenarioConfig | None = None, *,
                      adapters: bool = False) -> list[str]:
        """The pools whose engines serve `model_name`, and, where `scenario` is given, that it may
        use for that model (its pools, its precision, its models); with `adapters`, only those
        that serve the model's adapters."""
        if scenario is not None and scenario.models is not None and model_name not in scenario.models:
            return []
        return [name for name, pool in self.pools.items()
                if self.pool_model(name).name == model_name and (scenario is None or scenario.admits(name, pool))
                and (not adapters or pool.lora is not None)]

    def adapters_of_pool(self, pool_name: str) -> dict[str, AdapterConfig]:
        """The adapters a pool's replicas may load: those of its model, where it sets `lora`."""
        if self.pools[pool_name].lora is None:
            return {}
        model = self.pool_model(pool_name).name
        return {name: adapter for name, adapter in self.adapters.items() if adapter.base == model}

    def _check_concurrency_rule(self, pool_name: str, scaling: PoolScalingConfig) -> None:
        rule, pool = scaling.raise_concurrency, self.pools[pool_name]
        if rule is None:
            return
        where = f"autoscaling.pools.{pool_name}.raise_concurrency.max_in_engine ({rule.max_in_engine})"
        if rule.max_in_engine < pool.max_in_engine:
            raise ValueError(f"{where} is below the pool's admission.max_in_engine ({pool.max_in_engine})")
        needed = rule.max_in_engine + pool.admission.max_queued + 1
        if pool.max_ongoing_requests is not None and pool.max_ongoing_requests < needed:
            raise ValueError(f"{where} does not fit the pool's max_ongoing_requests "
                             f"({pool.max_ongoing_requests}); it takes {needed} with the queue")

    def max_in_engine_ceiling(self, pool_name: str) -> int:
        """The most requests a replica of the pool may ever hand its engine: its
        admission.max_in_engine, or the ceiling of its run-time concurrency rule."""
        scaling = self.autoscaling.pools.get(pool_name)
        rule = scaling.raise_concurrency if scaling and self.autoscaling.enabled else None
        return max(self.pools[pool_name].max_in_engine, rule.max_in_engine if rule else 0)

    def ongoing_limit(self, pool_name: str) -> int:
        """Ray's max_ongoing_requests for a replica: room for the ceiling of its engine
        concurrency, so that raising it at run time needs no redeployment."""
        pool = self.pools[pool_name]
        if pool.max_ongoing_requests is not None:
            return pool.max_ongoing_requests
        return pool.ongoing_limit + self.max_in_engine_ceiling(pool_name) - pool.max_in_engine

    @property
    def largest_max_model_len(self) -> int:
        return max(pool.max_model_len for pool in self.pools.values())

    def split_pools(self) -> tuple[str, str]:
        """The (short, long) pools whose split autoscaling.split tunes: the ones it names, else
        the first pool of each role; raises ValueError with the reason when they are no pair."""
        split = self.autoscaling.split
        if self.routing.policy != "context_length":
            raise ValueError(f"autoscaling.split moves the threshold of routing.policy context_length; "
                             f"routing.policy is {self.routing.policy!r}")

        def pick(named: str | None, role: str, key: str) -> str:
            found = [name for name, pool in self.pools.items() if pool.role == role]
            if named is not None and named not in self.pools:
                raise ValueError(f"autoscaling.split.{key} names unknown pool {named!r}; configured: "
                                 f"{sorted(self.pools)}")
            if not found:
                raise ValueError(f"autoscaling.split needs a pool of role {role} (or autoscaling.split.{key})")
            if named is not None and named != found[0]:
                # The router sends a request of a role to the first pool of that role: the split
                # must read the loads of the pools its threshold moves work between.
                raise ValueError(f"autoscaling.split.{key} {named!r} is not the pool the router sends {role} "
                                 f"requests to ({found[0]!r}, the first pool of role {role})")
            return found[0]

        short, long = pick(split.short_pool, "short", "short_pool"), pick(split.long_pool, "long", "long_pool")
        if self.pool_model(short).name != self.pool_model(long).name:
            raise ValueError(f"autoscaling.split's pools serve different models ({short!r}: "
                             f"{self.pool_model(short).name}, {long!r}: {self.pool_model(long).name}): "
                             "moving a request between them would change its model")
        unscaled = [name for name in (short, long) if name not in self.autoscaling.pools]
        if unscaled:
            # Only an autoscaled pool's policy runs, and only its figures reach the split.
            raise ValueError(f"autoscaling.split's pools must be autoscaled: list {unscaled} in autoscaling.pools")
        ceiling = self.pools[short].max_model_len
        high = split.max_threshold_tokens or ceiling
        if high > ceiling:
            raise ValueError(f"autoscaling.split.max_threshold_tokens ({high}) is above the max_model_len of "
                             f"pool {short} ({ceiling})")
        if split.min_threshold_tokens > ceiling:
            raise ValueError(f"autoscaling.split.min_threshold_tokens ({split.min_threshold_tokens}) is above the "
                             f"max_model_len of pool {short} ({ceiling})")
        start = self.routing.short_context_threshold_tokens
        if not split.min_threshold_tokens <= start <= high:
            raise ValueError(f"routing.short_context_threshold_tokens ({start}) is outside the split's range "
                             f"[{split.min_threshold_tokens}, {high}]: the split starts from it")
        return short, long

    def largest_max_model_len_for(self, model_name: str, scenario: ScenarioConfig | None = None) -> int:
        """The longest request a pool of `model_name` (that `scenario` may use) takes; the app's
        largest where none does, so that a scenario without pools is refused as such."""
        serving = self.pools_serving(model_name, scenario)
        return max((self.pools[name].max_model_len for name in serving), default=self.largest_max_model_len)

    @classmethod
    def from_yaml(cls, path: str | Path) -> TrilemmaConfig:
        path = resolve_config_path(path)
        return cls.from_dict(read_yaml(path), source=str(path))

    @classmethod
    def from_dict(cls, raw: dict[str, Any], source: str = "config") -> TrilemmaConfig:
        return cls.validated(raw, source)


def resolve_config_path(path: str | Path) -> Path:
    """`path` as given when it exists, else the same relative path under the project: Serve
    builds the app in a task on the cluster, whose working directory is not the project's, so
    `config=serve_app/configs/gpu.yaml` must find the installed project's file."""
    given = Path(path)
    if given.is_absolute() or given.exists():
        return given
    in_project = PROJECT_ROOT / given
    return in_project if in_project.exists() else given
