"""A stand-in LLM engine with latency and failure knobs, for fast tests of our own logic.

It speaks Ray Serve LLM's engine interface (pass it as `engine_cls`), answers instantly
or at a set pace, and stamps every answer with the pool and replica that served it.
Knobs come from the pool's `env` (vLLM would refuse unknown engine_kwargs):
`TRILEMMA_FAKE_TTFT_S`, `TRILEMMA_FAKE_TPOT_S`, in seconds, and
`TRILEMMA_FAKE_TTFT_PER_REQUEST_S`, added to the TTFT for every other request in flight (a
latency that follows load). A prompt
containing FAIL_ENGINE makes it raise before answering, as a crashed engine would; one
containing FAIL_MIDSTREAM raises after its first streamed chunk. Faults of the whole replica:
KILL_ENGINE@<pool> kills the engine of that pool's replica (this and every later request
fails, and so does the health check, as with a vLLM engine whose process died),
KILL_REPLICA@<pool> ends the replica's process at once (as SIGKILL would);
KILL_ENGINE_MIDSTREAM@<pool> and KILL_REPLICA_MIDSTREAM@<pool> do so after the first
streamed chunk. The pool is named so that the request, sent again to another pool, is served.
`TRILEMMA_FAKE_START_S` makes the engine take that long to start, `TRILEMMA_FAKE_WAKE_S` to wake
from sleep (vLLM's sleep mode); asked to generate while asleep, it fails.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from typing import Any, AsyncGenerator

from ray import serve

from core.upstream import (
    ChatCompletionResponse,
    ChatCompletionResponseChoice,
    ChatCompletionResponseStreamChoice,
    ChatCompletionStreamResponse,
    ChatMessage,
    CompletionResponse,
    CompletionResponseChoice,
    CompletionResponseStreamChoice,
    CompletionStreamResponse,
    DeltaMessage,
    DetokenizeResponse,
    LLMEngine,
    TokenizeResponse,
    UsageInfo,
)

FAIL_MARKER = "FAIL_ENGINE"
FAIL_MIDSTREAM_MARKER = "FAIL_MIDSTREAM"
KILL_ENGINE_MARKER = "KILL_ENGINE"
KILL_REPLICA_MARKER = "KILL_REPLICA"
MIDSTREAM_SUFFIX = "_MIDSTREAM"


class FakeEngine(LLMEngine):
    def __init__(self, llm_config) -> None:
        self._config = llm_config
        # The replica's environment is the pool's `env` (its runtime_env).
        self._ttft_s = float(os.environ.get("TRILEMMA_FAKE_TTFT_S", "0"))
        self._tpot_s = float(os.environ.get("TRILEMMA_FAKE_TPOT_S", "0"))
        self._ttft_per_request_s = float(os.environ.get("TRILEMMA_FAKE_TTFT_PER_REQUEST_S", "0"))
        self._in_flight = 0
        self._stamp = "unstarted"
        self._pool = ""
        self._dead = False
        self._asleep = False
        self._wake_s = float(os.environ.get("TRILEMMA_FAKE_WAKE_S", "0"))
        self.adapters: set[str] = set()  # LoRA adapters loaded (by name), as vLLM's registry

    async def start(self) -> None:
        await asyncio.sleep(float(os.environ.get("TRILEMMA_FAKE_START_S", "0")))
        context = serve.get_replica_context()
        self._stamp = f"{context.deployment}/{context.replica_id.unique_id}"
        self._pool = context.deployment.removeprefix("pool-")

    async def chat(self, request, raw_request_info=None) -> AsyncGenerator[Any, None]:
        prompt = " ".join(str(m.get("content", "")) for m in request.messages)
        async for item in self._generate(request, prompt, chat=True):
            yield item

    async def completions(self, request, raw_request_info=None) -> AsyncGenerator[Any, None]:
        async for item in self._generate(request, str(request.prompt), chat=False):
            yield item

    async def _generate(self, request, prompt: str, chat: bool) -> AsyncGenerator[Any, None]:
        if self._asleep:  # vLLM would compute with freed memory: a request must never get here
            raise RuntimeError("fake engine asked to generate while asleep")
        self._fault(prompt, midstream=False)
        if FAIL_MARKER in prompt:
            raise RuntimeError("fake engine crashed on request")
        stamp = f"served-by={self._stamp}"
        if getattr(request, "priority", 0):
            stamp += f",priority={request.priority}"  # what an engine with priority scheduling sees
        if request.model in self.adapters:
            stamp += f",adapter={request.model}"  # what an answer with the adapter applied shows
        words = [stamp] + [f"w{i}" for i in range(request.max_tokens - 1)]
        usage = UsageInfo(
            prompt_tokens=len(prompt.split()),
            completion_tokens=len(words),
            total_tokens=len(prompt.split()) + len(words),
        )
        request_id, created = f"fake-{uuid.uuid4().hex[:12]}", int(time.time())
        model = request.model or self._config.model_id
        self._in_flight += 1
        try:
            async for item in self._answer(request, chat, words, usage, request_id, created, model, prompt):
                yield item
        finally:
            self._in_flight -= 1

    async def _answer(self, request, chat, words, usage, request_id, created, model, prompt):
        await asyncio.sleep(self._ttft_s + self._ttft_per_request_s * (self._in_flight - 1))
        if not request.stream:
            await asyncio.sleep(self._tpot_s * (len(words) - 1))
            text = " ".join(words)
            if chat:
                choice = ChatCompletionResponseChoice(
                    index=0, message=ChatMessage(role="assistant", content=text), finish_reason="length"
                )
                yield ChatCompletionResponse(id=request_id, created=created, model=model, choices=[choice], usage=usage)
            else:
                choice = CompletionResponseChoice(index=0, text=text, finish_reason="length")
                yield CompletionResponse(id=request_id, created=created, model=model, choices=[choice], usage=usage)
            return
        for index, word in enumerate(words):
            if index:
                if FAIL_MIDSTREAM_MARKER in prompt:
                    raise RuntimeError("fake engine crashed mid-stream")
                await asyncio.sleep(self._tpot_s)
                # After the pause: the chunks before it have left the replica, as a real
                # engine's would have by the time it dies.
                self._fault(prompt, midstream=True)
            last = index == len(words) - 1
            finish = "length" if last else None
            if chat:
                chunk = ChatCompletionStreamResponse(
                    id=request_id, created=created, model=model,
                    choices=[ChatCompletionResponseStreamChoice(
                        index=0, delta=DeltaMessage(content=word + " "), finish_reason=finish)],
                )
            else:
                chunk = CompletionStreamResponse(
                    id=request_id, created=created, model=model,
                    choices=[CompletionResponseStreamChoice(index=0, text=word + " ", finish_reason=finish)],
                )
            yield f"data: {chunk.model_dump_json(exclude_unset=True)}\n\n"  # as vLLM: no "usage": null
        if request.stream_options and request.stream_options.include_usage:
            response_cls = ChatCompletionStreamResponse if chat else CompletionStreamResponse
            final = response_cls(id=request_id, created=created, model=model, choices=[], usage=usage)
            yield f"data: {final.model_dump_json()}\n\n"
        yield "data: [DONE]\n\n"

    def _fault(self, prompt: str, *, midstream: bool) -> None:
        """Kills the engine or the replica when the prompt asks this pool to, and fails every
        request of a dead engine."""
        when = MIDSTREAM_SUFFIX if midstream else ""
        if f"{KILL_REPLICA_MARKER}{when}@{self._pool}" in prompt:
            os._exit(1)
        if f"{KILL_ENGINE_MARKER}{when}@{self._pool}" in prompt:
            self._dead = True
        if self._dead:
            raise RuntimeError("fake engine process is dead")

    # The rest of the engine interface: nothing to do for a stand-in.

    def routing_stats(self) -> dict:
        return {}

    async def resolve_lora(self, lora_model) -> None:
        raise NotImplementedError("the fake engine loads adapters by load_adapter, as engine.pool_engine does")

    async def load_adapter(self, name: str, folder: str) -> None:
        await asyncio.sleep(float(os.environ.get("TRILEMMA_FAKE_ADAPTER_LOAD_S", "0")))
        self.adapters.add(name)

    async def unload_adapter(self, name: str) -> None:
        self.adapters.discard(name)

    async def embeddings(self, request, raw_request_info=None):
        raise NotImplementedError("the fake engine does not embed")

    async def tokenize(self, request, raw_request_info=None):
        """A token per word of the prompt (or of the messages' text), numbered by its length."""
        text = getattr(request, "prompt", None)
        if text is None:
            text = " ".join(str(message) for message in getattr(request, "messages", None) or [])
        tokens = [len(word) for word in str(text).split()]
        yield TokenizeResponse(count=len(tokens), max_model_len=self._config.engine_kwargs.get("max_model_len", 0),
                               tokens=tokens)

    async def detokenize(self, request, raw_request_info=None):
        yield DetokenizeResponse(prompt=" ".join("x" * max(0, min(token, 64)) for token in request.tokens))

    async def transcriptions(self, request, raw_request_info=None):
        raise NotImplementedError("the fake engine does not transcribe")

    async def reset_prefix_cache(self) -> None:
        return None

    async def sleep(self, level: int = 1) -> None:
        self._asleep = True

    async def wakeup(self, **kwargs) -> None:
        await asyncio.sleep(self._wake_s)
        self._asleep = False

    async def is_sleeping(self) -> bool:
        return self._asleep

    async def check_health(self) -> None:
        if self._dead:
            raise RuntimeError("fake engine process is dead")
