"""A stream whose replica dies mid-way: resumed from what the client has, sent once, counted once."""

from __future__ import annotations

import json

import pytest
from ray.exceptions import ActorDiedError

from contract.pool_faults import EngineDied
from contract.request_timeline import ROUTER_ITEMS, TIMING_KEY, RequestTimeline
from core.upstream import ChatCompletionRequest, CompletionRequest
from router.stream_relay import RESUMED_KEY, StreamTranscript, continuation, relay


def _chunk(answer_id: str, text: str, *, role: bool = False, finish: str | None = None) -> str:
    delta = {"content": text, **({"role": "assistant"} if role else {})}
    event = {"id": answer_id, "object": "chat.completion.chunk",
             "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps(event)}\n\n"


def _usage(answer_id: str, prompt: int, completion: int) -> str:
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
             "cost_usd": 1e-6}
    return f"data: {json.dumps({'id': answer_id, 'choices': [], 'usage': usage})}\n\n"


async def _engine(packets: list[str], then: BaseException | None = None):
    for packet in packets:
        yield packet
    if then is not None:
        raise then


def _chat(**fields) -> ChatCompletionRequest:
    return ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "count"}], stream=True, **fields)


async def _collect(stream) -> list[dict | str]:
    events = []
    async for packet in stream:
        for event in packet.split("\n\n"):
            if event.startswith("data: "):
                payload = event.removeprefix("data: ")
                events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def test_the_transcript_holds_what_the_client_was_sent():
    transcript = StreamTranscript()
    transcript.add({"id": "a", "choices": [{"delta": {"role": "assistant", "content": "one"}}]})
    transcript.add({"id": "a", "choices": [{"delta": {"content": " two"}}]})
    transcript.add({"id": "a", "choices": [{"delta": {}}]})
    assert (transcript.text, transcript.tokens, transcript.answer_id, transcript.finished) == ("one two", 2, "a", False)
    transcript.add({"id": "a", "choices": [{"text": " three", "finish_reason": "length"}]})
    assert transcript.tokens == 3 and transcript.finished


def test_a_chat_continues_its_assistant_message_with_the_budget_left():
    transcript = StreamTranscript()
    transcript.add({"id": "a", "choices": [{"delta": {"content": "one two"}}]})
    following = continuation(_chat(max_tokens=10), transcript, max_tokens=10)
    assert following.messages[-1] == {"role": "assistant", "content": "one two"}
    assert following.continue_final_message and not following.add_generation_prompt
    assert following.max_tokens == 9


def test_a_completion_continues_its_prompt():
    transcript = StreamTranscript()
    transcript.add({"id": "a", "choices": [{"text": " and"}]})
    body = CompletionRequest(model="m", prompt="salt", max_tokens=4, stream=True)
    following = continuation(body, transcript, max_tokens=4)
    assert following.prompt == "salt and" and following.max_tokens == 3


@pytest.mark.parametrize("body", [
    _chat(n=2),
    _chat(tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}]),
    CompletionRequest(model="m", prompt=["a", "b"], max_tokens=4, stream=True),
])
def test_what_cannot_be_continued_faithfully_is_not(body):
    assert continuation(body, StreamTranscript(), max_tokens=4) is None


