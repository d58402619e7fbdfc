"""A pool's config: its engine, hardware, price, admission queue and replica choice."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

from core.adapter_config import PoolLoraConfig
from core.config_base import StrictModel
from core.model_spec import ModelSpec

# Settings with a field of their own; repeating them in engine_kwargs would give two truths.
_OWNED_ENGINE_KWARGS = ("max_model_len", "max_num_seqs", "quantization", "enable_sleep_mode", "kv_cache_memory_bytes",
                        "distributed_executor_backend",  # engine_process
                        "enable_lora", "max_loras", "max_lora_rank", "max_cpu_loras")  # lora
GIB = 1 << 30
# Real-time, quality, cost, batch: each class below may fill less of a replica's queue.
DEFAULT_QUEUE_SHARE = {0: 1.0, 1: 0.75, 2: 0.5, 3: 0.25}
# Arrivals a replica with a full queue can decide at once; more wait at the caller.
ARRIVAL_HEADROOM = 16
REPLICA_ROUTERS = {
    "least_loaded": "router.replica_router:LeastLoadedRouter",
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


class StreamBatchingConfig(StrictModel):
    interval_ms: NonNegativeFloat = Field(
        50.0,
        description="Longest a token waits to leave the replica with the tokens after it, while "
        "the replica streams `min_streams` answers or more; 0: every token leaves at once. The "
        "first token of an answer never waits.",
    )
    min_streams: PositiveInt = Field(
        64,
        description="Streams in flight on a replica from which later tokens are batched: below it "
        "each token leaves as the engine makes it (the lowest time between tokens); from it on, "
        "fewer, larger chunks keep the replica and the router free for more streams.",
    )


class IdleSleepConfig(StrictModel):
    after_s: PositiveFloat | None = Field(
        None,
        description="Idle this long (no request in the engine or waiting for it), a replica puts "
        "its engine to sleep with vLLM's sleep mode: the KV cache is freed and the weights move to "
        "host memory, so the GPU memory serves the other pools or the batch job; the next request "
        "wakes it (seconds, not a cold start). null: never. vLLM sleeps on GPUs only.",
    )
    level: Literal[1, 2] = Field(
        1,
        description="vLLM's sleep level: 1 keeps the weights in host memory (the fast wake); 2 drops "
        "them, and waking reloads them from disk.",
    )


class PoolConfig(StrictModel):
    role: Literal["short", "long"] = Field(
        description="Which requests the pool is for: `short` context (low latency) or `long`."
    )
    model: ModelSpec | None = Field(
        None,
        description="The model this pool's engines serve (its public name and source), when it is not the "
        "app's `model`: a small fast model for real-time work, a large one for batch. Pools that serve one "
        "public name must load one source; they may differ in quantization.",
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
    engine_process: Literal["replica", "ray_worker"] | None = Field(
        None,
        description="Where a GPU pool's model runs. `replica`: in vLLM's engine core, a process under the "
        "pool's replica, which holds the pool's GPU share, as under plain `vllm serve`; the replica builds "
        "the engine config itself and forks the engine core from a process that imported vLLM while the "
        "replica started. `ray_worker`: Ray Serve LLM's own layout, "
        "the model in a Ray worker of vLLM's Ray executor after a GPU task built the engine config, two "
        "more processes that each import vLLM before the engine starts; it runs engines spread over "
        "GPUs. Null: `replica` for an engine on one GPU or a share of one, `ray_worker` for a tensor or "
        "pipeline parallel engine. CPU pools always run as `replica`.",
    )
    gpu_memory_gib: PositiveFloat | None = Field(
        None,
        description="GPU memory one replica needs on each GPU it holds (weights, KV cache, "
        "activations); with gpu_fraction, within its share of the GPU. `trilemma cluster plan` picks "
        "the cheapest accelerator with that much. Null: the pool needs `accelerator` itself.",
    )
    kv_cache_gib: PositiveFloat | None = Field(
        None,
        description="KV cache of one replica per GPU, in GiB, instead of what vLLM's memory profile leaves "
        "of gpu_memory_utilization. Set it for pools that share a GPU: a profile assumes that nothing else "
        "on the GPU allocates while it runs, and an engine starting beside it does (on an H200 the long "
        "pool's profile read -21 GiB and its engine failed to start). Null: vLLM's profile.",
    )
    quantization: str | None = Field(
        None, description="vLLM quantization method (e.g. `fp8`, `awq`), or `w8a8-int8`: int8 weights and "
        "activations, derived once from the model's checkpoint folder (core/int8_checkpoint.py; runs on any x86 "
        "CPU and on GPUs); null for full precision."
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
    lora: PoolLoraConfig | None = Field(
        None,
        description="Serve the configured `adapters` of this pool's model: adapters load on demand into each "
        "replica (at most lora.max_resident at once) and requests for one prefer a replica that holds it. "
        "Null: the pool serves its base model only.",
    )
    stream_batching: StreamBatchingConfig = Field(
        default_factory=StreamBatchingConfig,
        description="How each replica sends an answer's tokens on: one by one, or batched while busy.",
    )
    sleep_when_idle: IdleSleepConfig = Field(
        default_factory=IdleSleepConfig,
        description="Whether an idle replica's engine sleeps (GPU memory freed) instead of staying up.",
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Environment variables of the engine processes."
    )
    health_check_period_s: PositiveFloat = Field(
        2.0,
        description="How often Serve asks each replica whether its engine still lives; a replica "
        "whose engine died is replaced after the next check. Requests see the death at once "
        "and go to another pool meanwhile.",
    )
    drain_timeout_s: PositiveFloat = Field(
        120.0,
        description="How long a replica that is being removed (scale-down, a redeploy, shutdown) "
        "goes on serving the requests it holds before it is stopped; new requests go elsewhere "
        "meanwhile. Size it to the pool's longest expected answer.",
    )
    cpu_niceness: int | None = Field(
        None, ge=0, le=19,
        description="Nice value of the pool's replica and engine processes (Ray starts them at 15); "
        "on a CPU host, a higher value makes the pool yield contended cores to the other pools "
        "(19 for a pool that carries batch or long-context work beside a chat pool). Null: Ray's.",
    )

    @model_validator(mode="after")
    def _engine_kwargs_do_not_shadow_fields(self) -> PoolConfig:
        shadowed = sorted(set(self.engine_kwargs) & set(_OWNED_ENGINE_KWARGS))
        if shadowed:
            raise ValueError(f"engine_kwargs must not set {shadowed}: use the pool's own fields")
        return self

    @model_validator(mode="after")
    def _lora_serves_generation(self) -> PoolConfig:
        if self.lora is not None and self.embeds:
            raise ValueError("lora serves adapters of a generative model; this pool's engine embeds")
        return self

    @model_validator(mode="after")
    def _gpu_fraction_fits(self) -> PoolConfig:
        if self.gpu_fraction is not None:
            if self.is_cpu:
                raise ValueError("gpu_fraction is for GPU pools; this pool's accelerator is cpu")
            if self.units_of_parallelism > 1:
                raise ValueError("gpu_fraction needs a single-GPU engine (tensor and pipeline parallel 1)")
        if self.gpu_memory_gib is not None and self.is_cpu:
            raise ValueError("gpu_memory_gib is for GPU pools; this pool's accelerator is cpu")
        if self.engine_process == "ray_worker" and self.is_cpu:
            raise ValueError("engine_process ray_worker is for GPU pools; a CPU pool's engine runs under its replica")
        if self.engine_process == "replica" and self.units_of_parallelism > 1:
            raise ValueError(
                f"engine_process replica runs an engine on one GPU; this one is tensor x pipeline parallel "
                f"{self.units_of_parallelism} (set engine_process: ray_worker, or null)")
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
    def engine_in_replica(self) -> bool:
        """Whether the engine's processes run under the replica (`engine_process`; unset, an
        engine on one GPU does)."""
        if self.is_cpu:
            return True
        if self.engine_process is not None:
            return self.engine_process == "replica"
        return self.units_of_parallelism == 1

    @property
    def units_of_parallelism(self) -> int:
        return (int(self.engine_kwargs.get("tensor_parallel_size", 1))
                * int(self.engine_kwargs.get("pipeline_parallel_size", 1)))

    @property
    def uses_priority_scheduling(self) -> bool:
        return self.engine_kwargs.get("scheduling_policy") == "priority"

    @property
    def embeds(self) -> bool:
        return engine_embeds(self.engine_kwargs)


def engine_embeds(engine_kwargs: dict[str, Any]) -> bool:
    """Whether an engine runs its model for embeddings (vLLM's pooling runner, or a generative
    model converted to embed), so that it answers /v1/embeddings and not chat or completions."""
    return engine_kwargs.get("runner") == "pooling" or engine_kwargs.get("convert") == "embed" \
        or engine_kwargs.get("task") in ("embed", "embedding")
