"""What a replay makes of its answers: refusals told apart, goodput and dollars, attainment by
prompt length, the engines' prefix-cache counts, and verdicts against plain vLLM and one pool."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bench.metrics import Slo
from bench.replay.figures import arm_figures, length_bucket
from bench.replay.prefix_cache import hit_rates
from bench.replay.report import compare
from bench.replay.send import ReplayRecord, refusal
from engine.stat_loggers import KvCacheProbe


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        ('http 400: {"error": {"code": "context_length_exceeded", "message": "request needs 9000 tokens"}}', "too_long"),
        ("http 400: {\"error\": {\"message\": \"This model's maximum context length is 2048 tokens. However, "
         "you requested 3000 tokens\"}}", "too_long"),
        ('http 400: {"error": {"message": "temperature must be at most 2"}}', "error"),
        ('http 429: {"error": {"message": "queue full"}}', "shed"),
        ('http 503: {"error": {"code": "pool_unavailable"}}', "shed"),
        ("transport: ServerDisconnectedError: closed", "error"),
    ],
)
def test_a_refusal_is_told_by_its_reason(error, reason):
    assert refusal(error) == reason


def _record(line: int, prompt: int, ttft: float | None, error: str | None = None, scenario: str = "chat") -> ReplayRecord:
    record = ReplayRecord(scenario=scenario, started_s=0.0, e2e_s=1.0, ttft_s=ttft, prompt_tokens=prompt,
                          completion_tokens=11 if error is None else 0, line=line, trace_prompt_tokens=prompt,
                          trace_output_tokens=11, error=error)
    record.refused = refusal(error) if error else None
    return record


def test_goodput_dollars_and_attainment_by_prompt_length():
    records = [_record(1, 100, 0.2), _record(2, 900, 0.4), _record(3, 3000, 2.0),  # the last misses 1 s
               _record(4, 20000, None, 'http 400: {"error": {"code": "context_length_exceeded"}}')]
    figures = arm_figures(records, duration_s=10.0, slos={"chat": Slo(ttft_s=1.0)}, usd_per_hour=36.0)
    assert figures["refused"] == {"too_long": 1}
    assert figures["goodput_rps"] == pytest.approx(0.2) and figures["slo_attainment"] == pytest.approx(0.5)
    assert figures["held_usd"] == pytest.approx(0.1)  # 36 $/h for 10 s
    assert figures["usd_per_good_request"] == pytest.approx(0.05)
    assert figures["usd_per_1m_tokens"] == pytest.approx(0.1 / (4000 + 33) * 1e6)
    by_length = figures["by_prompt_length"]
    assert {name: (b["requests"], b["met"]) for name, b in by_length.items()} == {
        "<=256": (1, 1), "257-1K": (1, 1), "1K-4K": (1, 0), ">16K": (1, 0)}
    assert [length_bucket(n) for n in (256, 257, 1024, 1025, 16385)] == ["<=256", "257-1K", "257-1K", "1K-4K", ">16K"]


def test_the_prefix_cache_hit_rate_between_two_readings():
    assert hit_rates({"short": (100.0, 10.0)}, {"short": (300.0, 110.0), "long": (50.0, 0.0)}) == {
        "short": {"queried_tokens": 200.0, "hit_tokens": 100.0, "hit_rate": 0.5},
        "long": {"queried_tokens": 50.0, "hit_tokens": 0.0, "hit_rate": 0.0}}
    assert hit_rates({"short": (300.0, 100.0)}, {"short": (10.0, 0.0)}) == {}  # a restarted engine's counts went back
    assert hit_rates(None, {"short": (1.0, 1.0)}) is None


def test_the_engines_prefix_cache_counts_add_up_through_a_reset_of_the_cache():
    probe = KvCacheProbe()
    for queries, hits, reset in ((64, 0, False), (128, 64, False), (32, 32, True), (16, 0, False)):
        probe.record(SimpleNamespace(kv_cache_usage=0.5,
                                     prefix_cache_stats=SimpleNamespace(queries=queries, hits=hits, reset=reset)), None)
    assert (probe.usage, probe.prefix_queries, probe.prefix_hits) == (0.5, 240, 96)


def test_the_verdicts_against_plain_vllm_and_one_shared_pool():
    def arm(goodput: float, chat_p99: float, usd: float) -> dict:
        return {"goodput_rps": goodput, "usd_per_good_request": usd, "by_scenario": {"chat": {"ttft_ms": {"p99": chat_p99}}}}

    arms = {"app": {"1": [arm(5.0, 100.0, 1.0)], "2": [arm(9.0, 150.0, 1.0), arm(11.0, 250.0, 1.0)]},
            "vllm": {"1": [arm(5.0, 400.0, 1.0)], "2": [arm(7.0, 900.0, 1.2)]},
            "shared": {"1": [arm(4.0, 200.0, 1.0)], "2": [arm(6.0, 600.0, 1.3)]}}
    verdict = compare(arms, "chat")
    assert verdict["1"]["goodput_met"] and verdict["1"]["goodput_app_over_vllm"] == pytest.approx(1.0)
    assert not verdict["1"]["chat_p99_met"]  # 200 / 100: 2x, under 3x
    assert verdict["2"]["goodput_app_over_vllm"] == 1.429 and verdict["2"]["goodput_met"]  # judged as printed
    assert verdict["2"]["chat_p99_ttft_shared_over_app"] == pytest.approx(3.0) and verdict["2"]["chat_p99_met"]
    assert verdict["2"]["usd_met"]


def test_equal_arms_meet_an_at_least_equal_target_in_spite_of_their_last_digits():
    arm = {"goodput_rps": 0.39, "usd_per_good_request": 7.08e-5}
    close = {"goodput_rps": 0.39 * (1 - 1e-6), "usd_per_good_request": 7.08e-5 * (1 + 1e-6)}
    verdict = compare({"app": {"1": [close]}, "vllm": {"1": [arm]}}, "chat")["1"]
    assert verdict["goodput_met"] and verdict["usd_met"]
