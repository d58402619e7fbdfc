"""The GPU report: engine alone against the app's paths, read from result files."""

from __future__ import annotations

import json

from bench.gpu_report import write_gpu_report


def _summary(tps: float, ttft_p50: float) -> dict:
    return {"output_token_throughput_tps": tps, "ttft_ms": {"p50": ttft_p50}}


def test_the_report_compares_each_path_with_the_engine_alone(tmp_path):
    (tmp_path / "engine-alone-8b.json").write_text(json.dumps({
        "command": "python -m bench.engine_alone ...",
        "single_stream": {"ttft_ms": {"median": 17.0}, "tpot_ms": {"median": 4.7}},
        "saturated": {"output_tokens_per_s": 9000.0, "prompts": 256},
        "floor": {"tpot_floor_ms": 3.4, "tpot_over_floor": 4.7 / 3.4},
    }))
    (tmp_path / "overhead-8b.json").write_text(json.dumps({
        "command": "trilemma bench overhead ...", "added_ttft_p50_ms": 12.0, "config": {"concurrency": 256},
        "summaries": {"direct": _summary(6000.0, 40.0), "router": _summary(5400.0, 52.0)},
    }))
    report = write_gpu_report(tmp_path).read_text()
    assert "| 8B shape | 17.0 | 4.70 | 3.40 | 1.38 | 9000 |" in report
    assert "| 256 in flight, 1 router replica | 6000 | 5400 | 0.60 | 40 | 52 | +12 |" in report
    assert (tmp_path / "throughput.png").read_bytes().startswith(b"\x89PNG")
