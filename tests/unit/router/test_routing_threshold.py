"""The router's side of the traffic split: the threshold it reads from the control board, and
the context-length policy routing by it with a reason that says so."""

from __future__ import annotations

import asyncio
import logging

import pytest

from autoscaling.control_board import MemoryControlBoard, split_key
from core.config import DEFAULT_CONFIG_PATH, PoolConfig, RoutingConfig, TrilemmaConfig
from router.board_watch import REFRESH_S
from router.pool_choice import PoolChooser, PoolRequest
from router.pool_health import PoolHealth
from router.routing import ContextLengthPolicy, RouteRequest
from router.routing_threshold import ThresholdInForce, threshold_watch
from tests.support import ManualClock

KEY = split_key("app")


async def _settle() -> None:
    await asyncio.sleep(0.05)  # the watch reads the board in a thread


async def test_the_router_keeps_the_configured_threshold_until_the_split_sets_one():
    board, clock = MemoryControlBoard(), ManualClock()
    watch = threshold_watch(KEY, 1024, board, clock)
    assert watch.current() == ThresholdInForce(1024)  # nothing read yet; the first read starts
    await _settle()
    assert watch.current() == ThresholdInForce(1024)  # the board holds nothing: still the config's
    board.put(KEY, {"threshold": 512, "reason": "short 0.95, long 0.20: threshold 1024 -> 512", "state": {}})
    clock.now += REFRESH_S - 0.1
    watch.current()
    await _settle()
    assert watch.current().tokens == 1024  # the view is not stale yet: no new read
    clock.now += 0.1
    watch.current()
    await _settle()
    assert watch.current() == ThresholdInForce(512, "short 0.95, long 0.20: threshold 1024 -> 512", set_by_split=True)


@pytest.mark.parametrize(
    "value",
    [{}, {"reason": "x"}, {"threshold": None}, {"threshold": "512"}, {"threshold": 512.5}, {"threshold": True},
     {"threshold": 0}, {"threshold": -512}, [512], "512", 512],
)
async def test_a_malformed_threshold_on_the_board_leaves_the_configured_one(value):
    board, clock = MemoryControlBoard(), ManualClock()
    board.put(KEY, {"threshold": 724, "reason": "moved"})
    watch = threshold_watch(KEY, 1024, board, clock)
    watch.current()
    await _settle()
    assert watch.current().tokens == 724
    board.put(KEY, value)
    clock.now += REFRESH_S
    watch.current()
    await _settle()
    assert watch.current() == ThresholdInForce(1024)


async def test_a_board_out_of_reach_keeps_the_last_threshold_read():
    class FlakyBoard(MemoryControlBoard):
        down = False

        def get(self, key):
            if self.down:
                raise ConnectionError("GCS unreachable")
            return super().get(key)

    board, clock = FlakyBoard(), ManualClock()
    board.put(KEY, {"threshold": 724, "reason": "moved"})
    watch = threshold_watch(KEY, 1024, board, clock)
    watch.current()
    await _settle()
    board.down = True
    clock.now += REFRESH_S
    watch.current()
    await _settle()
    assert watch.current() == ThresholdInForce(724, "moved", set_by_split=True)


async def test_a_change_of_threshold_is_logged_with_the_splits_reason(caplog):
    board, clock = MemoryControlBoard(), ManualClock()
    board.put(KEY, {"threshold": 512, "reason": "short overloaded"})
    watch = threshold_watch(KEY, 1024, board, clock)
    with caplog.at_level(logging.INFO, logger="ray.serve"):
        watch.current()
        await _settle()
        board.put(KEY, {"threshold": 512, "reason": "balanced"})  # the same threshold: no line
        clock.now += REFRESH_S
        watch.current()
        await _settle()
    assert [r.getMessage() for r in caplog.records if "routing threshold" in r.getMessage()] == [
        "routing threshold 1024 -> 512 tokens: short overloaded"]


POOLS = {"short": PoolConfig(role="short", max_model_len=2048, max_num_seqs=4),
         "long": PoolConfig(role="long", max_model_len=8192, max_num_seqs=4)}
POLICY = ContextLengthPolicy(RoutingConfig(short_context_threshold_tokens=1024), {"short": 2.0, "long": 1.0})


@pytest.mark.parametrize(
    ("prompt", "threshold", "pool", "reason"),
    [
        (600, None, "short", "prompt 600 + max_tokens 100 = 700 <= threshold 1024: short pool"),
        (600, 512, "long", "prompt 600 + max_tokens 100 = 700 > traffic split threshold 512: long pool"),
        (400, 512, "short", "= 500 <= traffic split threshold 512: short pool"),
        (412, 512, "short", "= 512 <= traffic split threshold 512"),  # at the threshold: short
        (1200, None, "long", "= 1300 > threshold 1024: long pool"),
        (1200, 1448, "short", "= 1300 <= traffic split threshold 1448: short pool"),
        (1200, 1024, "long", "= 1300 > traffic split threshold 1024"),  # the split's, even at the config's value
    ],
)
def test_the_context_length_policy_routes_by_the_splits_threshold_when_given(prompt, threshold, pool, reason):
    decision = POLICY.choose(RouteRequest(prompt, 100, "chat", threshold_tokens=threshold), POOLS)
    assert decision.pool == pool and reason in decision.reason
    assert ("traffic split" in decision.reason) is (threshold is not None)


def test_the_pool_chooser_hands_the_threshold_to_the_policy():
    config = TrilemmaConfig.from_yaml(DEFAULT_CONFIG_PATH)
    chooser = PoolChooser(config, ContextLengthPolicy(config.routing, {"short": 1.0, "long": 1.0}),
                          PoolHealth(config.pools))
    request = dict(scenario_name="chat", scenario=config.scenarios["chat"], model=config.default_model,
                   prompt_tokens=600, max_tokens=100)
    assert chooser.choose(PoolRequest(**request)).pool == "short"
    moved = chooser.choose(PoolRequest(**request, threshold_tokens=512))
    assert moved.pool == "long" and "traffic split threshold 512" in moved.reason
