"""The autoscaler's policies and its control loop, on synthetic pool signals (table-driven)."""

from __future__ import annotations

import pytest

from autoscaling.autoscaler import Autoscaler
from autoscaling.bounds import PoolBounds, pool_bounds, shrink_order
from autoscaling.signals import PoolSignals
from autoscaling.state import AutoscalerState
from core.config import DEFAULT_CONFIG_PATH, AutoscalingConfig, TrilemmaConfig

SHORT = PoolBounds(min_replicas=1, max_replicas=4, slo_ttft_s=0.5, slo_tpot_s=0.1)
LONG = PoolBounds(min_replicas=0, max_replicas=2, slo_ttft_s=5.0, idle_to_zero_after_s=300)
BOUNDS = {"short": SHORT, "long": LONG}
# Immediate decisions, so that one period shows a policy's effect.
EAGER = AutoscalingConfig(up_after_periods=1, down_after_periods=1, up_cooldown_s=0, down_cooldown_s=0)


def _signals(pool="short", replicas=1, **figures) -> PoolSignals:
    defaults = dict(ttft_p99_s=0.1, tpot_p99_s=0.02, utilization=0.5, requests_per_s=2.0, waiting=0.0,
                    usd_per_hour=1.0)
    return PoolSignals(pool=pool, replicas=replicas, **{**defaults, **figures})


def _step(signals: list[PoolSignals], config=EAGER, state=None, now=1000.0):
    autoscaler = Autoscaler(config, BOUNDS, ["long", "short"], state=state)
    return autoscaler.step({s.pool: s for s in signals}, now), autoscaler


@pytest.mark.parametrize(
    ("figures", "replicas", "target", "policy", "reason"),
    [
        # Latency: over 80% of the SLO grows the pool in proportion, at least by one.
        ({"ttft_p99_s": 0.45}, 1, 2, "latency", "TTFT p99 450 ms is 90% of its 500 ms SLO"),
        ({"ttft_p99_s": 1.2}, 1, 3, "latency", "240%"),  # 2.4 / 0.8: three replicas' worth
        ({"ttft_p99_s": 1.2}, 2, 4, "latency", "TTFT"),
        ({"tpot_p99_s": 0.3}, 2, 4, "latency", "300% of its 100 ms SLO (scale up past 80%); capped at max_replicas 4"),
        ({"ttft_p99_s": 0.39}, 1, 1, "hold", "within SLOs"),
        # Two of three replicas still starting: one serving at 90% of the SLO asks for two, so hold.
        ({"ttft_p99_s": 0.45, "serving": 1}, 3, 3, "latency", "2 replica(s) still starting cover it: holding"),
        # ... at 240% it asks for three serving per one: more than those starting.
        ({"ttft_p99_s": 1.2, "serving": 1}, 2, 3, "latency", "240%"),
        # Batch slots mostly empty while busy all the time: the default measure sees the slack.
        ({"utilization": 0.9, "batch_occupancy": 0.1}, 3, 2, "utilization",
         "engines' batch slots 10% in use (busy 90% of the time), under the 20% floor"),
        # Utilization: idle engines give a replica back, only while latency is well inside the SLO.
        ({"utilization": 0.1}, 3, 2, "utilization", "engines busy 10% of the time, under the 20% floor"),
        ({"utilization": 0.1, "ttft_p99_s": 0.3}, 3, 3, "utilization", "but TTFT p99 300 ms is 60% of its SLO (over 40%): holding"),
        ({"utilization": 0.1}, 1, 1, "hold", "within SLOs"),  # min_replicas
        # Missing metrics: hold.
        ({"ttft_p99_s": None, "tpot_p99_s": None, "utilization": None}, 2, 2, "hold", "no metrics from pool short"),
        # Outside the bounds: back inside at once.
        ({}, 6, 4, "bounds", "outside min/max replicas"),
    ],
)
def test_one_pool_one_period(figures, replicas, target, policy, reason):
    step, _ = _step([_signals(replicas=replicas, **figures)])
    decision = step.decisions["short"]
    assert (decision.target, decision.policy) == (target, policy), decision.reason
    assert reason in decision.reason


