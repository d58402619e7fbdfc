"""`trilemma bench replay` against the router with fake engines: every request of the window
sent at its time with its lengths, routed by size, and the arm's figures written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.replay.trace import ReplayWindow, read_trace, schedule
from serve_app.cli import main

pytestmark = pytest.mark.integration

SAMPLE = Path(__file__).resolve().parents[2] / "bench" / "replay" / "samples" / "azure-conv-sample.csv"


def test_replay_sends_the_window_at_its_times_and_writes_its_figures(fake_app_url, tmp_path):
    window = ["--duration", "10", "--speed", "2", "--rate-scale", "1,2", "--token-scale", "0.25"]
    rc = main(["bench", "replay", str(SAMPLE), "--arms", f"fake={fake_app_url}", *window, "--warmup", "2",
               "--out", str(tmp_path), "--name", "replay", "--no-progress"])
    assert rc == 0
    result = json.loads((tmp_path / "replay.json").read_text())
    assert result["command"].startswith("trilemma bench replay ")
    trace = read_trace(SAMPLE)
    for rate in ("1", "2"):
        expected = schedule(trace, ReplayWindow(duration_s=10, speed=2, rate_scale=float(rate), token_scale=0.25))
        sent = result["records"]["fake"][rate][0]
        assert [r["line"] for r in sent] == [s.request.line for s in expected]
        # Each left on time (open loop), with the trace's lengths: the prompt the server counted
        # is the trace's, and ignore_eos made the answer exactly its output.
        assert all(abs(r["started_s"] - r["planned_s"]) < 0.5 for r in sent)
        assert all(r["error"] is None for r in sent)
        assert [r["prompt_tokens"] for r in sent] == [s.request.prompt_tokens for s in expected]
        assert [r["completion_tokens"] for r in sent] == [s.request.output_tokens for s in expected]
        # Routed by size: prompt + max_tokens at or under the threshold to the short pool.
        for record in sent:
            size = record["trace_prompt_tokens"] + record["trace_output_tokens"]
            assert record["pool"] == ("short" if size <= 1024 else "long")
        figures = result["arms"]["fake"][rate][0]
        assert figures["requests"] == figures["succeeded"] == len(expected)
        assert figures["held_usd"] > 0 and figures["usd_per_1m_tokens"] > 0
        assert set(figures["by_pool"]) <= {"short", "long"}
    assert len(result["records"]["fake"]["2"][0]) > len(result["records"]["fake"]["1"][0])
    assert (tmp_path / "replay.png").stat().st_size > 0
    assert "| fake (round 1) | 2x |" in (tmp_path / "replay.md").read_text()


def test_a_bad_trace_row_is_refused_with_its_line(tmp_path, capsys):
    trace = tmp_path / "bad.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
                     "2023-11-16 18:15:47.0,abc,10\n")
    rc = main(["bench", "replay", str(trace), "--arms", "x=http://127.0.0.1:1", "--out", str(tmp_path)])
    assert rc == 2
    assert "bad.csv:3:" in capsys.readouterr().err
