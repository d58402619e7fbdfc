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
        # Utilization comes from the replicas' engine clocks, and prices make a capacity cost.
        pools = summary["pools"]
        assert set(pools) == {"short", "long"} and all(p["replicas"] == 1 for p in pools.values())
        assert all(0 <= p["busy_fraction"] <= 1 for p in pools.values())
        assert pools["short"]["busy_fraction"] > 0 and summary["provisioned_usd"] > 0
    markdown = (tmp_path / "run.md").read_text()
    assert "poisson 40.0 req/s" in markdown and "TTFT p99" in markdown and "short " in markdown


def test_bench_run_counts_failures_instead_of_crashing(fake_app_url, tmp_path):
    rc = main([
        "bench", "run", "--url", fake_app_url, "--num-prompts", "3", "--concurrency", "3",
        "--warmup", "0", "--scenario", "closed", "--out", str(tmp_path), "--name", "closed",
        "--no-progress",
    ])
    assert rc == 0
    summary = json.loads((tmp_path / "closed.json").read_text())["points"][0]["summary"]
    assert summary["succeeded"] == 0 and summary["errors"] == {"http 503": 3}


def test_pool_activity_reports_every_replica_clock(fake_app_url):
    import httpx

    from cluster.pricing import load_catalog, pool_rates
    from core.config import CostConfig
    from tests.support import config_for_tests

    rates = pool_rates(config_for_tests(), load_catalog(CostConfig()))
    pools = httpx.get(f"{fake_app_url}/trilemma/pools", timeout=30).json()["pools"]
    assert set(pools) == {"short", "long"}
    for name, pool in pools.items():
        assert pool["price_usd_per_hour"] == pytest.approx(rates[name].usd_per_hour) and len(pool["replicas"]) == 1
        clock = pool["replicas"][0]
        assert 0 <= clock["busy_s"] <= clock["wall_s"] and clock["in_flight"] == 0
