"""`trilemma bench autoscale`: the replica model's calibration, the bursty day, the pool
simulation under Ray Serve's policy object, and the live run's verdicts."""

from __future__ import annotations

import json

import pytest

from bench.autoscale.bursty_trace import TraceRequest, arrivals, bursty_day, phase_at
from bench.autoscale.live import burst_phases, live_verdicts
from bench.autoscale.replica_model import CalibrationError, ReplicaModel
from bench.autoscale.simulate import DayShape, compare
from bench.autoscale.simulator import PoolSimulation
from bench.metrics import RequestRecord
from core.config import ConfigError, TrilemmaConfig

ENGINE_RUN = {
    # One prompt of 100 tokens: TTFT 100 ms (1 ms a token), then 50 ms a token alone.
    "single_stream": {"prompt_tokens": {"median": 100}, "ttft_ms": {"median": 100.0}, "tpot_ms": {"median": 50.0}},
    # 16 prompts in 2 waves of 8: each wave 800 prompt tokens (0.8 s) + 64 tokens at 57 ms (3.648 s).
    "saturated": {"prompts": 16, "max_num_seqs": 8, "prompt_tokens": 1600, "output_tokens_each": 64,
                  "seconds": 2 * (0.8 + 64 * 0.057)},
}


@pytest.fixture
def model(tmp_path) -> ReplicaModel:
    path = tmp_path / "engine.json"
    path.write_text(json.dumps(ENGINE_RUN))
    return ReplicaModel.from_engine_run(path, startup_s=30.0)


def test_the_replica_model_splits_prefill_and_decode_from_an_engine_run(model):
    assert model.prefill_s_per_token == pytest.approx(0.001)
    assert model.decode_base_s + model.decode_s_per_seq == pytest.approx(0.050)  # one stream
    assert model.iteration_s(8, 0) == pytest.approx(0.057)  # a full batch
    assert model.max_num_seqs == 8


def test_a_file_that_is_no_engine_run_is_refused_with_the_reason(tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"single_stream": {}}))
    with pytest.raises(CalibrationError, match="not a bench.engine_alone result"):
        ReplicaModel.from_engine_run(path, startup_s=1.0)


def test_the_bursty_day_follows_its_phases():
    phases = bursty_day(0.5, 5.0, seconds=1200)
    trace = arrivals(phases, prompt_tokens=(10, 20), output_tokens=(5, 5), seed=1)
    assert [p.name for p in phases] == ["quiet", "ramp", "spike", "ramp down", "quiet"]
    per_phase = {}
    for request in trace:
        per_phase.setdefault(phase_at(phases, request.at), []).append(request)
    # 300 s of night at 0.5 req/s, 200 s of spike at 5 req/s: about 150 and 1000 requests.
    assert 110 < len([r for r in trace if r.at < 300]) < 190
    assert 850 < len(per_phase["spike"]) < 1150
    assert all(10 <= r.prompt_tokens <= 20 and r.output_tokens == 5 for r in trace)
    assert arrivals(phases, prompt_tokens=(10, 20), output_tokens=(5, 5), seed=1) == trace  # seeded


def test_a_replica_batches_and_reports_what_a_pool_replica_reports(model):
    trace = [TraceRequest(at=0.0, prompt_tokens=100, output_tokens=3) for _ in range(10)]
    sim = PoolSimulation(model, usd_per_hour=1.0, replicas=1)
    result = sim.run(trace)
    first, second, last = result.requests[0], result.requests[1], result.requests[-1]
    # The first arrival starts an iteration alone; seven more join the next one (a batch of
    # eight); the last two wait for a slot.
    assert first.first_at == pytest.approx(model.iteration_s(1, 100))
    assert second.first_at == pytest.approx(first.first_at + model.iteration_s(8, 700))
    assert last.first_at > first.done_at
    assert result.replica_seconds() == pytest.approx(result.ended_at)
    stats = sim.replicas[0].stats(result.ended_at, 1.0)
    assert stats["requests_per_s"] > 0 and stats["ttft_p99_s"] == pytest.approx(max(r.ttft_s for r in result.requests), rel=0.05)


