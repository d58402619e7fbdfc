"""Where the app answers otherwise than plain vLLM on purpose (docs/api.md, "Parity with plain
`vllm serve`"): each difference says why, and checks that the two answers differ exactly so.
A case that names a difference is "documented" only when that check holds; an answer at parity
there, or different in another way, is a difference the docs do not explain."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from bench.parity.exchange import Answer

# The headers by which the app explains its answer; plain vLLM sends none of them.
ROUTE_HEADERS = ("x-trilemma-pool", "x-trilemma-scenario", "x-trilemma-route-reason", "x-trilemma-prompt-tokens")


@dataclass(frozen=True)
class Difference:
    why: str
    # The reasons the answers (reference, checked) do NOT differ as documented; none: they do.
    unseen: Callable[[Answer, Answer], list[str]]


def _long_pool(a: Answer, b: Answer) -> list[str]:
    return [] if (a.status, b.status) == (400, 200) else [f"status {a.status} / {b.status}, documented 400 / 200"]


def _body_limit(a: Answer, b: Answer) -> list[str]:
    if b.status != 413 or b.error_code != "body_too_large":
        return [f"the app answered {b.status} {b.error_code!r}, documented 413 'body_too_large'"]
    return [] if a.status == 400 else [f"plain vLLM answered {a.status}, documented 400 (the prompt's length)"]


def _max_tokens_cap(a: Answer, b: Answer) -> list[str]:
    if (a.status, b.status) != (200, 200):
        return [f"status {a.status} / {b.status}, documented 200 / 200"]
    (text_a, tokens_a), (text_b, tokens_b) = a.first_text_and_tokens(), b.first_text_and_tokens()
    reasons = []
    if not tokens_b < tokens_a:
        reasons.append(f"{tokens_a} / {tokens_b} completion tokens: the app's answer is not shorter")
    if not text_a.startswith(text_b):
        reasons.append("the app's capped answer is not the start of plain vLLM's")
    if "capped" not in b.headers.get("x-trilemma-adjustments", ""):
        reasons.append("no x-trilemma-adjustments header says the cap")
    return reasons


def _route_headers(a: Answer, b: Answer) -> list[str]:
    from bench.parity.compare import said_by

    reasons = [] if said_by(a.body) == said_by(b.body) else ["the answers differ, not only their headers"]
    missing = [name for name in ROUTE_HEADERS if name not in b.headers]
    if missing:
        reasons.append(f"the app's answer lacks {missing}")
    if any(name.startswith("x-trilemma-") for name in a.headers):
        reasons.append("plain vLLM sent x-trilemma-* headers")
    return reasons


def _error_code(a: Answer, b: Answer) -> list[str]:
    if a.status != b.status or a.error_type != b.error_type:
        return [f"status {a.status} / {b.status}, type {a.error_type!r} / {b.error_type!r}"]
    if a.error_code != a.status:
        return [f"plain vLLM's code is {a.error_code!r}, documented the status again"]
    return [] if isinstance(b.error_code, str) and b.error_code else [f"the app's code is {b.error_code!r}, "
                                                                      "documented the condition's name"]


DIFFERENCES = {
    "long_pool": Difference(
        "a prompt over the short pool's max_model_len is served by the long pool, where plain vLLM with the "
        "short pool's settings refuses it (400)", _long_pool),
    "body_limit": Difference(
        "the app refuses a body over router.max_body_bytes (8 MiB) before parsing it (413, body_too_large); "
        "plain vLLM reads any size, and refuses it only for its length", _body_limit),
    "max_tokens_cap": Difference(
        "the scenario's max_tokens_cap shortens the answer (said in x-trilemma-adjustments); plain vLLM "
        "generates what was asked", _max_tokens_cap),
    "route_headers": Difference(
        "the app's answer carries x-trilemma-* headers (pool, scenario, route reason, prompt tokens) beside "
        "vLLM's; the answer itself is the same", _route_headers),
    "error_code": Difference(
        "an error the app raises names its condition in `code` (model_not_found, ...), where vLLM repeats the "
        "status; status and type are vLLM's", _error_code),
}
