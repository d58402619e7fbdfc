"""The one YAML config: model, pools, scenarios and routing, validated before anything starts."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveFloat, PositiveInt, ValidationError
from pydantic import model_validator

from serve_app.model_store import EMBEDDED_MODEL_REF

CONFIG_DIR = Path(__file__).parent / "configs"
DEFAULT_CONFIG_PATH = CONFIG_DIR / "local-cpu.yaml"

_NAME = re.compile(r"^[a-z][a-z0-9-]{0,39}$")
# Settings with a field of their own; repeating them in engine_kwargs would give two truths.
_OWNED_ENGINE_KWARGS = ("max_model_len", "max_num_seqs", "quantization")


class ConfigError(ValueError):
    """A config file that cannot be used, with the file and the offending keys named."""


class StrictModel(BaseModel):
    """Base of every config section: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @classmethod
    def validated(cls, raw: Any, source: str):
        """`raw` as this model, or a ConfigError naming `source` and every offending key."""
        try:
            return cls.model_validate(raw)
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(part) for part in issue['loc']) or '(top level)'}: {issue['msg']}"
                for issue in error.errors()
            )
            raise ConfigError(f"{source}: {problems}") from None


class ModelSpec(StrictModel):
    name: str = Field(
        "SmolLM2-135M-Instruct",
        description="Public model name: what clients send as `model` and see in /v1/models.",
    )
    source: str = Field(
        EMBEDDED_MODEL_REF,
        description=f"What the engines load: `{EMBEDDED_MODEL_REF}` (the model this package "
        "embeds, prepared on first use), a Hugging Face id, or a local folder.",
    )


# Real-time, quality, cost, batch: each class below may fill less of a replica's queue.
DEFAULT_QUEUE_SHARE = {0: 1.0, 1: 0.75, 2: 0.5, 3: 0.25}
# Arrivals a replica with a full queue can decide at once; more wait at the caller.
ARRIVAL_HEADROOM = 16
REPLICA_ROUTERS = {
    "least_loaded": "deployments.replica_router:LeastLoadedRouter",
    "prefix_cache_affinity": "ray.serve.llm.request_router:PrefixCacheAffinityRouter",
}


class AdmissionConfig(StrictModel):
    policy: Literal["priority", "fifo"] = Field(
        "priority",
        description="`priority`: lower classes are shed first and a full queue sheds a less "
        "urgent waiting request before a more urgent arrival; `fifo`: one line, its end shed.",
    )
    max_in_engine: PositiveInt | None = Field(
        None,
        description="Requests one replica hands its engine at once (running or in the engine's "
        "own waiting list); the rest wait in the replica's priority queue. Null: 2 x max_num_seqs.",
    )
    max_queued: int = Field(
        32, ge=0, description="Requests one replica holds in its queue before it sheds (429).",
    )
    queue_share: dict[int, float] = Field(
        default_factory=lambda: dict(DEFAULT_QUEUE_SHARE),
        description="By scenario priority: the fraction of max_queued that priority may fill "
        "before its requests are shed. Every scenario's priority must be listed.",
    )

    @model_validator(mode="after")
    def _shares_are_fractions(self) -> AdmissionConfig:
        bad = {priority: share for priority, share in self.queue_share.items() if not 0 <= share <= 1}
        if bad:
            raise ValueError(f"queue_share values must be within [0, 1]; got {bad}")
        if not self.queue_share:
            raise ValueError("queue_share must list at least one priority")
        return self


