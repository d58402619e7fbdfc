"""The sweep's knobs, SLO checks and knee, table-driven."""

from __future__ import annotations

import pytest

from bench.metrics import RequestRecord, Slo
from bench.sweep import Knob, SweepError, find_knee, merge_rounds, parse_values, run_sweep, slo_check
from core.config import DEFAULT_CONFIG_PATH, ConfigError, TrilemmaConfig


@pytest.fixture(scope="module")
def config():
    return TrilemmaConfig.from_yaml(DEFAULT_CONFIG_PATH)


@pytest.mark.parametrize("path, value, read", [
    ("pools.short.max_num_seqs", 2, lambda c: c.pools["short"].max_num_seqs),
    ("pools.long.replicas", 3, lambda c: c.pools["long"].replicas),
    ("routing.short_context_threshold_tokens", 512, lambda c: c.routing.short_context_threshold_tokens),
    ("pools.short.engine_kwargs.enable_prefix_caching", False,
     lambda c: c.pools["short"].engine_kwargs.get("enable_prefix_caching")),
])
def test_a_knob_sets_one_value_and_leaves_the_rest(config, path, value, read):
    changed = Knob(path).apply(config, value)
    assert read(changed) == value
    assert changed.model.name == config.model.name and read(config) != value


@pytest.mark.parametrize("path, value, error, message", [
    ("pools.medium.max_num_seqs", 2, ConfigError, "no 'pools.medium'"),
    ("pools.short.max_num_seq", 2, ConfigError, "max_num_seq"),
    ("pools.short.max_num_seqs", 0, ConfigError, "pools.short.max_num_seqs"),
    ("app_name.x", 1, ConfigError, "is a value"),
])
def test_a_bad_knob_or_value_is_refused_by_name(config, path, value, error, message):
    with pytest.raises(error, match=message):
        Knob(path).apply(config, value)


def test_values_are_read_as_yaml():
    assert parse_values("1, 2,4.5,false") == [1, 2, 4.5, False]
    with pytest.raises(SweepError):
        parse_values(" , ")


def rec(ttft, out=11, scenario="chat", error=None):
    """A request whose decode took 1 s: TPOT 100 ms."""
    return RequestRecord(scenario=scenario, started_s=0, e2e_s=(ttft or 0) + 1.0, ttft_s=ttft, completion_tokens=out,
                         prompt_tokens=5, error=error)


def test_slo_check_judges_p99_per_scenario_and_counts_failures():
    slos = {"chat": Slo(ttft_s=0.5, tpot_s=0.2)}
    fast = [rec(0.1) for _ in range(98)]
    assert slo_check(fast + [rec(0.1), rec(30.0)], slos) == []     # one outlier in 100 is under p99
    misses = slo_check(fast + [rec(30.0), rec(30.0)], slos)        # two are not
    assert misses == ["chat TTFT p99 30000 ms > 500 ms"]
    assert slo_check(fast + [rec(None, error="http 503")], slos) == ["1 requests failed"]
    assert slo_check([rec(9.0, scenario="batch")], slos) == []   # batch has no SLO


def setting(value, merit, misses=(), per_usd=True, ttft_p99=1000.0):
    summary = {"goodput_rps": merit, "good_requests_per_usd": merit * 10 if per_usd else None,
               "ttft_ms": {"p99": ttft_p99}}
    return {"value": value, "summary": summary, "slo_misses": list(misses)}


@pytest.mark.parametrize("settings, knee", [
    ([setting(1, 1.0), setting(2, 3.0), setting(4, 5.0, ["p99 too high"])], 2),
    ([setting(1, 1.0), setting(2, 0.5)], 1),
    ([setting(1, 1.0, ["failed"]), setting(2, 1.0, ["failed"])], None),
    ([setting(1, 1.0, per_usd=False), setting(8, 2.0, per_usd=False)], 8),
    ([setting(4, 2.0, ttft_p99=900.0), setting(8, 2.0, ttft_p99=400.0)], 8),   # a tie: lower tail wins
])
def test_the_knee_is_the_best_goodput_per_dollar_within_slo(settings, knee):
    assert find_knee(settings)["value"] == knee


def test_without_a_knee_the_nearest_setting_is_named():
    knee = find_knee([setting(4, 1.0, ["TTFT p99 6719 ms > 3000 ms"]), setting(8, 3.0, ["TTFT p99 3026 ms > 3000 ms"])])
    assert knee["value"] is None
    assert knee["reason"].endswith("the most per $ was 8 (TTFT p99 3026 ms > 3000 ms)")


def test_merged_rounds_pool_records_and_pool_windows():
    def point(ttfts, duration, busy):
        records = [rec(t).to_dict() for t in ttfts]
        pools = {"short": {"replicas": 1, "busy_replica_s": busy, "replica_s": duration,
                           "busy_usd": busy / 1000, "idle_usd": (duration - busy) / 1000, "busy_fraction": 0}}
        return {"summary": {"duration_s": duration, "pools": pools}, "records": records}

    merged = merge_rounds([point([0.1, 0.2], 10, 5), point([0.3], 10, 10)], {})
    assert merged["requests"] == 3 and merged["request_throughput_rps"] == pytest.approx(3 / 20)
    assert merged["pools"]["short"]["busy_fraction"] == pytest.approx(0.75)
    assert merged["provisioned_usd"] == pytest.approx(0.020)


def test_run_sweep_validates_every_setting_before_measuring(config):
    measured = []
    with pytest.raises(ConfigError):
        run_sweep(config, Knob("pools.short.max_num_seqs"), [4, -1], measured.append, {})
    assert measured == []
