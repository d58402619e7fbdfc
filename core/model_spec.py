"""A model as the config names it: the public name clients send, and what the engines load."""

from __future__ import annotations

from pydantic import Field

from core.config_base import StrictModel

# The reference an operator writes in a config to mean "the model this package embeds".
EMBEDDED_MODEL_REF = "embedded:smollm2-135m-instruct"


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
