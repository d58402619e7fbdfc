"""Two answers to one case, compared: at parity, a documented difference, or a difference.

The first server is the reference (plain `vllm serve`), the second the one checked. The same
status always; for an error, vLLM's `type` where vLLM wrote one; for an answer compared by
text, what the model said (each choice's text or message, its tool calls, its top log-probs, its
finish reason and the token counts); by shape, the same fields and number of choices.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bench.parity.cases import Case
from bench.parity.differences import DIFFERENCES
from bench.parity.exchange import Answer

OUTCOMES = ("parity", "documented", "differs")


@dataclass
class Verdict:
    case: str
    outcome: str
    reasons: list[str] = field(default_factory=list)
    difference: str | None = None  # the documented difference, when that is the outcome


def compare(case: Case, reference: Answer, checked: Answer) -> Verdict:
    if case.difference is not None:
        difference = DIFFERENCES[case.difference]
        unseen = difference.unseen(reference, checked)
        if unseen:
            return Verdict(case.name, "differs", [f"not the documented difference ({case.difference}): "
                                                  + "; ".join(unseen)])
        return Verdict(case.name, "documented", [], difference.why)
    reasons = differences(case, reference, checked)
    return Verdict(case.name, "differs" if reasons else "parity", reasons)


def differences(case: Case, reference: Answer, checked: Answer) -> list[str]:
    if reference.error or checked.error:
        return [f"no answer: {reference.error or '-'} / {checked.error or '-'}"]
    if reference.status != checked.status:
        return [f"status {reference.status} / {checked.status}"]
    if reference.status is not None and reference.status >= 400:
        if reference.error_type is not None and reference.error_type != checked.error_type:
            return [f"error type {reference.error_type!r} / {checked.error_type!r}"]
        return []
    if case.compare == "status":
        return []
    if case.compare == "shape":
        return _shape_differences(reference.body, checked.body)
    said = said_by(reference.body), said_by(checked.body)
    return [] if said[0] == said[1] else [f"answers differ: {said[0]!r} / {said[1]!r}"[:600]]


def said_by(body: Any) -> Any:
    """What the model said in an answer, without the fields that differ from run to run (ids,
    times) or by server (its name for itself)."""
    if not isinstance(body, dict):
        return body
    if "tokens" in body or "prompt" in body and "choices" not in body:  # /tokenize, /detokenize
        return {key: body.get(key) for key in ("tokens", "count", "prompt")}
    choices = []
    for choice in body.get("choices") or []:
        message = choice.get("message") or {}
        calls = [(call.get("function", {}).get("name"), call.get("function", {}).get("arguments"))
                 for call in choice.get("tool_calls", message.get("tool_calls")) or []]
        choices.append({"text": choice.get("text", message.get("content")), "tool_calls": calls,
                        "finish_reason": choice.get("finish_reason"), "logprobs": _top_tokens(choice.get("logprobs"))})
    usage = body.get("usage") or {}
    return {"choices": choices, "tokens": (usage.get("prompt_tokens"), usage.get("completion_tokens"))}


def _top_tokens(logprobs: Any) -> Any:
    """The chosen and top tokens at each position (their log-probs vary in the last digits
    between two processes: the tokens are what must match)."""
    if not isinstance(logprobs, dict):
        return None
    if "content" in logprobs:  # chat
        return [(item.get("token"), [top.get("token") for top in item.get("top_logprobs") or []])
                for item in logprobs.get("content") or []]
    return [(token, sorted(top) if isinstance(top, dict) else None)  # completions
            for token, top in zip(logprobs.get("tokens") or [], logprobs.get("top_logprobs") or [])]


def _shape_differences(reference: Any, checked: Any) -> list[str]:
    if type(reference) is not type(checked):
        return [f"a {type(reference).__name__} / a {type(checked).__name__}"]
    if not isinstance(reference, dict):
        return []
    missing = sorted(set(reference) - set(checked))
    reasons = [f"fields missing: {missing}"] if missing else []
    if "choices" in reference and len(reference["choices"]) != len(checked.get("choices") or []):
        reasons.append(f"{len(reference['choices'])} choices / {len(checked.get('choices') or [])}")
    if "data" in reference and isinstance(reference["data"], list):  # /v1/models: the same model ids
        ids = [sorted(item.get("id") for item in body["data"]) for body in (reference, checked)]
        if ids[0] != ids[1]:
            reasons.append(f"models {ids[0]} / {ids[1]}")
    return reasons
