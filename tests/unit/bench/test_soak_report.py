"""The soak's arithmetic: its schedule, memory growth over the last stretch, and its verdicts."""

from __future__ import annotations

from collections import Counter

import pytest
from pydantic import ValidationError

from bench.metrics import RequestRecord
from bench.soak.mixed_load import SoakPlan, schedule
from bench.soak.process_memory import Sample, growth_over
from bench.soak.run import markdown, summarize

MIB = 2**20


def _samples(series: dict[str, list[int]], every_s: float = 60) -> list[Sample]:
    length = max(len(values) for values in series.values())
    return [Sample(i * every_s, {name: values[i] * MIB for name, values in series.items() if i < len(values)},
                   engines=2, orphaned_engines=0) for i in range(length)]


def test_the_schedule_mixes_every_kind_at_its_rate_in_time_order():
    plan = SoakPlan(minutes=10, chat_rps=0.5, long_rps=0.05, batch_rps=0.1, window_min=5)
    prompts, times = schedule(plan)
    assert times == sorted(times) and times[-1] <= 600
    assert Counter((p.scenario, p.kind) for p in prompts) == {("chat", "short"): 300, ("chat", "long"): 30,
                                                              ("batch", "short"): 60}


def test_growth_compares_medians_at_both_ends_of_the_window_for_processes_alive_through_it():
    samples = _samples({
        "raylet 1": [100] * 10 + [100, 101, 100, 100, 100, 104, 100, 100, 101, 101],  # one spike: noise
        "ServeReplica:trilemma:router 2": [200] * 10 + [200, 200, 200, 205, 210, 215, 220, 220, 220, 220],
        "VLLM::EngineCore 3": [300] * 12,  # replaced inside the window: no window to compare
    })
    growth = {g.process: g for g in growth_over(samples, window_s=9 * 60)}
    assert set(growth) == {"raylet 1", "ServeReplica:trilemma:router 2"}
    assert growth["raylet 1"].fraction == pytest.approx(0.01)
    assert growth["ServeReplica:trilemma:router 2"].fraction == pytest.approx(0.10)


def test_verdicts_name_what_was_missed():
    plan = SoakPlan(minutes=10, window_min=5)
    records = [RequestRecord("chat", 1, 1.0, pool="short"),
               RequestRecord("chat", 2, 2.0, pool="short", error="http 429: the short pool is full")]
    samples = _samples({"raylet 1": [100] * 11, "ServeReplica:trilemma:router 2": [100] * 8 + [110] * 3})
    result = summarize(plan, records, Counter({"200": 5}), samples, {"short": 0, "long": 0}, 600)
    assert result.verdicts == {
        "no error the load did not ask for": False,
        "RSS growth under 5% per process over the last 5 min": False,
        "engine processes flat, none orphaned": True,
        "nothing held once the load is over": True,
    }
    assert result.by_kind["chat on short"] == {"sent": 2, "ok": 1, "e2e_p50_s": 1.0, "e2e_p99_s": 1.0}
    table = markdown(result, {"name": "soak-test", "command": "trilemma bench soak", "url": "u"})
    assert "| RSS growth under 5% per process over the last 5 min | **no** |" in table
    assert "| ServeReplica:trilemma:router 2 | 100 | 110 | +10.0% |" in table


def test_a_window_longer_than_the_run_is_refused():
    with pytest.raises(ValidationError, match="longer than the run"):
        SoakPlan(minutes=10, window_min=20)
