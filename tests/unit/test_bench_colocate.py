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
        "job": {"args": ["--input", "corpus.jsonl"], "lead_s": 30.0},
        "phases": {"online_only": phase, "online_with_batch_job": {**phase, "total_tokens_per_s": 100.0}},
        "ratios": {"chat_ttft_p99_with_job_over_alone": 1.05, "total_tokens_per_s_with_job_over_alone": 2.5},
        "verdict": {"chat_ttft_p99_within_1_1x": True, "total_tokens_per_s_at_least_1_5x": True,
                    "no_chat_request_failed": True, "job_ran_through_the_window": True},
    }
    text = markdown(result)
    assert "**1.05** (target at most 1.1): met" in text and "**2.50** (target at least 1.5): met" in text
    assert "| chat + batch job | 100 | 200 | 50.0 | 60.0 | 100.0 | 10/10 |" in text
