"""The cases of the parity suite: what a client of plain `vllm serve` sends, each sent to two
servers and compared (bench/parity/compare.py). Each case says what must match: the status
alone, the status and the text (at temperature 0 or with a seed, the same model gives the same
tokens), or the shape of the answer; and, where the app differs on purpose, which documented
difference (bench/parity/differences.py, docs/api.md) it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bench.parity.differences import DIFFERENCES

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
QUESTION = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]


@dataclass(frozen=True)
class Case:
    name: str
    path: str
    body: dict[str, Any] | bytes | None = None
    method: str = "POST"
    # status: the same status (and vLLM's error type, where it has one); text: that and the same
    # text and token counts; shape: that and the same structure (choices, fields present).
    compare: str = "text"
    stream: bool = False
    leave_after_chunks: int | None = None  # the client closes the stream after this many chunks
    difference: str | None = None  # a key of DIFFERENCES: the app's answer is expected to differ
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.difference is not None and self.difference not in DIFFERENCES:
            raise ValueError(f"case {self.name}: unknown difference {self.difference!r}")


def chat(**fields: Any) -> dict[str, Any]:
    return {"messages": QUESTION, "max_tokens": 16, "temperature": 0, **fields}


def completion(**fields: Any) -> dict[str, Any]:
    return {"prompt": "The capital of France is", "max_tokens": 12, "temperature": 0, **fields}


def cases(model: str, max_model_len: int, reference_max_model_len: int | None = None,
          max_tokens_cap: int | None = None) -> list[Case]:
    """The suite for a server of `model`; `max_model_len` is the longest context it serves (the
    app's longest pool), for the prompt that is over it, and `reference_max_model_len` the
    reference's (plain vLLM with the short pool's settings), where shorter: a prompt between
    the two is the long pool's. `max_tokens_cap` is the default scenario's cap, if it has one."""
    m = {"model": model}
    too_long = " ".join(["word"] * (max_model_len + 100))
    documented = [
        Case("chat-route-headers", "/v1/chat/completions", chat(**m), difference="route_headers"),
        Case("error-code-names-the-condition", "/v1/chat/completions", chat(model="no-such-model"),
             compare="status", difference="error_code"),
    ]
    if reference_max_model_len is not None and reference_max_model_len + 200 < max_model_len:
        prompt = " ".join(["word"] * (reference_max_model_len + 100))
        documented.append(Case("prompt-for-the-long-pool", "/v1/completions",
                               completion(**m, prompt=prompt, max_tokens=4), compare="status", difference="long_pool"))
    if max_tokens_cap is not None:  # more than the cap, every token of it generated (no early end)
        documented.append(Case("max-tokens-over-the-scenario-cap", "/v1/chat/completions",
                               chat(**m, max_tokens=max_tokens_cap + 32, ignore_eos=True), difference="max_tokens_cap"))
    return [*documented,
        # Requests that succeed: the same text at temperature 0, or with a seed.
        Case("chat", "/v1/chat/completions", chat(**m)),
        Case("chat-n-2", "/v1/chat/completions", chat(**m, n=2, temperature=1.0, seed=11), compare="shape"),
        Case("chat-logprobs", "/v1/chat/completions", chat(**m, logprobs=True, top_logprobs=3)),
        Case("chat-stop", "/v1/chat/completions", chat(**m, stop=[".", "\n"])),
        Case("chat-seed", "/v1/chat/completions", chat(**m, temperature=1.0, seed=7)),
        Case("chat-max-completion-tokens", "/v1/chat/completions",
             {**chat(**m), "max_completion_tokens": 6, "max_tokens": None}),
        Case("chat-json-object", "/v1/chat/completions", chat(**m, response_format={"type": "json_object"})),
        Case("chat-json-schema", "/v1/chat/completions", chat(**m, response_format={"type": "json_schema", "json_schema": {
            "name": "city", "schema": {"type": "object", "properties": {"city": {"type": "string"}},
                                       "required": ["city"]}}})),
        Case("chat-tool-named", "/v1/chat/completions", chat(**m, max_tokens=64, tools=[WEATHER_TOOL], tool_choice={
            "type": "function", "function": {"name": "get_weather"}})),
        Case("chat-tool-required", "/v1/chat/completions",
             chat(**m, max_tokens=64, tools=[WEATHER_TOOL], tool_choice="required")),
        Case("chat-tool-auto", "/v1/chat/completions", chat(**m, max_tokens=64, tools=[WEATHER_TOOL])),
        Case("chat-tool-stream", "/v1/chat/completions", chat(**m, max_tokens=64, tools=[WEATHER_TOOL], stream=True,
             tool_choice={"type": "function", "function": {"name": "get_weather"}}), stream=True),
        Case("chat-penalties", "/v1/chat/completions", chat(**m, presence_penalty=1.0, frequency_penalty=0.5)),
        Case("chat-logit-bias", "/v1/chat/completions", chat(**m, logit_bias={"198": -100})),
        Case("chat-vllm-sampling", "/v1/chat/completions",
             chat(**m, temperature=0.8, seed=5, top_k=20, min_p=0.05, repetition_penalty=1.2)),
        Case("chat-stream-usage", "/v1/chat/completions", chat(**m, stream=True, stream_options={"include_usage": True}),
             stream=True),
        Case("completion", "/v1/completions", completion(**m)),
        Case("completion-echo", "/v1/completions", completion(**m, echo=True)),
        Case("completion-logprobs", "/v1/completions", completion(**m, logprobs=2)),
        Case("completion-prompt-list", "/v1/completions", completion(**m, prompt=["The sky is", "Two plus two is"])),
        Case("completion-stream", "/v1/completions", completion(**m, stream=True), stream=True),
        # vLLM's own endpoints.
        Case("models", "/v1/models", method="GET", compare="shape"),
        Case("health", "/health", method="GET", compare="status"),
        Case("version", "/version", method="GET", compare="shape"),
        Case("tokenize", "/tokenize", {**m, "prompt": "Hello, world!"}),
        Case("tokenize-chat", "/tokenize", {**m, "messages": QUESTION, "add_generation_prompt": True}),
        Case("detokenize", "/detokenize", {**m, "tokens": [19556, 28, 905, 17]}),
        Case("embeddings-generative-model", "/v1/embeddings", {**m, "input": "Hello"}, compare="status"),
        # Errors a client meets: the same status and vLLM's type.
        Case("unknown-model", "/v1/chat/completions", chat(model="no-such-model"), compare="status"),
        Case("prompt-over-model-length", "/v1/completions", completion(**m, prompt=too_long), compare="status"),
        Case("invalid-json", "/v1/chat/completions", b'{"model": "x", "messages": [', compare="status"),
        Case("missing-messages", "/v1/chat/completions", {**m, "max_tokens": 4}, compare="status"),
        Case("empty-messages", "/v1/chat/completions", {**m, "messages": [], "max_tokens": 4}, compare="status"),
        Case("max-tokens-0", "/v1/chat/completions", chat(**m, max_tokens=0), compare="status"),
        Case("temperature-out-of-range", "/v1/chat/completions", chat(**m, temperature=-1), compare="status"),
        Case("n-0", "/v1/chat/completions", chat(**m, n=0), compare="status"),
        Case("body-over-limit", "/v1/completions", completion(**m, prompt="x " * (5 * 1024 * 1024)),
             compare="status", difference="body_limit"),
        Case("client-leaves-mid-stream", "/v1/chat/completions", chat(**m, max_tokens=200, stream=True),
             stream=True, leave_after_chunks=3, compare="status"),
        Case("served-after-a-client-left", "/v1/chat/completions", chat(**m)),
    ]
