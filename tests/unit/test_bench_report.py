"""`bench report` and the overhead comparison on stored results: files, plots, figures."""

from __future__ import annotations

import json

import pytest

from bench.metrics import RequestRecord, Slo, summarize
from bench.overhead import compare
from bench.plots import pareto_front
from bench.report import ReportError, write_report
from bench.sweep import find_knee, slo_check
from serve_app.cli import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def records(ttft, count=20, tokens=11):
    return [RequestRecord(scenario="chat", started_s=i * 0.1, e2e_s=ttft + 1.0, ttft_s=ttft,
                          prompt_tokens=50, completion_tokens=tokens, itl_s=[0.1] * (tokens - 1))
            for i in range(count)]


def point(load, ttft, duration, busy=0.5):
    recs = records(ttft)
    summary = summarize(recs, duration, {"chat": Slo(ttft_s=1.0)})
    pools = {"short": {"replicas": 1, "busy_fraction": busy, "busy_replica_s": busy * duration,
                       "replica_s": duration, "busy_usd": busy * duration / 3600,
                       "idle_usd": (1 - busy) * duration / 3600}}
    usd = duration / 3600
    summary.update(pools=pools, provisioned_usd=usd, provisioned_usd_per_1m_tokens=usd / 1220 * 1e6,
                   good_requests_per_usd=summary["goodput_rps"] * duration / usd)
    return {"load": load, "round": 1, "summary": summary, "records": [r.to_dict() for r in recs]}


@pytest.fixture
def result_files(tmp_path):
    slos = {"chat": {"ttft_s": 1.0, "tpot_s": None, "e2e_s": None}}
    run = {"command": "trilemma bench run --rate 1,2", "config": {"slos": slos},
           "points": [point("poisson 1.0 req/s", 0.2, 20), point("poisson 2.0 req/s", 0.4, 10)]}
    settings = []
    for value, ttft, duration in ((1, 3.0, 40), (4, 0.3, 12), (8, 0.6, 14)):
        p = point("poisson 2.0 req/s", ttft, duration)
        settings.append({"value": value, "summary": p["summary"], "points": [p],
                         "slo_misses": slo_check(records(ttft), {"chat": Slo(ttft_s=1.0)})})
    sweep = {"kind": "sweep", "command": "trilemma bench sweep --knob pools.short.max_num_seqs",
             "config": {"slos": slos, "load": "poisson 2.0 req/s", "dataset": "docs", "num_prompts": 20,
                        "rounds": 1},
             "knob": "pools.short.max_num_seqs", "settings": settings, "knee": find_knee(settings)}
    (tmp_path / "run.json").write_text(json.dumps(run))
    (tmp_path / "sweep.json").write_text(json.dumps(sweep))
    return tmp_path / "run.json", tmp_path / "sweep.json"


def test_report_writes_markdown_and_real_pngs(result_files, tmp_path):
    out = tmp_path / "report"
    assert main(["bench", "report", *map(str, result_files), "--out", str(out), "--title", "T"]) == 0
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == ["cost-vs-p99.png", "latency-vs-throughput.png", "sweep-sweep.png"]
    assert all((out / name).read_bytes().startswith(PNG_MAGIC) for name in pngs)
    markdown = (out / "report.md").read_text()
    for name in pngs:
        assert f"]({name})" in markdown
    assert "Knee: **pools.short.max_num_seqs = 4**" in markdown       # 8 is slower per $, 1 misses
    assert "- 1: chat TTFT p99 3000 ms > 1000 ms" in markdown
    assert "`trilemma bench run --rate 1,2`" in markdown
    rows = [line for line in markdown.splitlines() if line.startswith("| run ") or "max_num_seqs=" in line]
    assert len(rows) == 5 and "short 50%" in rows[0]


def test_report_refuses_a_file_that_is_not_a_result(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text('{"hello": 1}')
    assert main(["bench", "report", str(bad), "--out", str(tmp_path / "r")]) == 2
    assert "not a bench run or sweep result" in capsys.readouterr().err
    with pytest.raises(ReportError, match="cannot read"):
        write_report([tmp_path / "missing.json"], tmp_path / "r")


def test_pareto_front_keeps_only_unbeaten_points():
    assert pareto_front([(1, 5), (2, 3), (3, 4), (4, 1), (5, 2)]) == [(1, 5), (2, 3), (4, 1)]


def test_overhead_compare_reports_added_ttft_and_throughput_ratio():
    direct, router = records(0.200), records(0.204)
    result = compare({"direct": direct, "router": router}, {"direct": 10.0, "router": 10.5},
                     {"direct": [22.0, 22.0], "router": [21.0, 20.9]})
    assert result["added_ttft_p50_ms"] == pytest.approx(4.0)
    assert result["added_ttft_p50_allowed_ms"] == pytest.approx(6.0)   # 3% of 200 ms beats 5 ms
    assert result["throughput_ratio"] == pytest.approx(10 / 10.5)
    assert result["meets_targets"] is True
    slower = compare({"direct": direct, "router": records(0.230)}, {"direct": 10.0, "router": 10.0},
                     {"direct": [1.0], "router": [1.0]})
    assert slower["meets_targets"] is False
