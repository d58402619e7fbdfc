"""The parity suite's own logic: its cases, a stream joined into one answer, and the verdicts."""

from __future__ import annotations

import pytest

from bench.parity.cases import Case, cases
from bench.parity.compare import compare, said_by
from bench.parity.differences import DIFFERENCES
from bench.parity.exchange import Answer, joined_stream


def chat_answer(text: str, completion_tokens: int = 3, **choice) -> Answer:
    return Answer(200, {"id": "chatcmpl-1", "created": 1, "model": "m",
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                     "finish_reason": "stop", **choice}],
                        "usage": {"prompt_tokens": 9, "completion_tokens": completion_tokens}})


def error(status: int, type_: str | None, code: str | int | None = None) -> Answer:
    return Answer(status, {"error": {"message": "no", "type": type_, "code": status if code is None else code}})


def test_the_suite_covers_the_features_and_errors_a_client_meets():
    suite = cases("m", 4096)
    names = [case.name for case in suite]
    assert len(names) == len(set(names))
    for needed in ("chat-n-2", "chat-logprobs", "chat-stop", "chat-seed", "chat-max-completion-tokens",
                   "chat-json-object", "chat-json-schema", "chat-tool-named", "chat-tool-required", "chat-tool-auto",
                   "chat-tool-stream", "chat-penalties",
                   "chat-logit-bias", "chat-vllm-sampling", "chat-stream-usage", "completion-echo",
                   "completion-logprobs", "completion-prompt-list", "completion-stream", "unknown-model",
                   "prompt-over-model-length", "invalid-json", "missing-messages", "empty-messages", "max-tokens-0",
                   "temperature-out-of-range", "n-0", "body-over-limit", "client-leaves-mid-stream", "health",
                   "version", "tokenize", "detokenize", "embeddings-generative-model"):
        assert needed in names
    over = next(case for case in suite if case.name == "prompt-over-model-length")
    assert len(over.body["prompt"].split()) > 4096


def test_an_unknown_difference_is_refused():
    with pytest.raises(ValueError, match="unknown difference"):
        Case("x", "/v1/models", difference="because")


def test_the_same_text_is_parity_and_ids_and_times_do_not_count():
    other = chat_answer("Paris.")
    other.body["id"], other.body["created"] = "chatcmpl-2", 2
    assert compare(Case("c", "/v1/chat/completions"), chat_answer("Paris."), other).outcome == "parity"


def test_other_text_or_token_counts_differ():
    case = Case("c", "/v1/chat/completions")
    assert compare(case, chat_answer("Paris."), chat_answer("Lyon.")).outcome == "differs"
    assert compare(case, chat_answer("Paris.", 3), chat_answer("Paris.", 4)).outcome == "differs"


def test_errors_need_the_same_status_and_vllms_type_where_it_has_one():
    case = Case("e", "/v1/chat/completions", compare="status")
    assert compare(case, error(400, "BadRequestError"), error(400, "BadRequestError")).outcome == "parity"
    verdict = compare(case, error(400, "BadRequestError"), error(400, "invalid_request_error"))
    assert verdict.outcome == "differs" and "error type" in verdict.reasons[0]
    assert compare(case, error(404, None), error(404, "NotFoundError")).outcome == "parity"
    assert compare(case, error(400, "BadRequestError"), error(413, "RequestTooLargeError")).outcome == "differs"


def test_a_documented_difference_is_reported_as_such_only_when_it_is_the_one_documented():
    case = Case("big", "/v1/completions", compare="status", difference="body_limit")
    verdict = compare(case, error(400, "BadRequestError"), error(413, "RequestTooLargeError", "body_too_large"))
    assert verdict.outcome == "documented" and verdict.difference == DIFFERENCES["body_limit"].why
    # Parity where a difference is documented, or another difference, is not what the docs say.
    for other in (error(400, "BadRequestError"), error(413, "RequestTooLargeError", "pool_overloaded")):
        verdict = compare(case, error(400, "BadRequestError"), other)
        assert verdict.outcome == "differs" and "not the documented difference (body_limit)" in verdict.reasons[0]


def test_the_scenario_cap_is_documented_when_the_apps_answer_is_the_start_of_plain_vllms_and_says_so():
    case = Case("cap", "/v1/chat/completions", difference="max_tokens_cap")
    plain = chat_answer("Once upon a time there was", 160)
    capped = chat_answer("Once upon a time", 128)
    capped.headers = {"x-trilemma-adjustments": "max_tokens 160 capped to 128"}
    assert compare(case, plain, capped).outcome == "documented"
    unsaid = chat_answer("Once upon a time", 128)
    assert "x-trilemma-adjustments" in compare(case, plain, unsaid).reasons[0]
    other = chat_answer("Twice", 128)
    other.headers = capped.headers
    assert "not the start" in compare(case, plain, other).reasons[0]


