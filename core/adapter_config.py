"""LoRA adapters in the config: each adapter's public name, base model and files, and how many
adapters a pool's replicas hold and batch."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt, model_validator

from core.config_base import StrictModel

# The ranks vLLM's engine accepts as max_lora_rank.
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
# The label value of requests to a base model (no adapter): `adapter` is never empty.
NO_ADAPTER = "base"


class AdapterConfig(StrictModel):
    base: str = Field(
        description="The public name of the model the adapter was trained on (one the app serves); "
        "its requests go to the pools that serve that model with `lora` set.",
    )
    source: str = Field(
        description="The adapter's folder in peft's layout (adapter_config.json and "
        "adapter_model.safetensors): a local path on every node that runs a pool replica, or an "
        "s3:// URI, fetched by each replica when it first loads the adapter.",
    )
    endpoint_url: str | None = Field(
        None, description="The S3-compatible endpoint of an s3:// source; null: AWS's, or "
        "AWS_ENDPOINT_URL(_S3) where set.",
    )


class PoolLoraConfig(StrictModel):
    """vLLM's LoRA settings for a pool's engines: set, the pool serves the adapters of its model."""

    max_loras: PositiveInt = Field(
        4, description="Adapters one engine batch may mix (vLLM's max_loras); requests for more wait "
        "for the next step.",
    )
    max_lora_rank: Literal[1, 8, 16, 32, 64, 128, 256, 320, 512] = Field(
        16, description="Largest adapter rank the engines accept (vLLM's max_lora_rank, one of "
        f"{', '.join(map(str, LORA_RANKS))}); a request for an adapter of a higher rank is refused with 400. "
        "Memory for the adapters' weights is set aside at this rank.",
    )
    max_resident: PositiveInt = Field(
        8, description="Adapters one replica keeps loaded; loading one more first unloads the one used "
        "least recently. The engine's CPU-side adapter cache (vLLM's max_cpu_loras) is this size, so an "
        "adapter the replica holds is never reloaded from disk inside an engine step.",
    )

    @model_validator(mode="after")
    def _resident_holds_a_batch(self) -> PoolLoraConfig:
        if self.max_resident < self.max_loras:
            raise ValueError(f"lora.max_resident ({self.max_resident}) must be at least lora.max_loras "
                             f"({self.max_loras}): vLLM's CPU cache must hold every adapter of a batch")
        return self

    def engine_kwargs(self) -> dict[str, object]:
        return {"enable_lora": True, "max_loras": self.max_loras, "max_lora_rank": self.max_lora_rank,
                "max_cpu_loras": self.max_resident}
