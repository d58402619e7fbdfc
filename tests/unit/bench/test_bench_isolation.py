"""The isolation benchmark's inputs and verdicts: the shared baseline, the mixed schedule, the ratios."""

from __future__ import annotations

import pytest

from bench.isolation import compare, markdown, mixed_load, overload, shared_pool_config
from core.config import DEFAULT_CONFIG_PATH, TrilemmaConfig


def test_the_shared_baseline_holds_all_the_pools_hardware_first_come_first_served():
    split = TrilemmaConfig.from_yaml(DEFAULT_CONFIG_PATH)
    shared = shared_pool_config(split)
    assert list(shared.pools) == ["shared"]
    pool = shared.pools["shared"]
    assert pool.resources == {"CPU": 2.0}
    assert pool.env["VLLM_CPU_OMP_THREADS_BIND"] == "0,1" and pool.env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert pool.max_num_seqs == 12 and pool.max_model_len == 8192
    assert "scheduling_policy" not in pool.engine_kwargs and pool.admission.policy == "fifo"
    assert split.pools["short"].uses_priority_scheduling and not pool.uses_priority_scheduling


def test_the_mixed_load_is_one_schedule_and_short_alone_replays_its_short_part():
    load = mixed_load(200, rate_rps=2.0, long_fraction=0.1, long_words=500,
                      short_scenario="chat", long_scenario="batch", seed=3)
    assert len(load.prompts) == len(load.arrivals) == 200
    assert load.arrivals == sorted(load.arrivals) and load.arrivals[-1] == pytest.approx(100.0)
    longs = [p for p in load.prompts if p.scenario == "batch"]
    assert 8 <= len(longs) <= 35 and all(p.kind == "long" for p in longs)
    assert all(len(p.messages[0]["content"].split()) > 500 for p in longs)
    alone = load.only("chat")
    assert len(alone.prompts) == 200 - len(longs) and all(p.kind == "short" for p in alone.prompts)
    assert set(alone.arrivals) <= set(load.arrivals)  # the same send times, the long ones left out
    surge = overload(10, rate_rps=5.0, scenarios=("chat", "batch"))
    assert [p.scenario for p in surge.prompts[:4]] == ["chat", "batch", "chat", "batch"]


def _phase(p99_ms: float, tps: float, shed: dict | None = None, short_tokens: int = 300, long_tokens: int = 700):
    return {
        "short_ttft_ms": {"p50": p99_ms / 2, "p99": p99_ms}, "short_tpot_ms": {"p50": 50.0, "p99": 60.0},
        "all": {"total_token_throughput_tps": tps, "output_token_throughput_tps": tps / 10,
                "succeeded": 10, "requests": 10},
        "shed": shed or {},
        "scenarios": {"chat": {"prompt_tokens": short_tokens}, "batch": {"prompt_tokens": long_tokens}},
    }


@pytest.mark.parametrize(
    ("alone", "split", "shared", "split_tps", "overload_shed", "failed"),
    [
        (300, 400, 1500, 95, {"batch": 5}, set()),
        (300, 500, 1500, 95, {"batch": 5}, {"mixed_within_1.5x_of_alone"}),
        (300, 400, 1100, 95, {"batch": 5}, {"3x_better_than_shared"}),
        (300, 400, 1500, 85, {"batch": 5}, {"throughput_at_least_0.9x"}),
        (300, 400, 1500, 95, {"batch": 5, "chat": 1}, {"no_real_time_shed_while_batch_shed"}),
        (300, 400, 1500, 95, {}, {"no_real_time_shed_while_batch_shed"}),  # nothing shed proves nothing
    ],
)
def test_targets(alone, split, shared, split_tps, overload_shed, failed):
    phases = {"split_short_only": _phase(alone, 40), "split_mixed": _phase(split, split_tps),
              "shared_mixed": _phase(shared, 100), "split_overload": _phase(9999, 1, overload_shed)}
    result = compare(phases, "chat")
    assert {name for name, met in result["targets"].items() if not met} == failed
    assert result["meets_targets"] == (not failed)
    assert result["ratios"]["long_prompt_token_share"] == pytest.approx(0.7)
    text = markdown({**result, "phases": phases})
    assert f"{split / alone:.2f}" in text and f"{shared / split:.2f}" in text and "70%" in text


def test_the_shared_baseline_on_a_gpu_holds_both_shares_of_the_card():
    split = TrilemmaConfig.from_yaml(DEFAULT_CONFIG_PATH.parent / "gpu-h200.yaml")
    pool = shared_pool_config(split).pools["shared"]
    assert pool.gpu_fraction == pytest.approx(0.9)
    assert pool.engine_kwargs["gpu_memory_utilization"] == pytest.approx(0.84)
    assert pool.max_num_seqs == 160 and pool.max_model_len == 8192
    assert "VLLM_RAY_PER_WORKER_GPUS" not in pool.env  # derived from gpu_fraction when deployed


def test_the_warm_up_is_the_schedules_start_with_a_long_document_first():
    from bench.isolation import warmup_load

    load = mixed_load(100, rate_rps=2.0, long_fraction=0.1, long_words=300,
                      short_scenario="chat", long_scenario="batch", seed=3)
    warm = warmup_load(load, 10.0)
    assert warm.prompts[0].kind == "long" and warm.arrivals[0] == 0.0
    assert max(warm.arrivals) <= 10.0 and len(warm.prompts) == 1 + sum(t <= 10.0 for t in load.arrivals)


def test_one_arm_alone_reports_what_is_missing_and_the_other_arm_completes_it():
    split_only = {"split_short_only": _phase(300, 40), "split_mixed": _phase(400, 95)}
    partial = compare(split_only, "chat")
    assert partial["meets_targets"] is None and "no shared_mixed yet" in partial["incomplete"]
    assert "Ratios: no shared_mixed yet" in markdown({**partial, "phases": split_only})
    complete = compare({**split_only, "shared_mixed": _phase(1500, 100)}, "chat")
    assert complete["meets_targets"] is True