class PoolConfig(StrictModel):
    role: Literal["short", "long"] = Field(
        description="Which requests the pool is for: `short` context (low latency) or `long`."
    )
    max_model_len: PositiveInt = Field(description="Longest prompt + completion, in tokens.")
    max_num_seqs: PositiveInt = Field(description="Most sequences one engine batches at once.")
    replicas: PositiveInt = Field(1, description="Engine replicas in the pool.")
    max_ongoing_requests: PositiveInt | None = Field(
        None,
        description="Requests one replica accepts at once (in its engine, its queue, and arrivals "
        "being decided) before Serve queues them at the caller. "
        "Null: admission.max_in_engine + 2 x admission.max_queued (at least 16 for arrivals).",
    )
    accelerator: str = Field(
        "cpu",
        description="`cpu`, or the Ray accelerator type of the GPUs (e.g. `H100`, `H200`, `L4`).",
    )
    resources: dict[str, float] = Field(
        default_factory=lambda: {"CPU": 1.0},
        description="Ray resources one CPU engine reserves (its placement-group bundle). "
        "GPU pools derive theirs from `accelerator`, `gpu_fraction` and the engine's parallelism.",
    )
    gpu_fraction: float | None = Field(
        None, gt=0, le=1,
        description="Share of one GPU a replica takes, for pools that share a GPU (set "
        "engine_kwargs.gpu_memory_utilization to match); null: whole GPUs, tensor x pipeline parallel.",
    )
    quantization: str | None = Field(
        None, description="vLLM quantization method (e.g. `fp8`, `awq`); null for full precision."
    )
    purchase: Literal["on_demand", "spot"] = Field(
        "on_demand", description="How the pool's machines are bought; picks the catalog price."
    )
    price_usd_per_hour: NonNegativeFloat | None = Field(
        None,
        description="Hardware price of one replica per hour, overriding the price catalog "
        "(`accelerator` x units x the `purchase` price); energy and premium still apply.",
    )
    admission: AdmissionConfig = Field(
        default_factory=AdmissionConfig, description="Each replica's bounded priority queue."
    )
    replica_router: Literal["least_loaded", "prefix_cache_affinity"] = Field(
        "least_loaded",
        description="How Ray Serve picks a replica within the pool: `least_loaded` (fewest "
        "requests), or `prefix_cache_affinity` (Ray's PrefixCacheAffinityRouter: the replica "
        "whose cache likely holds the prompt's prefix while loads are balanced).",
    )
    replica_router_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="Arguments of the replica router "
        "(e.g. `imbalanced_threshold` for prefix_cache_affinity).",
    )
    engine_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="Further vLLM engine arguments, passed through as given."
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Environment variables of the engine processes."
    )

    @model_validator(mode="after")
    def _engine_kwargs_do_not_shadow_fields(self) -> PoolConfig:
        shadowed = sorted(set(self.engine_kwargs) & set(_OWNED_ENGINE_KWARGS))
        if shadowed:
            raise ValueError(f"engine_kwargs must not set {shadowed}: use the pool's own fields")
        return self

    @model_validator(mode="after")
    def _gpu_fraction_fits(self) -> PoolConfig:
        if self.gpu_fraction is not None:
            if self.is_cpu:
                raise ValueError("gpu_fraction is for GPU pools; this pool's accelerator is cpu")
            if self.units_of_parallelism > 1:
                raise ValueError("gpu_fraction needs a single-GPU engine (tensor and pipeline parallel 1)")
        return self

    @model_validator(mode="after")
    def _replica_takes_its_queue(self) -> PoolConfig:
        # Beyond max_ongoing_requests Ray queues at the caller, first come first served, where
        # priorities cannot reorder anything; an arrival at a full queue must reach the replica
        # to take a less urgent request's place.
        needed = self.max_in_engine + self.admission.max_queued + 1
        if self.max_ongoing_requests is not None and self.max_ongoing_requests < needed:
            raise ValueError(
                f"max_ongoing_requests ({self.max_ongoing_requests}) must be at least "
                f"admission.max_in_engine + admission.max_queued + 1 ({needed})"
            )
        return self

    @property
    def max_in_engine(self) -> int:
        return self.admission.max_in_engine or 2 * self.max_num_seqs

    @property
    def ongoing_limit(self) -> int:
        """Requests Ray lets into one replica: its engine's, its queue, and room for arrivals
        at a full queue to be decided there (shed at once, or placed for a less urgent one)."""
        if self.max_ongoing_requests is not None:
            return self.max_ongoing_requests
        queued = self.admission.max_queued
        return self.max_in_engine + queued + max(ARRIVAL_HEADROOM, queued)

    @property
    def is_cpu(self) -> bool:
        return self.accelerator.lower() == "cpu"

    @property
    def units(self) -> float:
        """Accelerator units one replica holds: its vCPUs, or its GPUs (tensor x pipeline
        parallel); what the catalog's per-unit prices multiply."""
        if self.is_cpu:
            return self.resources.get("CPU", 1.0)
        return self.gpu_fraction or float(self.units_of_parallelism)

    @property
    def units_of_parallelism(self) -> int:
        return (int(self.engine_kwargs.get("tensor_parallel_size", 1))
                * int(self.engine_kwargs.get("pipeline_parallel_size", 1)))

    @property
    def uses_priority_scheduling(self) -> bool:
        return self.engine_kwargs.get("scheduling_policy") == "priority"


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