def test_the_policy_scales_the_simulated_pool_and_beats_static_peak(model):
    config = TrilemmaConfig.from_yaml("serve_app/configs/autoscale-cpu.yaml")
    raw = config.model_dump(mode="json")
    raw["autoscaling"]["pools"]["short"]["max_replicas"] = 4
    day = DayShape(quiet_rate=0.2, peak_rate=3.0, seconds=1800, prompt_tokens=(60, 200), output_tokens=(32, 64))
    result = compare(TrilemmaConfig.from_dict(raw), "short", model, 0.05, day)
    assert result["autoscaled"]["peak_replicas"] > 1
    assert any(d["policy"] == "latency" for d in result["decisions"])
    assert any(d["policy"] == "utilization" for d in result["decisions"])
    assert result["autoscaled"]["replica_seconds"] < next(
        arm for arm in result["static"] if arm["arm"] == result["static_peak"])["replica_seconds"]
    assert [arm["arm"] for arm in result["static"]] == ["static 1", "static 2", "static 3", "static 4"]


def test_a_pool_that_sleeps_wakes_replicas_in_its_wake_time_and_counts_their_sleep_apart(model):
    from dataclasses import replace

    sleepy = replace(model, wake_s=2.0)
    sim = PoolSimulation(sleepy, usd_per_hour=1.0, replicas=2)
    sim.now = 10.0
    sim._scale_to(1)  # the replica that leaves had served: it sleeps
    assert len(sim._asleep_since) == 1
    sim.now += 100.0
    sim._scale_to(2)  # woken, not started: serving after wake_s, not startup_s
    woken = sim.replicas[-1]
    assert woken.ready_at == pytest.approx(sim.now + 2.0)
    assert sim._asleep_seconds == pytest.approx(100.0)
    sim._scale_to(3)  # nobody left asleep: a cold start
    assert sim.replicas[-1].ready_at == pytest.approx(sim.now + model.startup_s)


def test_a_day_with_sleeping_replicas_reports_their_sleep_and_both_savings(model):
    from dataclasses import replace

    config = TrilemmaConfig.from_yaml("serve_app/configs/autoscale-cpu.yaml")
    raw = config.model_dump(mode="json")
    raw["autoscaling"]["pools"]["short"]["max_replicas"] = 4
    day = DayShape(quiet_rate=0.2, peak_rate=3.0, seconds=1800, prompt_tokens=(60, 200), output_tokens=(32, 64))
    result = compare(TrilemmaConfig.from_dict(raw), "short", replace(model, wake_s=2.0), 0.05, day)
    assert result["autoscaled"]["asleep_seconds"] > 0
    assert result["savings_if_asleep_paid"] < result["savings"]


def test_a_pool_that_is_not_autoscaled_is_refused(model):
    config = TrilemmaConfig.from_yaml("serve_app/configs/local-cpu.yaml")
    with pytest.raises(ConfigError, match="does not autoscale pool 'short'"):
        compare(config, "short", model, 0.05, DayShape(0.1, 1.0, 60, (10, 20), (5, 5)))


def test_live_verdicts_time_the_scale_up_from_the_slo_crossing():
    phases = burst_phases(0.3, 3.0, quiet_s=60, burst_s=100, after_s=200)
    timeline = [{"t": float(t), "replicas": 1 if t < 90 or t > 250 else 2, "serving": 1 if t < 140 or t > 250 else 2,
                 "ttft_p99_s": 2.0 if 80 <= t < 170 else 0.5} for t in range(0, 360, 10)]
    decisions = [{"at": 95.0, "direction": "up"}, {"at": 240.0, "direction": "down"}]
    records = [RequestRecord(scenario="chat", started_s=1.0, e2e_s=1.0),
               RequestRecord(scenario="chat", started_s=2.0, e2e_s=1.0, error="http 500: boom")]
    verdicts = live_verdicts({"timeline": timeline, "decisions": decisions, "records": records}, phases, 1.5)
    assert (verdicts["slo_crossed_at_s"], verdicts["scale_up_decided_at_s"]) == (80.0, 95.0)
    assert verdicts["scale_up_within_30s_of_crossing"] and verdicts["decision_after_crossing_s"] == 15.0
    assert verdicts["new_replica_serving_at_s"] == 140.0
    assert verdicts["scaled_down_after_burst"] and verdicts["back_to_start_at_s"] == 260.0
    assert (verdicts["failed"], verdicts["failures"]) == (1, ["http 500: boom"])
