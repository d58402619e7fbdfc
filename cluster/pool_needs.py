"""What each GPU pool of a Trilemma config asks of the cluster: GPUs and GPU memory per
replica, how many replicas at least and at most, and how its machines may be bought."""

from __future__ import annotations

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from core.config import TrilemmaConfig
from core.config_base import StrictModel
from core.model_size import read_model_config, weights_gib
from core.model_store import local_model_folder
from core.price_catalog import Purchase


class PoolNeed(StrictModel):
    pool: str
    accelerator: str = Field(description="The accelerator the pool names; its replicas ask Ray for it.")
    gpus_per_replica: PositiveFloat = Field(
        description="Whole GPUs (tensor x pipeline parallel), or the share of one GPU (gpu_fraction)."
    )
    gpu_memory_gib: PositiveFloat | None = Field(
        None, description="GPU memory the replica needs on each GPU (within its share); null: "
        "the pool needs its named accelerator.",
    )
    min_replicas: NonNegativeInt
    max_replicas: PositiveInt
    purchase: Purchase
    model: str = Field("", description="The public name of the model the pool serves.")
    weights_gib: PositiveFloat | None = Field(
        None, description="Its weights in the pool's precision, all GPUs of a replica together; null: not "
        "known here (a hub id, or a model shape this count does not know).",
    )
    kv_cache_gib: PositiveFloat | None = Field(None, description="The pool's fixed KV cache per GPU, if it sets one.")

    @model_validator(mode="after")
    def _bounds_in_order(self) -> PoolNeed:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"pool {self.pool}: min_replicas {self.min_replicas} > max_replicas {self.max_replicas}")
        return self

    @property
    def shares_a_gpu(self) -> bool:
        return self.gpus_per_replica < 1

    @property
    def whole_gpus(self) -> int:
        """GPUs a replica holds whole (1 for a replica on a share of one GPU)."""
        return max(1, int(self.gpus_per_replica))

    @property
    def weights_per_gpu_gib(self) -> float | None:
        """The weights each GPU of a replica holds: tensor and pipeline parallel split them."""
        return None if self.weights_gib is None else self.weights_gib / self.whole_gpus

    @property
    def held_per_gpu_gib(self) -> float | None:
        """What each GPU of a replica must hold for certain: its weights and a fixed KV cache."""
        weights = self.weights_per_gpu_gib
        return None if weights is None else weights + (self.kv_cache_gib or 0.0)

    def held_described(self) -> str:
        kv = f" and its {self.kv_cache_gib:g} GiB KV cache" if self.kv_cache_gib else ""
        return f"{self.model}'s {self.weights_per_gpu_gib:.1f} GiB of weights{kv}"

    @property
    def memory_per_gpu_gib(self) -> float | None:
        """What one GPU must have: a replica on a share of a GPU gets that share of its memory."""
        if self.gpu_memory_gib is None:
            return None
        return self.gpu_memory_gib / self.gpus_per_replica if self.shares_a_gpu else self.gpu_memory_gib

    def describe(self) -> str:
        """`1 GPU x 80 GiB per replica`, `2 GPUs (H100) per replica`, `0.45 of a GPU with 40 GiB
        per replica`, `0.45 of one H200 per replica`."""
        if self.shares_a_gpu:
            of = f"a GPU with {self.gpu_memory_gib:g} GiB" if self.gpu_memory_gib is not None else f"one {self.accelerator}"
            return f"{self.gpus_per_replica:g} of {of} per replica"
        gpus = "1 GPU" if self.whole_gpus == 1 else f"{self.whole_gpus} GPUs"
        memory = f" x {self.gpu_memory_gib:g} GiB" if self.gpu_memory_gib is not None else f" ({self.accelerator})"
        return f"{gpus}{memory} per replica"


def pool_needs(config: TrilemmaConfig) -> list[PoolNeed]:
    """The config's GPU pools; a pool the autoscaler scales spans its autoscaling bounds, any
    other keeps its fixed `replicas`."""
    needs = []
    for name, pool in config.pools.items():
        if pool.is_cpu:
            continue
        bounds = config.autoscaling.pools.get(name) if config.autoscaling.enabled else None
        low, high = (bounds.min_replicas, bounds.max_replicas) if bounds else (pool.replicas, pool.replicas)
        model = config.pool_model(name)
        needs.append(PoolNeed(
            pool=name, accelerator=pool.accelerator, gpus_per_replica=pool.units,
            gpu_memory_gib=pool.gpu_memory_gib, min_replicas=low, max_replicas=high, purchase=pool.purchase,
            model=model.name, weights_gib=pool_weights_gib(model.source, pool.quantization,
                                                          pool.engine_kwargs.get("dtype")),
            kv_cache_gib=pool.kv_cache_gib,
        ))
    return needs


def pool_weights_gib(source: str, quantization: str | None, dtype: str | None) -> float | None:
    """The size of a pool's weights, where its model's config is on this machine."""
    folder = local_model_folder(source)
    config = read_model_config(str(folder)) if folder else None
    return weights_gib(config, quantization, dtype) if config else None


def cpu_pools(config: TrilemmaConfig) -> list[str]:
    return [name for name, pool in config.pools.items() if pool.is_cpu]
