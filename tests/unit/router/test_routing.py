"""Routing decisions, table-driven: length class, fit, cheapest, fallbacks."""

from __future__ import annotations

import pytest

from core.config import PoolConfig, RoutingConfig
from router.routing import ContextLengthPolicy, RouteRequest, RoutingPolicy


def pool(role, max_model_len):
    return PoolConfig(role=role, max_model_len=max_model_len, max_num_seqs=4)


POOLS = {"short": pool("short", 2048), "long": pool("long", 8192)}
# $/hour of one replica per pool, as the price catalog resolves them.
POLICY = ContextLengthPolicy(RoutingConfig(short_context_threshold_tokens=1024), {"short": 2.0, "long": 1.0})


@pytest.mark.parametrize(
    "prompt, max_tokens, cheapest, pools, expected_pool, reason_part",
    [
        (10, 128, False, POOLS, "short", "= 138 <= threshold 1024: short pool"),
        (896, 128, False, POOLS, "short", "= 1024 <= threshold"),  # at the threshold: short
        (897, 128, False, POOLS, "long", "= 1025 > threshold 1024: long pool"),
        (5000, 100, False, POOLS, "long", "long pool"),
        (10, 128, True, POOLS, "long", "cheapest pool that fits ($1/h)"),
        (1500, 100, False, {"short": POOLS["short"]}, "short", "no long pool for this scenario"),
        (10, 10, False, {"long": POOLS["long"]}, "long", "no short pool for this scenario"),
        (4000, 100, True, {"short": POOLS["short"], "long": POOLS["long"]}, "long", "cheapest"),
    ],
)
def test_context_length_policy(prompt, max_tokens, cheapest, pools, expected_pool, reason_part):
    decision = POLICY.choose(RouteRequest(prompt, max_tokens, "chat", cheapest), pools)
    assert decision.pool == expected_pool
    assert reason_part in decision.reason


def test_nothing_fits_returns_none():
    assert POLICY.choose(RouteRequest(3000, 100, "chat"), {"short": POOLS["short"]}) is None
    assert POLICY.choose(RouteRequest(10, 10, "chat"), {}) is None


def test_cheapest_breaks_price_ties_by_length_class():
    pools = {"a-long": pool("long", 8192), "b-short": pool("short", 2048)}
    policy = ContextLengthPolicy(RoutingConfig(), {"a-long": 1.0, "b-short": 1.0})
    decision = policy.choose(RouteRequest(10, 10, "cost", prefer_cheapest=True), pools)
    assert decision.pool == "b-short"


def test_policies_are_registered_by_name():
    assert isinstance(RoutingPolicy.from_config(RoutingConfig(), {}), ContextLengthPolicy)
    with pytest.raises(ValueError, match="unknown routing policy 'fifo'; known: \\['context_length'"):
        RoutingPolicy.from_config(RoutingConfig(policy="fifo"), {})