def test_an_idle_pool_allowed_zero_goes_after_its_delay_and_comes_back_on_demand():
    idle = _signals("long", replicas=1, requests_per_s=0.0, utilization=0.0, ttft_p99_s=None)
    state = AutoscalerState()
    step, _ = _step([idle], state=state, now=1000.0)
    assert step.decisions["long"].target == 1  # idle clock starts
    step, _ = _step([idle], state=state, now=1299.0)
    assert step.decisions["long"].target == 1
    step, _ = _step([idle], state=state, now=1300.0)
    assert step.decisions["long"].target == 0 and "no request for 300 s" in step.decisions["long"].reason
    waiting = _signals("long", replicas=0, requests_per_s=0.0, waiting=3.0, ttft_p99_s=None, utilization=None)
    step, _ = _step([waiting], state=state, now=1400.0)
    assert step.decisions["long"].target == 1 and "no replica" in step.decisions["long"].reason


def test_an_idle_pool_whose_engine_sleeps_stays_asleep_instead_of_going_to_zero():
    from dataclasses import replace

    idle = _signals("long", replicas=1, requests_per_s=0.0, utilization=0.0, ttft_p99_s=None)
    state = AutoscalerState()
    bounds = {**BOUNDS, "long": replace(LONG, sleeps_when_idle=True)}
    for now in (1000.0, 1300.0, 5000.0):
        step = Autoscaler(EAGER, bounds, ["long", "short"], state=state).step({"long": idle}, now)
    decision = step.decisions["long"]
    assert decision.target == 1 and "sleeps instead of going" in decision.reason


@pytest.mark.parametrize(
    ("budget", "short_p99", "targets", "cost_profile"),
    [
        (None, 1.2, {"short": 4, "long": 2}, False),  # no budget: latency has its way
        (10.0, 1.2, {"short": 4, "long": 2}, False),
        # $5/h: latency wants short 4 ($4) + long 2 ($2); long gives up first, to 1.
        (5.0, 1.2, {"short": 4, "long": 1}, True),
        # $3/h: long goes to its min of 0, then short down to 3.
        (3.0, 1.2, {"short": 3, "long": 0}, True),
        # $0.5/h: both at min and still over: held there, the cost profile on.
        (0.5, 0.1, {"short": 1, "long": 0}, True),
    ],
)
def test_the_budget_trims_the_plan_lowest_pools_first(budget, short_p99, targets, cost_profile):
    config = EAGER.model_copy(update={"budget_usd_per_hour": budget})
    step, _ = _step([_signals("short", replicas=2, ttft_p99_s=short_p99),
                     _signals("long", replicas=2, ttft_p99_s=0.1)], config=config)
    assert step.targets() == targets
    assert step.cost_profile is cost_profile
    if cost_profile:
        assert "budget" in step.decisions["long"].reason


def test_hysteresis_waits_for_streaks_and_cooldowns():
    config = AutoscalingConfig(up_after_periods=2, down_after_periods=3, up_cooldown_s=10, down_cooldown_s=60)
    state = AutoscalerState()
    hot = _signals(replicas=1, ttft_p99_s=0.45)
    step, _ = _step([hot], config=config, state=state, now=0)
    assert step.decisions["short"].target == 1 and "asked 1 of 2 periods" in step.decisions["short"].reason
    step, _ = _step([hot], config=config, state=state, now=5)
    assert step.decisions["short"].target == 2  # second period in a row: up
    hot2 = _signals(replicas=2, ttft_p99_s=0.45)
    _step([hot2], config=config, state=state, now=8)
    step, _ = _step([hot2], config=config, state=state, now=9)
    assert step.decisions["short"].target == 2 and "cooling down: 4 of 10 s" in step.decisions["short"].reason
    step, _ = _step([hot2], config=config, state=state, now=15)
    assert step.decisions["short"].target == 3
    # A quiet period breaks a streak.
    cold = _signals(replicas=3, utilization=0.05)
    for now in (100, 105):
        step, _ = _step([cold], config=config, state=state, now=now)
        assert step.decisions["short"].target == 3
    _step([_signals(replicas=3)], config=config, state=state, now=110)
    for now in (115, 120):
        assert _step([cold], config=config, state=state, now=now)[0].decisions["short"].target == 3
    assert _step([cold], config=config, state=state, now=125)[0].decisions["short"].target == 2


