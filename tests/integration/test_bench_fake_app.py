"""`trilemma bench run` against the router with fake engines: complete result files."""

from __future__ import annotations

import json

import pytest

from serve_app.cli import main

pytestmark = pytest.mark.integration


def test_bench_run_writes_complete_results(fake_app_url, tmp_path):
    rc = main([
        "bench", "run", "--url", fake_app_url, "--dataset", "docs", "--num-prompts", "12",
        "--rate", "20,40", "--rounds", "2", "--warmup", "2", "--scenario", "chat",
        "--slo", "chat:ttft_ms=2000,tpot_ms=500", "--out", str(tmp_path), "--name", "run",
        "--no-progress",
    ])
    assert rc == 0
    result = json.loads((tmp_path / "run.json").read_text())
    assert result["command"].startswith(f"trilemma bench run --url {fake_app_url} --dataset docs")
    assert result["config"]["model"] == "SmolLM2-135M-Instruct"
    assert [(p["load"], p["round"]) for p in result["points"]] == [
        ("poisson 20.0 req/s", 1), ("poisson 20.0 req/s", 2), ("poisson 40.0 req/s", 1), ("poisson 40.0 req/s", 2)]
    for point in result["points"]:
        summary = point["summary"]
        assert summary["requests"] == summary["succeeded"] == 12 and not summary["errors"]
        assert summary["goodput_rps"] > 0 and summary["ttft_ms"]["p99"] >= summary["ttft_ms"]["p50"] > 0
        assert summary["completion_tokens"] > 0 and summary["prompt_tokens"] > 0
        assert {r["pool"] for r in point["records"]} <= {"short", "long"}
        assert all(r["scenario"] == "chat" for r in point["records"])
    markdown = (tmp_path / "run.md").read_text()
    assert "poisson 40.0 req/s" in markdown and "TTFT p99" in markdown


def test_bench_run_counts_failures_instead_of_crashing(fake_app_url, tmp_path):
    rc = main([
        "bench", "run", "--url", fake_app_url, "--num-prompts", "3", "--concurrency", "3",
        "--warmup", "0", "--scenario", "closed", "--out", str(tmp_path), "--name", "closed",
        "--no-progress",
    ])
    assert rc == 0
    summary = json.loads((tmp_path / "closed.json").read_text())["points"][0]["summary"]
    assert summary["succeeded"] == 0 and summary["errors"] == {"http 503": 3}
