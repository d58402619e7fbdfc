"""`bench report` and the overhead comparison on stored results: files, plots, figures."""

from __future__ import annotations

import json

import pytest

from bench.metrics import RequestRecord, Slo, summarize
from bench.overhead import compare
from bench.plots import on_three_corners, pareto_front, three_corners
from bench.quality.cli import against_reference
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


@pytest.mark.parametrize(("content", "expected"), [
    ('{"hello": 1}', "not a bench run, sweep or quality result"),
    ('[1, 2]', "not a bench run, sweep or quality result"),
    # A run's summary has a 'pools' too, but as a mapping: not a quality result.
    ('{"pools": {"short": {"perplexity": 30.0}}}', "not a bench run, sweep or quality result"),
    ('{"pools": [{"pool": "short"}]}', "a 'pools' list with each pool's 'perplexity'"),
    ('{"pools": [{"pool": "short", "perplexity": 30.0}]}',
     "quality result whose pools lack perplexity_added, precision_label"),
])
def test_report_refuses_a_file_that_is_not_a_result(tmp_path, capsys, content, expected):
    bad = tmp_path / "neither.json"
    bad.write_text(content)
    assert main(["bench", "report", str(bad), "--out", str(tmp_path / "r")]) == 2
    error = capsys.readouterr().err
    assert "neither.json" in error and expected in error
    with pytest.raises(ReportError, match="cannot read"):
        write_report([tmp_path / "missing.json"], tmp_path / "r")


def quality_pool(name, precision, ppl, right, usd, p99=600.0):
    return {"pool": name, "precision_label": precision, "perplexity": ppl, "task_right": right, "task_total": 40,
            "task_score": right / 40, "usd_per_1m_tokens": usd, "ttft_ms": {"p50": p99 / 2, "p99": p99},
            "burst_in_flight": 8, "burst_output_tokens_per_s": 30.0}


@pytest.fixture
def quality_file(tmp_path):
    pools = [quality_pool("short", "bfloat16", 20.0, 30, 2.0, p99=500.0),
             quality_pool("cheap", "w8a8-int8", 21.5, 26, 1.0, p99=700.0),
             quality_pool("free", "fp8", 25.0, 20, None)]
    against_reference(pools, "short")
    result = {"name": "quality", "command": "trilemma bench quality --name quality", "model": "smol",
              "reference": "short", "pools": pools}
    path = tmp_path / "quality.json"
    path.write_text(json.dumps(result))
    return path


QUALITY_ROWS = [
    "| quality | short | bfloat16 | 20.00 | 30/40 | 2.0000 | 500 | +0.00 | 0% | short |",
    "| quality | cheap | w8a8-int8 | 21.50 | 26/40 | 1.0000 | 700 | +1.50 | 50% | short |",
    "| quality | free | fp8 | 25.00 | 20/40 | - | 600 | +5.00 | - | short |",  # no price: kept here
]


@pytest.mark.parametrize(("with_run", "pngs"), [
    (False, ["three-corners.png"]),
    (True, ["cost-vs-p99.png", "latency-vs-throughput.png", "three-corners.png"]),
])
def test_report_gives_quality_its_own_corner(result_files, quality_file, tmp_path, with_run, pngs):
    run = result_files[0]
    out = tmp_path / "report"
    inputs = [quality_file, run] if with_run else [quality_file]
    assert main(["bench", "report", *map(str, inputs), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.glob("*.png")) == pngs
    markdown = (out / "report.md").read_text()
    assert "## Quality, the third corner" in markdown and "](three-corners.png)" in markdown
    assert "`trilemma bench quality --name quality`" in markdown
    for row in QUALITY_ROWS:
        assert row in markdown
    assert "Not on the plot (no price or no latency): free (fp8), quality." in markdown
    # The run's own table and frontier stay as they were, and only beside a run.
    assert ("## Cost against p99 TTFT" in markdown) is with_run
    assert len([line for line in markdown.splitlines() if line.startswith("| run ")]) == (2 if with_run else 0)


@pytest.mark.parametrize(("pool", "placed"), [
    (quality_pool("short", "bfloat16", 20.0, 30, 2.0), True),
    (quality_pool("free", "fp8", 25.0, 20, None), False),
    (quality_pool("idle", "fp8", 25.0, 20, 1.0, p99=float("nan")), False),  # no request came back
])
def test_three_corners_places_only_pools_with_all_three_axes(pool, placed):
    assert on_three_corners(pool) is placed


@pytest.mark.parametrize("usd", [1.0, None])
def test_three_corners_writes_a_png_even_with_nothing_priced(tmp_path, usd):
    points = [("a", quality_pool("a", "bfloat16", 20.0, 30, usd)), ("b", quality_pool("b", "fp8", 22.0, 25, usd))]
    path = three_corners(points, tmp_path / "corners.png")
    assert path == tmp_path / "corners.png" and path.read_bytes().startswith(PNG_MAGIC)


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
