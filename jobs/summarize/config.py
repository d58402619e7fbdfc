"""The job's config: one YAML file (every key described, unknown keys refused) plus flags."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from core.config import EMBEDDED_MODEL_REF
from core.config_base import ConfigError, StrictModel, read_yaml

TEXT_PLACEHOLDER = "{text}"


class InputConfig(StrictModel):
    uri: str | None = Field(
        None, description="A JSONL or Parquet file, or a folder of .txt/.md files; a local path or s3:// URI.",
    )
    format: Literal["auto", "jsonl", "parquet", "folder"] = Field(
        "auto", description="`auto`: a folder is a folder, else by the file's suffix (.jsonl, .parquet).",
    )
    id_field: str = Field("id", description="Field (JSONL) or column (Parquet) holding a document's id.")
    text_field: str = Field("text", description="Field or column holding a document's text.")
    suffixes: list[str] = Field([".txt", ".md"], description="Files of a folder input that are documents.")
    on_invalid: Literal["stop", "skip"] = Field(
        "stop",
        description="What a bad line or row (not JSON, no id or text, a duplicate id) does: `stop` the "
        "job before anything is sent, naming every problem; `skip` it, naming it in the report.",
    )


class OutputConfig(StrictModel):
    uri: str | None = Field(None, description="Where the final output goes; a local path or s3:// URI.")
    format: Literal["auto", "jsonl", "parquet"] = Field(
        "auto", description="`auto`: by the output's suffix (.jsonl, .parquet).",
    )
    state_uri: str | None = Field(
        None, description="Folder of the results written as the job goes, which a rerun resumes from; "
        "null: `<output>.parts` beside the output.",
    )


class ModelConfig(StrictModel):
    name: str = Field("SmolLM2-135M-Instruct", description="Model name sent in requests (serve mode).")
    source: str = Field(
        EMBEDDED_MODEL_REF,
        description="Where the tokenizer (and, in engine mode, the weights) come from: the embedded "
        "model, a Hugging Face id or a local folder. It must be the model the app serves.",
    )
    adapter: str | None = Field(
        None, description="A LoRA adapter of the model that the app serves (one of its `adapters`): every "
        "request names it instead of `name`, so the summaries come from the adapted model and are accounted "
        "under the adapter. Serve mode only; null: the model itself.",
    )

    @property
    def requested(self) -> str:
        """What each request names as its `model`."""
        return self.adapter or self.name


class PromptConfig(StrictModel):
    system: str | None = Field(None, description="System message of every request; null: none.")
    template: str = Field(
        "Summarize the following text in two or three sentences.\n\n{text}",
        description="User message for a document or one chunk of it; `{text}` is replaced by the text.",
    )
    combine_template: str = Field(
        "The following are summaries of consecutive parts of one document. Write one summary of "
        "the whole document in two or three sentences.\n\n{text}",
        description="User message that combines the summaries of a long document's chunks.",
    )
    max_tokens: PositiveInt = Field(128, description="Longest summary (and partial summary), in tokens.")
    temperature: NonNegativeFloat = Field(0.0, description="Sampling temperature; 0 gives repeatable summaries.")

    @model_validator(mode="after")
    def _templates_take_the_text(self) -> PromptConfig:
        for key in ("template", "combine_template"):
            if TEXT_PLACEHOLDER not in getattr(self, key):
                raise ValueError(f"prompt.{key} must contain {TEXT_PLACEHOLDER} where the text goes")
        return self


class ChunkingConfig(StrictModel):
    context_tokens: PositiveInt = Field(
        2048,
        description="Tokens a request may use in all (prompt + summary): the smallest max_model_len "
        "among the pools the job may reach (the short pool's 2048 in the shipped config).",
    )
    chunk_tokens: PositiveInt | None = Field(
        None, description="Tokens of document text per chunk; null: as many as fit the context "
        "with the prompt template and max_tokens.",
    )
    overlap_tokens: NonNegativeInt = Field(
        64, description="Tokens each chunk repeats from the end of the one before, so that no "
        "sentence is only ever seen cut in half.",
    )


class LatencySloConfig(StrictModel):
    metrics_url: str = Field(description="The app's Prometheus metrics, e.g. http://127.0.0.1:8080/metrics.")
    scenario: str = Field("chat", description="The online scenario whose p99 TTFT the job protects.")
    ttft_p99_ms: PositiveInt = Field(description="Its SLO: over it the job shrinks.")
    headroom: float = Field(0.8, gt=0, le=1, description="Over this share of the SLO the job stops growing.")


class ConcurrencyConfig(StrictModel):
    initial: PositiveInt = Field(2, description="Requests in flight at the start (serve mode).")
    max: PositiveInt = Field(16, description="Cap on requests in flight, whatever the signals say.")
    min: PositiveInt = Field(1, description="Floor on requests in flight after decreases.")
    decrease_factor: float = Field(
        0.5, gt=0, lt=1, description="Multiplies the limit on a 429 or a congested pool (at most once per window).",
    )
    signal_interval_s: PositiveFloat | None = Field(
        2.0, description="How often the service's signals are read: the pools' queues (GET "
        "/trilemma/pools) and, when watched, the online latency; null: 429s alone pace the job.",
    )
    documents_in_flight: PositiveInt | None = Field(
        None, description="Documents being summarized at once; null: `max` (every request slot can be used).",
    )
    latency_slo: LatencySloConfig | None = Field(
        None, description="Shrink when an online scenario's p99 TTFT (read every signal_interval_s "
        "from the app's metrics) passes its SLO; null: not watched.",
    )

    @model_validator(mode="after")
    def _ordered(self) -> ConcurrencyConfig:
        if self.min > self.max:
            raise ValueError(f"concurrency.min ({self.min}) is over concurrency.max ({self.max})")
        # A cap set under the default start (`--max-concurrency 1`) means start there too.
        object.__setattr__(self, "initial", min(max(self.initial, self.min), self.max))
        return self


class ServeConfig(StrictModel):
    url: str = Field("http://127.0.0.1:8000", description="Base URL of the running app.")
    scenario: str = Field("batch", description="Scenario the requests use: its priority is the job's.")
    pool: str | None = Field(None, description="Pin every request to this pool (X-Trilemma-Pool); null: the router decides.")
    api_key_env: str = Field(
        "TRILEMMA_API_KEY", description="Environment variable holding the API key, when the app needs one.",
    )
    request_timeout_s: PositiveFloat = Field(600, description="Longest one request may take.")
    max_attempts: PositiveInt = Field(
        4, description="Tries of a request that fails (5xx, connection) before its document is "
        "recorded as failed; a 429 from an overloaded pool is waited out and never counts.",
    )


class EngineConfig(StrictModel):
    accelerator: str = Field("cpu", description="`cpu`, or a Ray accelerator type (H100, L4, ...) for GPU engines.")
    purchase: Literal["on_demand", "spot"] = Field("on_demand", description="Which catalog price the cost uses.")
    replicas: PositiveInt = Field(1, description="Engines running at once.")
    batch_size: PositiveInt = Field(8, description="Rows Ray Data hands an engine at once.")
    max_num_seqs: PositiveInt = Field(8, description="Sequences one engine batches at once.")
    resources: dict[str, float] = Field(
        {"CPU": 1}, description="Ray resources of one CPU engine (its placement-group bundle).",
    )
    stage_num_cpus: PositiveFloat = Field(
        0.25, description="CPUs of each helper stage (chat template, tokenize, detokenize); "
        "Ray's default of 1 each leaves a small machine no CPU for the rest of the pipeline.",
    )
    engine_kwargs: dict[str, Any] = Field({}, description="Further vLLM engine arguments.")
    env: dict[str, str] = Field(
        {"VLLM_CPU_KVCACHE_SPACE": "1"}, description="Environment of the engine processes.",
    )


class S3Config(StrictModel):
    endpoint_url: str | None = Field(
        None, description="S3-compatible endpoint (MinIO, moto); null: $AWS_ENDPOINT_URL, else AWS.",
    )
    region: str | None = Field(None, description="Region; null: $AWS_REGION / $AWS_DEFAULT_REGION, else us-east-1.")


class SummarizeConfig(StrictModel):
    mode: Literal["serve", "engine"] = Field(
        "serve", description="`serve`: through the running app at the lowest priority; "
        "`engine`: with engines of the job's own (ray.data.llm), when no app runs.",
    )
    input: InputConfig = Field(default_factory=InputConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    prompt: PromptConfig = Field(default_factory=PromptConfig)
    chunking: ChunkingConfig = Field(default_factory=ChunkingConfig)
    concurrency: ConcurrencyConfig = Field(default_factory=ConcurrencyConfig)
    serve: ServeConfig = Field(default_factory=ServeConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    s3: S3Config = Field(default_factory=S3Config)
    progress: bool = Field(True, description="Show a progress bar on stderr.")

    @model_validator(mode="after")
    def _adapter_is_served(self) -> SummarizeConfig:
        if self.model.adapter is not None and self.mode != "serve":
            raise ValueError(f"model.adapter {self.model.adapter!r} is applied by the app: run with mode serve")
        return self

    @model_validator(mode="after")
    def _budget_leaves_room(self) -> SummarizeConfig:
        chunking, max_tokens = self.chunking, self.prompt.max_tokens
        if chunking.chunk_tokens is not None and chunking.overlap_tokens >= chunking.chunk_tokens:
            raise ValueError(
                f"chunking.overlap_tokens ({chunking.overlap_tokens}) must be under chunking.chunk_tokens "
                f"({chunking.chunk_tokens}), or no chunk would move the window forward"
            )
        # Combining needs room for at least two summaries besides its own answer.
        if 3 * max_tokens >= chunking.context_tokens:
            raise ValueError(
                f"prompt.max_tokens ({max_tokens}) leaves no room to combine summaries within "
                f"chunking.context_tokens ({chunking.context_tokens}); it must be under a third of it"
            )
        return self

    def require_paths(self) -> None:
        for key, value in (("input", self.input.uri), ("output", self.output.uri)):
            if not value:
                raise ConfigError(f"no {key} given: set {key}.uri in the config or pass --{key}")

    @classmethod
    def from_yaml(cls, path: str | Path) -> SummarizeConfig:
        return cls.validated(read_yaml(Path(path)), str(path))
