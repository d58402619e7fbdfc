"""The seed's run-time rules (engine concurrency, quiet scale-down, cost per request), the cost
profile at the router, and the Ray Serve policy's memory across a controller restart."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from autoscaling.autoscaler import Autoscaler
from autoscaling.bounds import PoolBounds
from autoscaling.control_board import (
    MemoryControlBoard,
    concurrency_key,
    cost_profile_key,
    decisions_key,
    state_key,
)
from autoscaling.serve_policy import PoolScalingPolicy
from autoscaling.signals import PoolSignals
from autoscaling.state import AutoscalerState
from core.autoscaling_config import ConcurrencyRule, CostProfileConfig
from core.config import DEFAULT_CONFIG_PATH, AutoscalingConfig, ConfigError, TrilemmaConfig
from router.cost_profile import CostProfileWatch, apply_cost_profile
from tests.support import ManualClock

EAGER = AutoscalingConfig(up_after_periods=1, down_after_periods=2, up_cooldown_s=0, down_cooldown_s=0)
RULE = ConcurrencyRule(ttft_p99_ms_above=1000, requests_per_s_above=2, step=4, max_in_engine=24)


def _signals(pool="short", replicas=1, **figures) -> PoolSignals:
    defaults = dict(ttft_p99_s=0.1, tpot_p99_s=0.02, utilization=0.5, requests_per_s=2.0, waiting=0.0,
                    usd_per_hour=1.0)
    return PoolSignals(pool=pool, replicas=replicas, **{**defaults, **figures})


def _autoscaler(config=EAGER, **bounds) -> Autoscaler:
    short = PoolBounds(min_replicas=1, max_replicas=4, slo_ttft_s=5.0, max_in_engine=16, **bounds)
    return Autoscaler(config, {"short": short}, ["short"])


@pytest.mark.parametrize(
    ("periods", "limits", "reason"),
    [
        # p99 above X at a rate above Y: one step a period, up to the ceiling.
        ([{"ttft_p99_s": 1.5, "requests_per_s": 3.0}] * 3, [20, 24, 24], "at the ceiling of 24"),
        # p99 high but the rate under Y: the rule stays out of it.
        ([{"ttft_p99_s": 1.5, "requests_per_s": 1.0}], [16], "not met"),
        # Raised, then calm for down_after_periods (2): one step back.
        ([{"ttft_p99_s": 1.5, "requests_per_s": 3.0}, {}, {}], [20, 20, 16], "giving engine slots back"),
        # No TTFT reported: hold.
        ([{"ttft_p99_s": None}], [16], "no TTFT"),
    ],
)
def test_the_concurrency_rule_steps_within_its_bounds(periods, limits, reason):
    autoscaler = _autoscaler(raise_concurrency=RULE)
    seen = []
    for now, figures in enumerate(periods):
        step = autoscaler.step({"short": _signals(**figures)}, float(now))
        seen.append(step.concurrency["short"].target)
    assert seen == limits
    assert reason in step.concurrency["short"].reason


def test_a_pool_without_the_rule_has_no_concurrency_decision():
    assert _autoscaler().step({"short": _signals(ttft_p99_s=9.0)}, 0.0).concurrency == {}


@pytest.mark.parametrize(("rate", "target"), [(0.5, 1), (3.0, 2)])
def test_low_utilization_scales_down_only_under_the_quiet_rate(rate, target):
    autoscaler = _autoscaler(config=EAGER.model_copy(update={"down_after_periods": 1}),
                             scale_down_below_requests_per_s=1.0)
    decision = autoscaler.step({"short": _signals(replicas=2, utilization=0.05, requests_per_s=rate)}, 0.0)
    assert decision.decisions["short"].target == target
    if target == 1:
        assert "at 0.50 req/s (under 1)" in decision.decisions["short"].reason


@pytest.mark.parametrize(
    ("rate", "in_force"),
    # 2 replicas x $1.80/h = $0.001/s; over 0.5 req/s that is $0.002 a request, over 4 req/s $0.00025.
    [(0.5, True), (4.0, False), (0.0, False)],
)
def test_the_cost_profile_comes_in_when_requests_cost_more_than_the_limit(rate, in_force):
    config = EAGER.model_copy(update={"cost_profile": CostProfileConfig(usd_per_request_above=0.001)})
    step = _autoscaler(config=config).step(
        {"short": _signals(replicas=2, usd_per_hour=1.8, requests_per_s=rate, utilization=0.9)}, 0.0)
    assert step.cost_profile is in_force
    if in_force:
        assert step.cost_profile_reason == "$0.002000 per request at 0.50 req/s, above the $0.001 limit"


def test_the_cost_profile_tightens_the_lower_classes_and_leaves_real_time_alone():
    config = TrilemmaConfig.from_yaml(DEFAULT_CONFIG_PATH)
    profile = CostProfileConfig(max_tokens_cap=64)
    chat, batch = config.scenarios["chat"], config.scenarios["batch"]
    assert apply_cost_profile(chat, profile) is chat
    cheaper = apply_cost_profile(batch, profile)
    assert (cheaper.max_tokens_cap, cheaper.prefer) == (64, "cheapest")
    assert cheaper.default_max_tokens <= 64


async def test_the_router_sees_the_profile_without_waiting_for_the_board():
    board, clock = MemoryControlBoard(), ManualClock()
    watch = CostProfileWatch("profile", board, clock=clock)
    assert not watch.current().in_force  # nothing read yet: off; the first read starts
    await asyncio.sleep(0.05)
    board.put("profile", {"in_force": True, "reason": "over budget"})
    assert not watch.current().in_force  # the view is not stale yet: no new read
    clock.now += 2.0
    watch.current()
    await asyncio.sleep(0.05)
    assert watch.current() == type(watch.current())(True, "over budget")


def _ctx(now: float, replicas: int, ttft: float, policy_state=None, rate=3.0) -> SimpleNamespace:
    stats = {"ttft_p99_s": ttft, "utilization": 0.6, "requests_per_s": rate, "usd_per_hour": 0.05}
    return SimpleNamespace(
        current_time=now, policy_state=policy_state, app_name="app", current_num_replicas=replicas,
        target_num_replicas=replicas, total_queued_requests=0.0,
        aggregated_metrics={key: {"replica-1": value} for key, value in stats.items()},
    )


def _policy_config() -> dict:
    raw = TrilemmaConfig.from_yaml(DEFAULT_CONFIG_PATH).model_dump(mode="json")
    raw["scenarios"]["chat"]["slo_ttft_ms"] = 2000
    raw["autoscaling"] = {
        "enabled": True, "period_s": 5, "up_after_periods": 2, "up_cooldown_s": 0,
        "cost_profile": {"usd_per_request_above": 0.000001},
        "pools": {"short": {"min_replicas": 1, "max_replicas": 4, "raise_concurrency": {
            "ttft_p99_ms_above": 1000, "requests_per_s_above": 1, "step": 2, "max_in_engine": 20}}},
    }
    return raw


def test_a_restarted_controller_resumes_the_policy_state_from_the_board():
    PoolScalingPolicy._fleets.clear()
    board = MemoryControlBoard()
    first = PoolScalingPolicy(_policy_config(), "short", {"short": 0.05}, board=board)
    target, state = first(_ctx(100.0, 1, ttft=1.8))  # 90% of the SLO: the first of two periods
    assert target == 1
    assert board.get(state_key("app", "short"))["pools"]["short"]["streak_periods"] == 1
    assert board.get(concurrency_key("app", "short"))["max_in_engine"] == 18
    assert board.get(cost_profile_key("app"))["in_force"] is True
    # The controller restarts: a new policy object, and Ray's policy_state is gone.
    PoolScalingPolicy._fleets.clear()
    second = PoolScalingPolicy(_policy_config(), "short", {"short": 0.05}, board=board)
    target, state = second(_ctx(105.0, 1, ttft=1.8, policy_state=None))
    assert target == 2  # the streak went on: the second period in a row
    assert board.get(concurrency_key("app", "short"))["max_in_engine"] == 20
    decisions = board.get(decisions_key("app", "short"))
    assert [d["target"] for d in decisions] == [1, 2]  # the explanation history survived too
    assert "engine concurrency" not in decisions[0]["reason"] and decisions[1]["concurrency"].startswith("18 -> 20")


def test_a_policy_decides_once_per_period():
    PoolScalingPolicy._fleets.clear()
    policy = PoolScalingPolicy(_policy_config(), "short", {"short": 0.05}, board=MemoryControlBoard())
    policy(_ctx(100.0, 1, ttft=1.8))
    target, _ = policy(_ctx(102.0, 1, ttft=9.0))  # within the period: the last target stands
    assert target == 1


@pytest.mark.parametrize(
    ("rule", "max_ongoing", "error"),
    [
        ({"max_in_engine": 8}, None, "max_in_engine (8) is below the pool's admission.max_in_engine (16)"),
        ({"max_in_engine": 64}, 60, "does not fit the pool's max_ongoing_requests (60); it takes 97"),
    ],
)
def test_a_concurrency_rule_must_fit_the_pool(rule, max_ongoing, error):
    raw = TrilemmaConfig.from_yaml(DEFAULT_CONFIG_PATH).model_dump(mode="json")
    raw["pools"]["short"]["max_ongoing_requests"] = max_ongoing
    raw["autoscaling"]["pools"] = {"short": {"raise_concurrency": {"ttft_p99_ms_above": 500, **rule}}}
    with pytest.raises(ConfigError, match=error.replace("(", r"\(").replace(")", r"\)")):
        TrilemmaConfig.from_dict(raw)


def test_rays_replica_limit_makes_room_for_the_concurrency_ceiling():
    raw = TrilemmaConfig.from_yaml(DEFAULT_CONFIG_PATH).model_dump(mode="json")
    raw["autoscaling"] = {"enabled": True, "pools": {"short": {"raise_concurrency": {
        "ttft_p99_ms_above": 500, "max_in_engine": 32}}}}
    config = TrilemmaConfig.from_dict(raw)
    pool = config.pools["short"]
    assert config.max_in_engine_ceiling("short") == 32
    assert config.ongoing_limit("short") == pool.ongoing_limit + 32 - pool.max_in_engine
    assert config.ongoing_limit("long") == config.pools["long"].ongoing_limit


def test_state_keeps_the_concurrency_and_the_profile_reason():
    state = AutoscalerState()
    state.pool("short").max_in_engine, state.cost_profile_reason = 20, "over budget"
    assert AutoscalerState.from_dict(state.to_dict()) == state