def test_state_survives_a_restart_as_plain_data():
    state = AutoscalerState()
    _step([_signals(replicas=1, ttft_p99_s=0.45)], config=AutoscalingConfig(up_after_periods=2), state=state)
    restored = AutoscalerState.from_dict(state.to_dict())
    assert restored == state and restored.pool("short").streak_periods == 1
    step, _ = _step([_signals(replicas=1, ttft_p99_s=0.45)], config=AutoscalingConfig(up_after_periods=2),
                    state=restored, now=1005)
    assert step.decisions["short"].target == 2


def test_signals_from_replica_reports_take_the_worst_tail_and_sum_the_load():
    signals = PoolSignals.from_replica_stats("short", 2, [
        {"ttft_p99_s": 0.2, "utilization": 0.4, "requests_per_s": 1.0, "usd_per_hour": 1.0},
        {"ttft_p99_s": 0.5, "utilization": 0.6, "requests_per_s": 2.0, "usd_per_hour": 1.0},
    ])
    assert (signals.ttft_p99_s, signals.utilization, signals.requests_per_s) == (0.5, 0.5, 3.0)
    assert signals.tpot_p99_s is None  # no replica reported it


def test_bounds_and_shrink_order_come_from_the_config():
    raw = TrilemmaConfig.from_yaml(DEFAULT_CONFIG_PATH).model_dump()
    raw["scenarios"]["chat"].update(slo_ttft_ms=500, slo_tpot_ms=100)
    raw["scenarios"]["batch"].update(slo_ttft_ms=20000)
    raw["autoscaling"]["pools"] = {"short": {"min_replicas": 1, "max_replicas": 3}}
    config = TrilemmaConfig.from_dict(raw)
    bounds = pool_bounds(config)
    assert bounds["short"] == PoolBounds(1, 3, slo_ttft_s=0.5, slo_tpot_s=0.1, max_in_engine=16)
    assert (bounds["long"].min_replicas, bounds["long"].max_replicas) == (1, 1)  # unlisted: fixed
    assert shrink_order(config) == ["long", "short"]


def test_only_listed_pools_of_an_enabled_config_get_rays_autoscaling_with_our_policy():
    from autoscaling.serve_config import POLICY_PATH, serve_autoscaling_config

    raw = TrilemmaConfig.from_yaml(DEFAULT_CONFIG_PATH).model_dump()
    raw["autoscaling"]["pools"] = {"short": {"min_replicas": 1, "max_replicas": 3}}
    prices = {"short": 0.05, "long": 0.05}
    assert serve_autoscaling_config(TrilemmaConfig.from_dict(raw), "short", prices) is None  # not enabled
    raw["autoscaling"]["enabled"] = True
    config = TrilemmaConfig.from_dict(raw)
    assert serve_autoscaling_config(config, "long", prices) is None  # not listed: fixed replicas
    serve = serve_autoscaling_config(config, "short", prices)
    assert (serve["min_replicas"], serve["max_replicas"], serve["initial_replicas"]) == (1, 3, 1)
    assert serve["policy"]["policy_function"] == POLICY_PATH
    assert serve["policy"]["policy_kwargs"]["pool"] == "short"
    assert TrilemmaConfig.from_dict(serve["policy"]["policy_kwargs"]["config"]) == config


def test_a_pool_whose_engine_is_busy_is_not_idle_whatever_its_counted_rate():
    busy = _signals("long", replicas=1, requests_per_s=0.0, utilization=0.6, ttft_p99_s=None)
    state = AutoscalerState()
    for now in (1000.0, 2000.0):
        step, _ = _step([busy], state=state, now=now)
        assert step.decisions["long"].target == 1
    assert state.pool("long").idle_since is None
