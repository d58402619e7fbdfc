"""End to end: `trilemma bench quality`'s measurements on the real engine of each pool, through
the app (the router passes vLLM's `prompt_logprobs` on, and pins the pool)."""

from __future__ import annotations

import pytest

from bench.quality.run import PoolClient, score_pool
from bench.quality.scores import heldout_passages, tasks

pytestmark = pytest.mark.e2e

MODEL = "SmolLM2-135M-Instruct"


def test_each_pool_is_scored_on_its_own_engine_and_billed(base_url, api_key):
    passages, questions = heldout_passages()[:2], tasks()[:4]
    rows = {pool: score_pool(PoolClient(base_url, MODEL, pool, api_key), passages, questions, in_flight=2)
            for pool in ("short", "long")}
    for row in rows.values():
        # Two passages of about 120 words: every token but each passage's first is scored. A
        # 135M model on plain English prose: neither a uniform guess (~49,000) nor a certainty.
        assert row["scored_tokens"] > 200
        assert 2 < row["perplexity"] < 100, row
        assert 0 <= row["task_right"] <= row["task_total"] == 4
        assert row["billed_tokens"] > row["scored_tokens"] and row["usd_per_1m_tokens"] > 0
        assert 0 < row["ttft_ms"]["p50"] <= row["ttft_ms"]["p99"]
        assert row["burst_output_tokens_per_s"] > 0
    # Both pools run the same weights in the same precision: the same text is as likely in either.
    assert rows["short"]["perplexity"] == pytest.approx(rows["long"]["perplexity"], rel=0.01)


def test_a_request_pinned_to_a_pool_the_app_lacks_fails_the_run_with_the_reason(base_url, api_key):
    with pytest.raises(ValueError, match="pool 'nowhere'"):
        PoolClient(base_url, MODEL, "nowhere", api_key).passage_nll("Some text to score.")