class CostConfig(StrictModel):
    catalog: str | None = Field(
        None, description="Price catalog YAML; null: the one this package ships (cluster/prices.yaml)."
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


class PoolScalingConfig(StrictModel):
    min_replicas: int = Field(1, ge=0, description="Fewest replicas; 0 lets an idle pool scale to zero.")
    max_replicas: PositiveInt = Field(1, description="Most replicas.")
    idle_to_zero_after_s: PositiveFloat | None = Field(
        None, description="With min_replicas 0: seconds without a request before the last replica goes.",
    )

    @model_validator(mode="after")
    def _bounds_in_order(self) -> PoolScalingConfig:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas ({self.min_replicas}) is above max_replicas ({self.max_replicas})")
        return self


class AutoscalingConfig(StrictModel):
    enabled: bool = Field(False, description="Scale pools with Trilemma's policy instead of fixed replicas.")
    period_s: PositiveFloat = Field(5.0, description="Seconds between two decisions.")
    latency_headroom: float = Field(
        0.8, gt=0, le=1, description="Scale up when a p99 passes this fraction of its SLO.",
    )
    utilization_floor: float = Field(
        0.2, ge=0, lt=1, description="Scale down when engines are busier than this for less of the time.",
    )
    budget_usd_per_hour: NonNegativeFloat | None = Field(
        None, description="Most the pools' replicas may cost per hour together; null: no budget.",
    )
    shrink_order: list[str] = Field(
        default_factory=list,
        description="Pools in the order they give up replicas when over budget; unlisted pools "
        "follow, long pools before short ones.",
    )
    up_after_periods: PositiveInt = Field(1, description="Periods in a row a scale-up must be asked for.")
    down_after_periods: PositiveInt = Field(6, description="Periods in a row a scale-down must be asked for.")
    up_cooldown_s: NonNegativeFloat = Field(15.0, description="Seconds after any change before scaling up.")
    down_cooldown_s: NonNegativeFloat = Field(60.0, description="Seconds after any change before scaling down.")
    pools: dict[str, PoolScalingConfig] = Field(
        default_factory=dict, description="Replica bounds by pool; an unlisted pool keeps its `replicas`.",
    )


class TrilemmaConfig(StrictModel):
    app_name: str = Field("trilemma", description="Ray Serve application name.")
    model: ModelSpec = Field(default_factory=ModelSpec)
    routing: RoutingConfig = Field(default_factory=RoutingConfig)
    router: RouterConfig = Field(default_factory=RouterConfig)
    pools: dict[str, PoolConfig] = Field(description="Engine pools by name.")
    scenarios: dict[str, ScenarioConfig] = Field(description="Scenario profiles by name.")
    costs: CostConfig = Field(default_factory=CostConfig)
    autoscaling: AutoscalingConfig = Field(default_factory=AutoscalingConfig)
    tenants: TenantsConfig = Field(default_factory=TenantsConfig)
    local_ray: LocalRayConfig = Field(default_factory=LocalRayConfig)
    http: HttpConfig = Field(default_factory=HttpConfig)

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
        if self.routing.default_scenario not in self.scenarios:
            raise ValueError(
                f"routing.default_scenario {self.routing.default_scenario!r} is not a scenario; "
                f"configured: {sorted(self.scenarios)}"
            )
        return self

    @property
    def largest_max_model_len(self) -> int:
        return max(pool.max_model_len for pool in self.pools.values())

    @classmethod
    def from_yaml(cls, path: str | Path) -> TrilemmaConfig:
        path = Path(path)
        try:
            raw = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as error:
            raise ConfigError(f"{path}: cannot read config: {error}") from error
        return cls.from_dict(raw or {}, source=str(path))

    @classmethod
    def from_dict(cls, raw: dict[str, Any], source: str = "config") -> TrilemmaConfig:
        return cls.validated(raw, source)
