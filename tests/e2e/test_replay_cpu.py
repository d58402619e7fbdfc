"""End to end: a window of the public Azure conversation trace replayed, scaled down in time and
tokens, against the real app and against plain `vllm serve` on the same CPUs, one after the other:
every request leaves on time with exactly the trace's prompt and output lengths, as the engines
count them, and each arm's figures are written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.replay.trace import ReplayWindow, read_trace, schedule
from serve_app.cli import main

pytestmark = pytest.mark.e2e

SAMPLE = Path(__file__).resolve().parents[2] / "bench" / "replay" / "samples" / "azure-conv-sample.csv"
# 10 s of the trace at 0.4x its pace, prompts and answers at an eighth of their length: what
# the embedded model on two cores serves in under half a minute an arm (bench/results has longer runs).
WINDOW = {"duration_s": 10.0, "speed": 0.4, "token_scale": 0.125}


def test_the_app_and_plain_vllm_replay_the_trace_with_its_exact_lengths(base_url, api_key, embedded_model_dir,
                                                                       tmp_path):
    rc = main(["bench", "replay", str(SAMPLE), "--arms", f"app={base_url},vllm", "--duration", "10",
               "--speed", "0.4", "--token-scale", "0.125", "--warmup", "2", "--api-key", api_key,
               "--out", str(tmp_path), "--name", "replay", "--no-progress"])
    assert rc == 0
    result = json.loads((tmp_path / "replay.json").read_text())
    expected = schedule(read_trace(SAMPLE), ReplayWindow(**WINDOW))
    assert len(expected) >= 8
    for arm in ("app", "vllm"):
        sent = result["records"][arm]["1"][0]
        assert [r["line"] for r in sent] == [s.request.line for s in expected]
        assert [r["error"] for r in sent] == [None] * len(expected)
        # The engine's own count of each prompt is the trace's, and ignore_eos held every answer
        # to the trace's output: the lengths the replay promises, on the real tokenizer.
        assert [r["prompt_tokens"] for r in sent] == [s.request.prompt_tokens for s in expected]
        assert [r["completion_tokens"] for r in sent] == [s.request.output_tokens for s in expected]
        assert all(abs(r["started_s"] - r["planned_s"]) < 1.0 for r in sent)  # open loop, on time
        figures = result["arms"][arm]["1"][0]
        assert figures["succeeded"] == len(expected) and figures["goodput_rps"] > 0
        assert figures["held_usd"] > 0 and figures["usd_per_good_request"] > 0
        # Both servers' engines report their prefix caches: the app's per pool, plain vLLM's on /metrics.
        assert figures["prefix_cache"] and any(p["queried_tokens"] > 0 for p in figures["prefix_cache"].values())
    app_sent = result["records"]["app"]["1"][0]
    assert {r["pool"] for r in app_sent} <= {"short", "long"}
    assert all(r["pool"] is None for r in result["records"]["vllm"]["1"][0])  # plain vLLM names no pool
    assert "goodput app / plain vLLM" in (tmp_path / "replay.md").read_text()
