"""A pool's stream on its way to the client: the usage taken out for accounting, a failure
turned into a last error event, and a stream whose replica died carried on by another replica
from what the client already has.

A resumed stream is one answer: the continuation asks the new engine to go on from the
prompt plus the text already sent (the assistant message continued, or the completion prompt
extended), its chunks keep the answer's id, nothing is sent twice, and the one usage record
counts the prompt once and every generated token once.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, AsyncGenerator, Awaitable, Callable

from contract.pool_faults import one_line, replica_failure
from contract.request_timeline import ROUTER_ITEMS, TIMING_KEY, RequestTimeline
from contract.usage_events import KEEP_EVENT, final_usage, map_events
from core.errors import error_body
from core.upstream import ChatCompletionRequest, get_logger, openai_json_lines

logger = get_logger(__name__)

# The key of a resumed answer's account, on its last chunk (and its usage event).
RESUMED_KEY = "trilemma_resumed"

# (the continuation's request, why the first replica is gone) -> (its pool, its stream)
Resume = Callable[[Any, str], Awaitable[tuple[str, AsyncGenerator]]]


@dataclass(frozen=True)
class Resumed:
    """How an answer was carried over: told to the client on its last chunk."""

    from_pool: str
    to_pool: str
    after_tokens: int
    reason: str
    exact: bool  # greedy: the continuation is what the first engine would have said


class StreamTranscript:
    """What the client has been sent: the text, how many chunks carried it (one per generated
    token, as engines stream), the answer's id, and whether it finished."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self.tokens = 0
        self.answer_id: str | None = None
        self.finished = False

    @property
    def text(self) -> str:
        return "".join(self._parts)

    def add(self, event: dict[str, Any]) -> None:
        if self.answer_id is None:
            self.answer_id = event.get("id")
        for choice in event.get("choices") or ():
            text = choice["text"] if "text" in choice else (choice.get("delta") or {}).get("content")
            if text:
                self._parts.append(text)
                self.tokens += 1
            if choice.get("finish_reason"):
                self.finished = True


def continuation(body: Any, transcript: StreamTranscript, max_tokens: int) -> Any | None:
    """The request that goes on from where the client's answer stopped, or None when that
    cannot be done faithfully: several choices, tool calls, a prompt that is not one text."""
    remaining = max_tokens - transcript.tokens
    if transcript.finished or remaining <= 0 or (getattr(body, "n", None) or 1) != 1:
        return None
    if isinstance(body, ChatCompletionRequest):
        if getattr(body, "tools", None):
            return None
        messages = [*body.messages, {"role": "assistant", "content": transcript.text}]
        return body.model_copy(update={
            "messages": messages, "continue_final_message": True, "add_generation_prompt": False,
            "max_tokens": remaining, "max_completion_tokens": None,
        })
    if isinstance(getattr(body, "prompt", None), str):
        return body.model_copy(update={"prompt": body.prompt + transcript.text, "max_tokens": remaining})
    return None


async def relay(
    stream: AsyncGenerator, pool: str, *, body: Any, max_tokens: int, prompt_tokens: int,
    keep_usage: bool, on_usage: Callable[[dict[str, Any]], None], resume: Resume | None,
    timeline: RequestTimeline | None = None,
) -> AsyncGenerator[str, None]:
    """SSE packets for the client. The engine's final usage event is reported to `on_usage`
    and passed on if the client asked, or asked for the `timeline`, which it then carries;
    a replica that dies mid-stream is replaced through `resume` (once), and any other failure
    ends the stream with an error event."""
    transcript = StreamTranscript()
    resumed: Resumed | None = None

    def relabel(event: dict[str, Any]) -> dict[str, Any] | object | None:
        if resumed is not None:
            event["id"] = transcript.answer_id or event.get("id")
            for choice in event.get("choices") or ():
                (choice.get("delta") or {}).pop("role", None)  # the answer's role was sent once
                if choice.get("finish_reason"):
                    event[RESUMED_KEY] = asdict(resumed)
        usage = final_usage(event)
        if usage is None:
            transcript.add(event)
            return event if resumed is not None else KEEP_EVENT
        replica_stamps = usage.pop(TIMING_KEY, None) or {}  # the replica's half of the timeline
        if resumed is not None:
            # The continuation's prompt held the text already sent: count it as generated, once.
            usage["prompt_tokens"] = prompt_tokens
            usage["completion_tokens"] = usage.get("completion_tokens", 0) + resumed.after_tokens
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            event[RESUMED_KEY] = asdict(resumed)
        on_usage(usage)
        if timeline is not None:
            # A resumed answer's replica stamps are the second replica's: with the router's of
            # the first attempt they would make no timeline at all.
            event[TIMING_KEY] = {**(replica_stamps if resumed is None else {}), **timeline.as_event()}
            return event
        return event if keep_usage else None

    while True:
        try:
            async for packet in openai_json_lines(stream):
                if timeline is not None:
                    timeline.stamp_item(ROUTER_ITEMS)
                packet = map_events(packet, relabel, usage_only=False)
                if packet:
                    yield packet
            return
        except Exception as error:
            logger.warning("pool %s failed mid-stream: %r", pool, error)
            gone = replica_failure(error)
            if gone is None:
                yield _error_event(f"llm request failed: {one_line(error)}")
                return
            lost = f"llm request failed: pool {pool!r} failed mid-stream after {transcript.tokens} tokens: {gone}"
            following = continuation(body, transcript, max_tokens) if resume and not resumed else None
            if following is None:
                why = "it was resumed once already" if resumed else \
                    "an answer with several choices, tool calls or a prompt that is not one text is not resumed"
                yield _error_event(f"{lost}; {why}; sending the request again is safe")
                return
            try:
                to_pool, stream = await resume(following, gone)
            except Exception as resume_error:  # no pool to go on with: the client learns why
                reason = getattr(resume_error, "message", None) or one_line(resume_error)
                yield _error_event(f"{lost}; it could not be resumed: {reason}")
                return
            logger.warning("resumed on pool %s after %d tokens", to_pool, transcript.tokens)
            resumed = Resumed(pool, to_pool, transcript.tokens, gone, exact=_is_greedy(body))


def _error_event(message: str) -> str:
    return f"data: {json.dumps(error_body(502, message, code='llm_request_failed'))}\n\ndata: [DONE]\n\n"


def _is_greedy(body: Any) -> bool:
    return getattr(body, "temperature", None) == 0
