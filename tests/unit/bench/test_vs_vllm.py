"""The comparison with plain vLLM: the same engine settings as flags, pooled rounds, the targets."""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path

import pytest
import yaml

import bench.vs_vllm as vs_vllm
import serve_app.launcher
from bench.vs_vllm import judged, pooled, vllm_serve_argv


def test_the_pools_engine_arguments_reach_vllm_serve_through_its_config_file(tmp_path):
    engine_kwargs = {"max_model_len": 2048, "enable_prefix_caching": False, "enforce_eager": True,
                     "scheduling_policy": "priority", "compilation_config": {"level": 0}}
    argv = vllm_serve_argv(engine_kwargs, "/models/smol", "SmolLM2", 8100, tmp_path / "serve.yaml")
    assert argv[argv.index("serve") + 1] == "/models/smol"
    assert argv[argv.index("--served-model-name") + 1] == "SmolLM2"
    assert yaml.safe_load(Path(argv[argv.index("--config") + 1]).read_text()) == {
        "max-model-len": 2048, "enable-prefix-caching": False, "enforce-eager": True,
        "scheduling-policy": "priority", "compilation-config": {"level": 0}}


def _run(ttfts, itls, output_lens, throughput, errors=None):
    errors = errors or [""] * len(ttfts)
    return {"completed": errors.count(""), "failed": len(errors) - errors.count(""), "ttfts": ttfts, "itls": itls,
            "output_lens": output_lens, "output_throughput": throughput, "errors": errors}


def test_rounds_are_pooled_per_request_in_ms():
    summary = pooled([_run([0.1, 0.2], [[0.01, 0.03], [0.02, 0.02]], [3, 3], 50.0),
                      _run([0.3, 0.9], [[0.04, 0.04], [0.5]], [3, 0], 70.0, errors=["", "cut off"])])
    assert summary["requests"] == 4 and summary["failed"] == 1  # the failed one's gaps are not counted
    assert summary["ttft_ms"]["p50"] == pytest.approx(200.0)
    assert summary["tpot_ms"]["p50"] == pytest.approx(20.0)  # (10 + 30) / 2, (20 + 20) / 2, (40 + 40) / 2
    assert summary["itl_ms"]["p99"] == pytest.approx(40.0)
    assert summary["output_tps"] == pytest.approx(60.0)  # the median round
    assert summary["chunks_per_token"] == pytest.approx(1.0)  # 3 chunks for 3 tokens, 3 times


def test_tokens_without_a_chunk_show_as_fewer_chunks_than_tokens():
    # 4 tokens, of which 2 came without a chunk of their own: 2 chunks, and one gap over three steps.
    summary = pooled([_run([0.1], [[0.15]], [4], 40.0)])
    assert summary["chunks_per_token"] == pytest.approx(0.5)


def _arm(ttft_p50, ttft_p99, itl_p99, tps):
    return {"ttft_ms": {"p50": ttft_p50, "p99": ttft_p99}, "itl_ms": {"p99": itl_p99}, "output_tps": tps}


def test_latency_targets_apply_up_to_16_in_flight_and_throughput_from_64():
    vllm = _arm(100.0, 200.0, 10.0, 1000.0)
    within = judged(16, vllm, _arm(105.0, 219.0, 14.9, 900.0))
    assert all(within["targets"].values()) and len(within["targets"]) == 3
    over = judged(1, vllm, _arm(105.1, 221.0, 15.1, 1000.0))
    assert not any(over["targets"].values())
    busy = judged(256, vllm, _arm(900.0, 900.0, 90.0, 969.0))
    assert busy["targets"] == {"output tok/s at least 0.97x plain": False}
    assert judged(32, vllm, _arm(900.0, 900.0, 90.0, 969.0))["targets"] == {}


def test_a_run_stopped_early_keeps_the_rounds_both_arms_finished(tmp_path, monkeypatch):
    """A GPU call that runs out of time must not lose what it measured: each round both arms ran
    is written as it ends, and the files say how many rounds of how many they hold."""
    loads = []

    class Client:  # vLLM's benchmark client, never started: bench_serve below stands in for its runs
        def __init__(self, log):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    def bench_serve(client, url, model, tokenizer, *, concurrency, num_prompts, **_):
        loads.append(url)
        if len(loads) > 4:  # a warm-up and round 1 per arm done, round 2 starts: the call's time is up
            raise KeyboardInterrupt
        return _run([0.04 if "8100" in url else 0.05], [[0.005, 0.005]], [3], 100.0)

    @contextlib.contextmanager
    def plain_vllm(*args, **kwargs):
        yield 12.0

    class EngineStats:  # the servers' metrics: plain vLLM's engine takes 30 ms to its first token, the app's 32
        def __init__(self, url, totals, settle_s):
            self.ttft_ms = 30.0 if "8100" in url else 32.0

        def read(self):
            return {}

        def since(self, before, requests):
            return {"requests": requests, "totals": {"engine_ttft": [self.ttft_ms / 1000 * requests, requests],
                                                     "queue": [0.0, requests], "prefill": [0.02 * requests, requests]}}

    monkeypatch.setattr(vs_vllm, "bench_serve", bench_serve)
    monkeypatch.setattr(vs_vllm, "EngineStats", EngineStats)
    monkeypatch.setattr(vs_vllm, "VllmBenchClient", Client)
    monkeypatch.setattr(vs_vllm, "plain_vllm", plain_vllm)
    monkeypatch.setattr(vs_vllm, "pool_engine", lambda config, pool, source: ({"max_model_len": 2048}, {}))
    monkeypatch.setattr(vs_vllm, "resolve_model_source", lambda source: "/models/smol")
    monkeypatch.setattr(vs_vllm, "wait_until_serving", lambda url, timeout_s: "smol")
    monkeypatch.setattr(serve_app.launcher, "shutdown_local_ray", lambda: None)
    parser = argparse.ArgumentParser()
    vs_vllm.add_vs_vllm_command(parser.add_subparsers())
    argv = ["vs-vllm", "--app-url", "http://127.0.0.1:8000", "--concurrency", "1", "--rounds", "2",
            "--num-prompts", "2", "--out", str(tmp_path), "--name", "cut"]
    args = parser.parse_args(argv)
    args.argv = ["bench", *argv]
    with pytest.raises(KeyboardInterrupt):
        args.func(args)
    saved = json.loads((tmp_path / "cut.json").read_text())
    assert saved["rounds_done"] == 1 and saved["rounds"] == 2
    assert saved["points"][0]["ttft_p50_added_ms"] == pytest.approx(10.0)
    shown = (tmp_path / "cut.md").read_text()
    assert "**1 of 2 rounds** (the run stopped early)" in shown
    # The client's TTFT (50 / 40 ms), the engine's own (32 / 30), and what lies outside the engine.
    assert saved["points"][0]["app"]["engine"]["engine_ttft_ms"] == pytest.approx(32.0)
    assert "| 1 | 50.0 / 40.0 | 32.0 / 30.0 | 0.0 / 0.0 | 20.0 / 20.0 | 18.0 / 10.0 |" in shown
