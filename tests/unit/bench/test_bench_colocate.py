"""The co-location benchmark's arithmetic: tokens from the app's counters, ratios, verdicts."""

from __future__ import annotations

from bench.colocate import markdown, tokens_done

SCRAPE = """# HELP ray_trilemma_tokens_total Tokens processed
ray_trilemma_tokens_total{direction="prompt",pool="short",scenario="chat",tenant="a"} 100.0
ray_trilemma_tokens_total{direction="completion",pool="short",scenario="chat",tenant="a"} 50.0
ray_trilemma_tokens_total{direction="prompt",pool="long",scenario="batch",tenant="a"} 1000.0
ray_trilemma_ttft_seconds_count{scenario="chat"} 7.0
"""


def test_tokens_done_adds_every_scenario_and_direction():
    assert tokens_done(SCRAPE) == 1150.0
    assert tokens_done(None) is None


def test_the_report_states_each_ratio_against_its_target():
    phase = {"chat_ttft_ms": {"p50": 100.0, "p99": 200.0}, "chat_tpot_ms": {"p50": 50.0, "p99": 60.0},
             "total_tokens_per_s": 40.0, "requests": 10, "failed": 0}
    result = {
        "name": "colocate", "command": "trilemma bench colocate", "load": {"rate": 1.0, "count": 10, "output_tokens": 64},
        "job": {"args": ["--input", "corpus.jsonl"], "lead_s": 30.0, "input": "given"},
        "phases": {"online_only": phase, "online_with_batch_job": {**phase, "total_tokens_per_s": 100.0}},
        "ratios": {"chat_ttft_p99_with_job_over_alone": 1.05, "total_tokens_per_s_with_job_over_alone": 2.5},
        "verdict": {"chat_ttft_p99_within_1_1x": True, "total_tokens_per_s_at_least_1_5x": True,
                    "no_chat_request_failed": True, "job_ran_through_every_window": True},
    }
    text = markdown(result)
    assert "**1.05** (target at most 1.1): met" in text and "**2.50** (target at least 1.5): met" in text
    assert "| chat + batch job | 100 | 200 | - | 50.0 | 60.0 | 100.0 | 10/10 |" in text


def test_rounds_pool_into_one_arm():
    from bench.colocate import _arm
    from bench.metrics import RequestRecord

    def records(ttfts):
        return [RequestRecord(scenario="chat", started_s=0.0, e2e_s=t + 3.2, ttft_s=t, completion_tokens=65)
                for t in ttfts]

    arm = _arm([(records([0.1] * 98 + [2.0] * 2), 100.0, 1000.0), (records([0.2] * 100), 50.0, 2000.0)])
    assert arm["requests"] == 200 and arm["failed"] == 0
    assert arm["total_tokens_per_s"] == 3000.0 / 150.0  # tokens over seconds, not a mean of rates
    assert [r["total_tokens_per_s"] for r in arm["rounds"]] == [10.0, 40.0]
    assert arm["rounds"][0]["chat_ttft_p99_ms"] > arm["rounds"][1]["chat_ttft_p99_ms"]
    assert round(arm["chat_tpot_ms"]["p50"], 6) == 50.0
    failed = [RequestRecord(scenario="chat", started_s=0.0, e2e_s=1.0, error="HTTP 429")]
    assert _arm([(records([0.1]) + failed, 10.0, None)])["failed"] == 1
    assert _arm([(records([0.1]), 10.0, None)])["total_tokens_per_s"] is None  # no scrape, no figure
