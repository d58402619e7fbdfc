"""Benchmarks that deploy the app themselves (sweep, overhead, isolation), on fake engines.

They deploy a second app beside the package's shared one, under its own name and route
prefix, so the shared app keeps serving the other tests.
"""

from __future__ import annotations

import json

import pytest

from bench.arrivals import LoadShape
from bench.isolation import measure_isolation, mixed_load, overload
from bench.metrics import Slo
from bench.overhead import measure_overhead
from bench.runner import Workload, run_point, warm_up
from bench.sweep import Knob, run_sweep
from serve_app.launcher import deployed
from tests.fake_engine import FakeEngine
from tests.support import METRICS_TEST_PORT, config_for_tests

pytestmark = pytest.mark.integration

PREFIX = "/lifecycle"


@pytest.fixture(scope="module")
def lifecycle_config(fake_app_url):
    # Depends on the shared app so that the HTTP proxy already listens on the test port.
    raw = config_for_tests().model_dump(mode="json")
    raw["app_name"] = "trilemma-lifecycle"
    return type(config_for_tests()).from_dict(raw)


@pytest.fixture
def prompts_file(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"Question {i}: what is Ray?", "max_tokens": 8}) + "\n"
                            for i in range(8)))
    return path


def test_sweep_restarts_the_app_per_setting_and_finds_the_knee(
    lifecycle_config, prompts_file, embedded_model_dir
):
    # The settings sit far apart: a fake engine's per-token time must outweigh what every request
    # pays anyway (HTTP, router, scheduling on a busy machine), or the cheapest setting is noise.
    slos = {"chat": Slo(tpot_s=0.1)}
    workload = Workload.build("jsonl", num_prompts=8, rounds=1, warmup=1, slos=slos, path=prompts_file,
                              scenario="chat")
    replicas_seen = []

    def measure(config):
        with deployed(config, engine_cls=FakeEngine, model_source=str(embedded_model_dir),
                      route_prefix=PREFIX) as url:
            warm_up(url, workload, config.model.name)
            points = run_point(url, workload, LoadShape(concurrency=4), model=config.model.name,
                               progress=False)
            replicas_seen.append({r["pool"] for r in points[0]["records"]})
            return points

    sweep = run_sweep(lifecycle_config, Knob("pools.short.env.TRILEMMA_FAKE_TPOT_S"),
                      ["0.001", "0.03", "0.3"], measure, slos)
    by_value = {s["value"]: s for s in sweep["settings"]}
    slow_p99 = by_value["0.3"]["summary"]["tpot_ms"]["p99"]
    assert by_value["0.3"]["slo_misses"] == [f"chat TPOT p99 {slow_p99:.0f} ms > 100 ms"]
    assert by_value["0.001"]["slo_misses"] == by_value["0.03"]["slo_misses"] == []
    assert sweep["knee"]["value"] == "0.001", sweep["knee"]
    assert "good requests per $" in sweep["knee"]["reason"]
    # The engines' clocks saw the slow setting busy for longer.
    busy = {value: s["summary"]["pools"]["short"]["busy_fraction"] for value, s in by_value.items()}
    assert 0 < busy["0.001"] < busy["0.3"] <= 1.0
    assert replicas_seen == [{"short"}] * 3


def test_overhead_runs_both_paths_to_the_same_pool(lifecycle_config, embedded_model_dir):
    result = measure_overhead(
        lifecycle_config, pool="short", num_prompts=6, rounds=2, concurrency=3, warmup=2, max_tokens=8,
        progress=False, engine_cls=FakeEngine, model_source=str(embedded_model_dir), route_prefix=PREFIX,
    )
    for arm in ("direct", "router"):
        summary = result["summaries"][arm]
        assert summary["requests"] == summary["succeeded"] == 12, summary["errors"]
    # The router names the pool it chose; the direct ingress, bound to that pool, names none.
    assert {r["pool"] for r in result["records"]["router"]} == {"short"}
    assert {r["pool"] for r in result["records"]["direct"]} == {None}
    assert result["misrouted"] == 0
    assert result["throughput_ratio"] > 0 and result["added_ttft_p50_allowed_ms"] >= 5.0
    assert set(result) >= {"added_ttft_p50_ms", "added_ttft_p99_ms", "throughput_ratio_round_median"}


def test_isolation_runs_every_phase_and_the_overload_sheds_batch_only(lifecycle_config, embedded_model_dir):
    raw = lifecycle_config.model_dump(mode="json")
    raw["pools"]["short"].update(resources={"CPU": 0.1}, env={"TRILEMMA_FAKE_TTFT_S": "0.2"},
                                 admission={"max_in_engine": 1, "max_queued": 16})
    raw["pools"]["long"].update(resources={"CPU": 0.1})
    config = type(lifecycle_config).from_dict(raw)
    load = mixed_load(12, rate_rps=10.0, long_fraction=0.3, long_words=1500,
                      short_scenario="chat", long_scenario="batch", seed=1)
    surge = overload(24, rate_rps=40.0, scenarios=("chat", "batch"))
    result = measure_isolation(config, load, short_scenario="chat", overload_load=surge, progress=False,
                               engine_cls=FakeEngine, model_source=str(embedded_model_dir), route_prefix=PREFIX,
                               metrics_url=f"http://127.0.0.1:{METRICS_TEST_PORT}/metrics")
    phases = result["phases"]
    assert set(phases) == {"split_short_only", "split_mixed", "shared_mixed", "split_overload"}
    assert phases["split_mixed"]["scenarios"]["chat"]["pools"] == ["short"]
    assert phases["split_mixed"]["scenarios"]["batch"]["pools"] == ["long"]
    assert phases["shared_mixed"]["scenarios"]["batch"]["pools"] == ["shared"]
    assert phases["split_short_only"]["scenarios"].keys() == {"chat"}
    for name in ("split_short_only", "split_mixed", "shared_mixed"):
        assert phases[name]["all"]["errors"] == {}, name
    # One engine slot and a queue of 16 (4 for batch) against 24 requests in 0.6 s: batch is
    # shed, real-time waits its turn.
    shed = phases["split_overload"]["shed"]
    assert shed.get("batch", 0) > 0 and shed.get("chat", 0) == 0, shed
    assert result["targets"]["no_real_time_shed_while_batch_shed"]
    assert result["ratios"]["long_prompt_token_share"] > 0.3
    # The router's histograms saw the phase's streamed chat requests under their priority.
    server = phases["split_short_only"]["server"]["chat/0"]
    assert server["ttft_count"] == phases["split_short_only"]["scenarios"]["chat"]["ok"]
    assert server["ttft_p50_ms"] >= 200  # the fake engine's 0.2 s before its first token