async def test_a_stream_cut_by_a_dead_replica_goes_on_elsewhere_once_and_is_counted_once():
    usages = []
    asked = []

    async def resume(following, reason):
        asked.append((following, reason))
        return "long", _engine([_chunk("b", " two", role=True), _chunk("b", " three", finish="length"),
                                _usage("b", 12, 2), "data: [DONE]\n\n"])

    first = _engine([_chunk("a", "one", role=True)], then=ActorDiedError())
    events = await _collect(relay(first, "short", body=_chat(max_tokens=3, temperature=0), max_tokens=3,
                                  prompt_tokens=10, keep_usage=True, on_usage=usages.append, resume=resume))

    following, reason = asked[0]
    assert reason == "its replica process died"
    assert following.messages[-1]["content"] == "one" and following.max_tokens == 2
    chunks = [event for event in events if isinstance(event, dict) and event.get("choices")]
    assert "".join(c["choices"][0]["delta"]["content"] for c in chunks) == "one two three"
    assert {c["id"] for c in chunks} == {"a"}  # one answer
    assert sum("role" in c["choices"][0]["delta"] for c in chunks) == 1
    assert chunks[-1][RESUMED_KEY] == {"from_pool": "short", "to_pool": "long", "after_tokens": 1,
                                        "reason": "its replica process died", "exact": True}
    assert usages == [{"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13, "cost_usd": 1e-6}]
    assert events[-1] == "[DONE]"


async def test_a_stream_that_cannot_go_on_ends_with_an_error_that_says_why_and_that_a_retry_is_safe():
    async def resume(following, reason):
        raise RuntimeError("no pool is up")

    first = _engine([_chunk("a", "one")], then=EngineDied("short", "the vLLM engine process stopped"))
    events = await _collect(relay(first, "short", body=_chat(max_tokens=3), max_tokens=3, prompt_tokens=10,
                                  keep_usage=False, on_usage=lambda usage: None, resume=resume))
    message = events[-2]["error"]["message"]
    assert "pool 'short' failed mid-stream after 1 tokens: its engine died" in message
    assert "could not be resumed: no pool is up" in message
    assert events[-1] == "[DONE]"


async def test_a_failure_of_the_request_itself_is_not_resumed():
    async def resume(following, reason):
        raise AssertionError("not to be resumed")

    first = _engine([_chunk("a", "one")], then=ValueError("bad grammar"))
    events = await _collect(relay(first, "short", body=_chat(max_tokens=3), max_tokens=3, prompt_tokens=10,
                                  keep_usage=False, on_usage=lambda usage: None, resume=resume))
    assert events[-2]["error"]["message"] == "llm request failed: bad grammar"


async def test_a_timed_stream_ends_with_the_replicas_and_the_routers_stamps_on_its_usage_event():
    usage_event = json.loads(_usage("a", 10, 1).removeprefix("data: "))
    usage_event["usage"][TIMING_KEY] = {"pool_received": 2.0, "engine_first_output": 3.0}
    timeline = RequestTimeline()
    timeline.stamps.update(router_received=1.0, router_first_item=4.0)
    usages = []
    packets = [_chunk("a", "one", finish="length"), f"data: {json.dumps(usage_event)}\n\n", "data: [DONE]\n\n"]
    events = await _collect(relay(_engine(packets), "short", body=_chat(max_tokens=1), max_tokens=1,
                                  prompt_tokens=10, keep_usage=False, on_usage=usages.append, resume=None,
                                  timeline=timeline))
    # Kept although the client did not ask for usage: it asked for the timeline.
    timing = events[-2][TIMING_KEY]
    router_items = timing.pop(ROUTER_ITEMS)
    assert timing == {"pool_received": 2.0, "engine_first_output": 3.0,
                      "router_received": 1.0, "router_first_item": 4.0}
    # One time per item up to the usage event's own, which carries them.
    assert len(router_items) == 2 and router_items == sorted(router_items)
    assert TIMING_KEY not in usages[0] and TIMING_KEY not in events[-2]["usage"]  # accounting sees usage only


async def test_an_untimed_stream_drops_stamps_it_did_not_ask_for():
    usage_event = json.loads(_usage("a", 10, 1).removeprefix("data: "))
    usage_event["usage"][TIMING_KEY] = {"pool_received": 2.0}
    packets = [_chunk("a", "one", finish="length"), f"data: {json.dumps(usage_event)}\n\n", "data: [DONE]\n\n"]
    events = await _collect(relay(_engine(packets), "short", body=_chat(max_tokens=1), max_tokens=1,
                                  prompt_tokens=10, keep_usage=True, on_usage=lambda usage: None, resume=None))
    assert TIMING_KEY not in events[-2] and TIMING_KEY not in events[-2]["usage"]


async def test_a_resumed_timed_stream_keeps_only_the_routers_stamps():
    async def resume(following, reason):
        usage_event = json.loads(_usage("b", 12, 1).removeprefix("data: "))
        usage_event["usage"][TIMING_KEY] = {"pool_received": 9.0}  # the second replica's
        return "long", _engine([_chunk("b", " two", finish="length"), f"data: {json.dumps(usage_event)}\n\n"])

    timeline = RequestTimeline()
    timeline.stamps.update(router_received=1.0, router_first_item=2.0)
    first = _engine([_chunk("a", "one", role=True)], then=ActorDiedError())
    events = await _collect(relay(first, "short", body=_chat(max_tokens=2), max_tokens=2, prompt_tokens=10,
                                  keep_usage=False, on_usage=lambda usage: None, resume=resume, timeline=timeline))
    (usage_event,) = [event for event in events if isinstance(event, dict) and "usage" in event]
    timing = usage_event[TIMING_KEY]
    # The router's items of both attempts: the gap across the resume is one the client had too.
    assert len(timing.pop(ROUTER_ITEMS)) == 3
    assert timing == {"router_received": 1.0, "router_first_item": 2.0}