def test_route_headers_are_documented_where_the_answer_is_the_same():
    case = Case("headers", "/v1/chat/completions", difference="route_headers")
    routed = chat_answer("Paris.")
    routed.headers = {name: "x" for name in ("x-trilemma-pool", "x-trilemma-scenario", "x-trilemma-route-reason",
                                             "x-trilemma-prompt-tokens")}
    assert compare(case, chat_answer("Paris."), routed).outcome == "documented"
    assert compare(case, chat_answer("Paris."), chat_answer("Paris.")).outcome == "differs"
    other = chat_answer("Lyon.")
    other.headers = routed.headers
    assert "answers differ" in compare(case, chat_answer("Paris."), other).reasons[0]


def test_the_error_code_names_the_condition_where_vllm_repeats_the_status():
    case = Case("code", "/v1/chat/completions", compare="status", difference="error_code")
    named = error(404, "NotFoundError", "model_not_found")
    assert compare(case, error(404, "NotFoundError"), named).outcome == "documented"
    assert compare(case, error(404, "NotFoundError"), error(404, "NotFoundError")).outcome == "differs"
    assert compare(case, error(404, "NotFoundError"), error(404, "not_found_error", "x")).outcome == "differs"


def test_no_answer_is_a_difference():
    case = Case("c", "/v1/chat/completions")
    assert compare(case, chat_answer("Paris."), Answer(None, error="ConnectError")).outcome == "differs"


def test_top_logprob_tokens_count_and_their_values_do_not():
    def with_logprobs(value: float) -> Answer:
        return chat_answer("Paris", logprobs={"content": [
            {"token": "Paris", "logprob": value, "top_logprobs": [{"token": "Paris", "logprob": value},
                                                                    {"token": "Lyon", "logprob": -3.0}]}]})

    case = Case("c", "/v1/chat/completions")
    assert compare(case, with_logprobs(-0.1), with_logprobs(-0.1000001)).outcome == "parity"
    assert said_by(with_logprobs(-0.1).body)["choices"][0]["logprobs"] == [("Paris", ["Paris", "Lyon"])]


def test_a_stream_is_joined_into_one_answer_per_choice():
    events = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
              {"choices": [{"index": 0, "delta": {"content": "Par"}, "finish_reason": None}]},
              {"choices": [{"index": 0, "delta": {"content": "is"}, "finish_reason": "stop"}]},
              {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}]
    assert joined_stream(events) == {"choices": [{"index": 0, "text": "Paris", "finish_reason": "stop",
                                                  "tool_calls": []}],
                                     "usage": {"prompt_tokens": 5, "completion_tokens": 2}}
    completions = [{"choices": [{"index": 1, "text": "b"}]}, {"choices": [{"index": 0, "text": "a"}]}]
    assert [c["text"] for c in joined_stream(completions)["choices"]] == ["a", "b"]


def test_a_streamed_tool_call_is_joined_from_its_pieces_and_compared_with_a_whole_one():
    events = [{"choices": [{"index": 0, "delta": {"tool_calls": [
                  {"index": 0, "id": "call-1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}}]},
              {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}}]},
              {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]},
                            "finish_reason": "tool_calls"}]}]
    joined = joined_stream(events)
    assert joined["choices"][0]["tool_calls"] == [{"function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]
    whole = {"choices": [{"message": {"content": "", "tool_calls": [
        {"id": "call-2", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}}]}
    assert said_by(joined)["choices"][0]["tool_calls"] == said_by(whole)["choices"][0]["tool_calls"]


def test_shapes_compare_fields_choices_and_model_ids():
    case = Case("models", "/v1/models", method="GET", compare="shape")
    models = lambda *ids: Answer(200, {"object": "list", "data": [{"id": i} for i in ids]})  # noqa: E731
    assert compare(case, models("m"), models("m")).outcome == "parity"
    assert "models" in compare(case, models("m"), models("m", "n")).reasons[0]


def test_a_prompt_between_the_references_length_and_the_apps_is_the_long_pools():
    suite = {case.name: case for case in cases("m", 4096, reference_max_model_len=1024)}
    between = suite["prompt-for-the-long-pool"]
    assert between.difference == "long_pool" and 1024 < len(between.body["prompt"].split()) < 4096
    assert "prompt-for-the-long-pool" not in {case.name for case in cases("m", 4096, reference_max_model_len=4096)}


def test_the_cap_case_asks_more_than_the_cap_and_only_where_there_is_one():
    capped = {case.name: case for case in cases("m", 4096, max_tokens_cap=128)}["max-tokens-over-the-scenario-cap"]
    assert capped.body["max_tokens"] > 128 and capped.body["ignore_eos"] is True
    assert "max-tokens-over-the-scenario-cap" not in {case.name for case in cases("m", 4096)}
