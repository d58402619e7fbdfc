"""The traffic split (autoscaling.split), table-driven: its holds, where it moves the threshold
and why, replica moves at its bounds, hysteresis, state, config, and the Ray Serve policy that
shares it between the pools. The pools' size histograms come from recorded traffic: the public
Azure LLM conversation trace's sample, split at the threshold as the two pools would report it."""

from __future__ import annotations

import bisect
from types import SimpleNamespace

import pytest

from autoscaling.autoscaler import Autoscaler
from autoscaling.bounds import PoolBounds
from autoscaling.control_board import MemoryControlBoard, decisions_key, split_key
from autoscaling.policy import Fleet
from autoscaling.serve_policy import PoolScalingPolicy
from autoscaling.signals import PoolSignals
from autoscaling.state import AutoscalerState
from autoscaling.traffic_split import PoolLoad, SplitDecision, SplitReplicaPolicy, SplitState, TrafficSplit
from bench.replay.trace import read_trace
from core import wire
from core.autoscaling_config import TrafficSplitConfig
from core.config import CONFIG_DIR, DEFAULT_CONFIG_PATH, PROJECT_ROOT, AutoscalingConfig, ConfigError, TrilemmaConfig

EDGES = wire.SIZE_BUCKET_EDGES
BOUNDS = {"short": PoolBounds(1, 4, slo_ttft_s=0.5, slo_tpot_s=0.1), "long": PoolBounds(1, 4, slo_ttft_s=5.0)}
PLAN = {"short": 1, "long": 2}

# The recorded traffic: 200 requests over 61 s. Sizes are prompt + output tokens (the trace's
# output stands in for max_tokens), the work of a request its prompt and output tokens.
TRACE = read_trace(PROJECT_ROOT / "bench/replay/samples/azure-conv-sample.csv")
SIZES = [r.prompt_tokens + r.output_tokens for r in TRACE.requests]


def recorded(threshold: int) -> dict[str, dict[str, tuple[float, ...]]]:
    """What each pool would report of the trace with `threshold` in force, per size bucket."""
    pools = {pool: ([0.0] * len(wire.SIZE_REQUESTS_KEYS), [0.0] * len(wire.SIZE_TOKENS_KEYS))
             for pool in ("short", "long")}
    for size in SIZES:
        requests, tokens = pools["short" if size <= threshold else "long"]
        bucket = bisect.bisect_left(EDGES, size)
        requests[bucket] += 1 / TRACE.span_s
        tokens[bucket] += size / TRACE.span_s
    return {pool: {"size_requests_per_s": tuple(r), "size_tokens_per_s": tuple(t)} for pool, (r, t) in pools.items()}


def traced(pool: str, threshold: int = 1024, replicas: int = 1, **figures) -> PoolSignals:
    return PoolSignals(pool, replicas, **recorded(threshold)[pool], **figures)


def by_edge(figures: dict[int, float]) -> tuple[float, ...]:
    found = [0.0] * len(wire.SIZE_TOKENS_KEYS)
    for edge, value in figures.items():
        found[EDGES.index(edge)] = value
    return tuple(found)


def made(pool: str, load: float | None, work: dict[int, float], requests: dict[int, float] | None = None,
         replicas: int = 1) -> PoolSignals:
    """A pool with a hand-made histogram (tokens/s by bucket edge) and its batch occupancy as load."""
    return PoolSignals(pool, replicas, batch_occupancy=load, size_tokens_per_s=by_edge(work),
                       size_requests_per_s=by_edge(requests or {}))


def make_split(threshold: int = 1024, ceiling: int = 2048, state: SplitState | None = None,
               **config) -> TrafficSplit:
    settings = {"enabled": True, "after_periods": 1, "cooldown_s": 0.0, **config}
    return TrafficSplit(TrafficSplitConfig(**settings), "short", "long", routing_threshold=threshold,
                        ceiling=ceiling, max_num_seqs={"short": 8, "long": 4}, busy_measure="batch_occupancy",
                        period_s=5.0, state=state)


def decide(split: TrafficSplit, short: PoolSignals | None, long: PoolSignals | None, now: float = 0.0,
           plan: dict[str, int] = PLAN, bounds: dict[str, PoolBounds] = BOUNDS) -> SplitDecision:
    signals = {s.pool: s for s in (short, long) if s is not None}
    return split.decide(signals, bounds, plan, now)


# A short pool of 400 tokens/s (at 512, 724 and 1024) and a long one of 400 (at 2048).
SHORT_WORK = {512: 100.0, 724: 100.0, 1024: 200.0}
LONG_WORK = {2048: 400.0}


@pytest.mark.parametrize(
    ("short", "long", "reason"),
    [
        (made("short", 0.2, SHORT_WORK), made("long", 0.1, LONG_WORK),
         "both pools have room: short 0.20 (batch occupancy 0.20), long 0.10 (batch occupancy 0.10)"),
        (made("short", 0.8, SHORT_WORK), made("long", 0.65, LONG_WORK), "balanced within 0.2: short 0.80"),
        (made("short", 0.9, SHORT_WORK), None, "no figures from pool long"),
        (None, made("long", 0.9, LONG_WORK), "no figures from pool short"),
        (made("short", 0.9, SHORT_WORK), PoolSignals("long", 1), "a pool has reported no load yet"),
        (PoolSignals("short", 1, batch_occupancy=0.9), PoolSignals("long", 1, batch_occupancy=0.1),
         "short 0.90 (batch occupancy 0.90), long 0.10 (batch occupancy 0.10); the pools report no request sizes"),
        (made("short", 0.9, SHORT_WORK), PoolSignals("long", 1, batch_occupancy=0.1), "report no request sizes"),
    ],
)
def test_the_split_holds_and_says_why(short, long, reason):
    split = make_split(after_periods=2, state=SplitState(streak="lower", streak_periods=1))
    decision = decide(split, short, long)
    assert (decision.threshold, decision.previous, decision.replicas) == (1024, 1024, {})
    assert reason in decision.reason
    assert (split.state.streak, split.state.streak_periods) == ("hold", 0)  # a hold breaks a streak


@pytest.mark.parametrize(
    ("figures", "measure", "load", "said"),
    [
        ({"batch_occupancy": 0.6, "utilization": 0.9}, "batch_occupancy", 0.6, "batch occupancy 0.60"),
        ({"batch_occupancy": 0.6, "utilization": 0.9}, "busy_fraction", 0.9, "busy fraction 0.90"),
        ({"batch_occupancy": 0.3, "kv_cache_usage": 0.7}, "batch_occupancy", 0.7, "KV cache 0.70"),
        # 2 replicas serving of 3 decided: 24 requests for 2 x 8 slots.
        ({"running": 16.0, "waiting": 8.0, "serving": 2}, "batch_occupancy", 1.5, "24 requests for 16 batch slots"),
        ({"waiting": 4.0}, "batch_occupancy", 4 / 24, "4 requests for 24 batch slots"),  # serving unknown: replicas
        ({"batch_occupancy": 0.5, "ttft_p99_s": 0.75}, "batch_occupancy", 1.5, "TTFT p99 750 ms of 500 ms"),
        ({"tpot_p99_s": 0.05}, "batch_occupancy", 0.5, "TPOT p99 50 ms of 100 ms"),
        ({}, "batch_occupancy", None, None),
    ],
)
def test_a_pools_load_is_its_fullest_figure(figures, measure, load, said):
    found = PoolLoad.of(PoolSignals("short", 3, **figures), BOUNDS["short"], 8, measure)
    if load is None:
        assert found is None
    else:
        assert found.load == pytest.approx(load) and found.measure == said


@pytest.mark.parametrize(
    ("short", "long", "config", "ceiling", "threshold", "predicted"),
    [
        # Loads 0.9 / 0.3 on 400 / 400 tokens/s: 0.00225 and 0.00075 a token/s. At 724 the short
        # pool keeps 200 (0.45), the long gets 600 (0.45): even, where 512 leaves 0.225 / 0.525.
        (made("short", 0.9, SHORT_WORK), made("long", 0.3, LONG_WORK), {}, 2048, 724, "0.45 / 0.45"),
        # Most short work at 512: 512 gives 0.75 / 0.25 (gap 0.5), 724 0.875 / 0.225 (gap 0.65).
        (made("short", 1.0, {512: 300.0, 724: 50.0, 1024: 50.0}), made("long", 0.2, LONG_WORK), {}, 2048, 512,
         "0.75 / 0.25"),
        # ... but a step of at most 1.5 stops at 683 (1024 / 1.5): 512's bucket and 171/212 of
        # 724's (sizes spread evenly within a bucket), 340.3 tokens/s; the long pool 459.7.
        (made("short", 1.0, {512: 300.0, 724: 50.0, 1024: 50.0}), made("long", 0.2, LONG_WORK), {"max_step": 1.5},
         2048, 683, "0.85 / 0.23"),
        # ... and never under min_threshold_tokens (600: 512's bucket and 88/212 of 724's).
        (made("short", 1.0, {512: 300.0, 724: 50.0, 1024: 50.0}), made("long", 0.2, LONG_WORK),
         {"min_threshold_tokens": 600}, 2048, 600, "0.80 / 0.24"),
        # The long pool is the busy one: 1448 gives 0.30 / 0.50, 2048 0.40 / 0.
        (made("short", 0.2, {512: 400.0}), made("long", 1.0, {1448: 200.0, 2048: 200.0}), {}, 4096, 1448,
         "0.30 / 0.50"),
        # Most long work at 4096: a step of 4 would go there (0.40 / 0), but not past the short
        # pool's max_model_len nor max_threshold_tokens (2048: 0.25 / 0.75).
        (made("short", 0.2, {512: 400.0}), made("long", 1.0, {2048: 100.0, 4096: 300.0}), {"max_step": 4}, 8192,
         4096, "0.40 / 0.00"),
        (made("short", 0.2, {512: 400.0}), made("long", 1.0, {2048: 100.0, 4096: 300.0}), {"max_step": 4}, 2048,
         2048, "0.25 / 0.75"),
        (made("short", 0.2, {512: 400.0}), made("long", 1.0, {2048: 100.0, 4096: 300.0}),
         {"max_step": 4, "max_threshold_tokens": 2048}, 8192, 2048, "0.25 / 0.75"),
    ],
)
def test_the_threshold_goes_where_the_predicted_loads_are_closest(short, long, config, ceiling, threshold, predicted):
    split = make_split(ceiling=ceiling, **config)
    decision = decide(split, short, long)
    assert (decision.previous, decision.threshold) == (1024, threshold), decision.reason
    assert decision.reason.endswith(f"predicted {predicted}")
    assert split.threshold == split.state.threshold == threshold and decision.replicas == {}


def test_a_moves_reason_names_both_loads_both_thresholds_and_the_work_moved():
    short = made("short", 0.9, SHORT_WORK, requests={512: 1.0, 724: 0.5, 1024: 0.5})
    decision = decide(make_split(), short, made("long", 0.3, LONG_WORK, requests={2048: 0.25}))
    assert decision.reason == ("short 0.90 (batch occupancy 0.90), long 0.30 (batch occupancy 0.30): threshold "
                               "1024 -> 724 moves 0.50 req/s (200 tokens/s) to long; predicted 0.45 / 0.45")


def _tokens(low: float, high: float) -> float:
    return sum(size for size in SIZES if low < size <= high)


@pytest.mark.parametrize(
    "overload",
    [{"batch_occupancy": 0.95}, {"running": 8.0, "waiting": 8.0}, {"ttft_p99_s": 0.9}],
    ids=["batch-full", "queued", "ttft-over-slo"],
)
def test_recorded_traffic_an_overloaded_short_pool_gets_a_lower_threshold_after_the_streak(overload):
    split = make_split(after_periods=3)
    short, long = traced("short", **overload), traced("long", batch_occupancy=0.2)
    for now, asked in ((0.0, 1), (5.0, 2)):
        waiting = decide(split, short, long, now)
        assert not waiting.moved and f"asked {asked} of 3 periods" in waiting.reason
    decision = decide(split, short, long, 10.0)
    assert (decision.previous, decision.threshold) == (1024, 512)
    # Counted from the trace itself: the requests of 513 to 1024 tokens go long.
    moved = [size for size in SIZES if 512 < size <= 1024]
    load = PoolLoad.of(short, BOUNDS["short"], 8, "batch_occupancy").load
    predicted_short = load * _tokens(0, 512) / _tokens(0, 1024)
    predicted_long = 0.2 * _tokens(512, 1e9) / _tokens(1024, 1e9)
    assert (f"threshold 1024 -> 512 moves {len(moved) / TRACE.span_s:.2f} req/s "
            f"({sum(moved) / TRACE.span_s:.0f} tokens/s) to long; "
            f"predicted {predicted_short:.2f} / {predicted_long:.2f}") in decision.reason


@pytest.mark.parametrize(
    ("ceiling", "max_threshold", "threshold", "then"),
    [(2048, None, 2048, 2048), (4096, None, 2048, 4096), (2048, 1448, 1448, 1448), (1448, None, 1448, 1448)],
)
def test_recorded_traffic_an_overloaded_long_pool_gets_a_higher_threshold_within_its_bounds(ceiling, max_threshold,
                                                                                             threshold, then):
    split = make_split(ceiling=ceiling, max_threshold_tokens=max_threshold)
    decision = decide(split, traced("short", batch_occupancy=0.2), traced("long", ttft_p99_s=7.5))
    assert (decision.previous, decision.threshold) == (1024, threshold)
    moved = [size for size in SIZES if 1024 < size <= threshold]
    assert f"moves {len(moved) / TRACE.span_s:.2f} req/s ({sum(moved) / TRACE.span_s:.0f} tokens/s) to short" \
        in decision.reason
    # Still overloaded: up to the bound, and there the long pool gets a replica instead.
    again = decide(split, traced("short", threshold, batch_occupancy=0.2), traced("long", threshold, ttft_p99_s=7.5),
                   now=10.0)
    assert again.threshold == then
    if then == threshold:
        assert f"the threshold {threshold} is at its highest useful setting" in again.reason
        assert again.replicas == {"long": 3}


@pytest.mark.parametrize(
    ("threshold", "short_work", "reason"),
    [
        # Nothing between 512 and 1024: no lower threshold changes where a request goes.
        (1024, {256: 300.0}, "the threshold 1024 is at its lowest useful setting"),
        (256, {256: 300.0}, "the threshold 256 is at its lowest useful setting"),  # min_threshold_tokens
    ],
)
def test_where_no_threshold_moves_work_a_replica_moves_instead(threshold, short_work, reason):
    decision = decide(make_split(threshold), made("short", 0.95, short_work), made("long", 0.1, LONG_WORK),
                      plan={"short": 1, "long": 3})
    assert not decision.moved and reason in decision.reason
    assert decision.replicas == {"short": 2, "long": 2}
    assert decision.reason.endswith("; replicas short 1 -> 2, long 3 -> 2")


@pytest.mark.parametrize(
    ("long_load", "plan", "bounds", "config", "replicas", "reason"),
    [
        (0.1, {"short": 1, "long": 3}, BOUNDS, {}, {"short": 2, "long": 2}, "replicas short 1 -> 2, long 3 -> 2"),
        (0.1, {"short": 4, "long": 3}, BOUNDS, {}, {"long": 2}, "replicas long 3 -> 2"),  # short at its max
        (0.1, {"short": 1, "long": 1}, BOUNDS, {}, {"short": 2}, "replicas short 1 -> 2"),  # long at its min
        # Long at 0.5 on 2 replicas would be 1.0 on one: busier than short's 0.95 less the band.
        (0.5, {"short": 1, "long": 2}, BOUNDS, {}, {"short": 2}, "replicas short 1 -> 2"),
        # One replica allowed zero: its last replica stays (going to zero is the idle rule's).
        (0.1, {"short": 1, "long": 1}, {**BOUNDS, "long": PoolBounds(0, 4)}, {}, {"short": 2}, "short 1 -> 2"),
        (0.1, {"short": 4, "long": 1}, BOUNDS, {}, {}, "no replica can move (short at its max_replicas"),
        (0.1, {"short": 1, "long": 3}, BOUNDS, {"move_replicas": False}, {}, "move_replicas is off"),
    ],
)
def test_at_the_bound_a_replica_moves_from_the_idler_pool_to_the_busier(long_load, plan, bounds, config, replicas,
                                                                        reason):
    decision = decide(make_split(256, **config), made("short", 0.95, {256: 300.0}),
                      made("long", long_load, LONG_WORK), plan=plan, bounds=bounds)
    assert (decision.threshold, decision.replicas) == (256, replicas)
    assert "the threshold 256 is at its lowest useful setting" in decision.reason and reason in decision.reason


@pytest.mark.parametrize(
    ("asked", "plan", "expected"),
    [
        ({"short": 2, "long": 2}, {"short": 1, "long": 3}, {"short": 2, "long": 2}),
        ({"short": 2, "long": 2}, {"short": 3, "long": 3}, {"long": 2}),  # latency already grew short further
        ({"short": 2, "long": 2}, {"short": 1, "long": 1}, {"short": 2}),  # utilization already shrank long further
        ({}, {"short": 1, "long": 3}, {}),
    ],
)
def test_the_split_replica_policy_adds_the_split_moves_to_the_plan(asked, plan, expected):
    signals = {"short": PoolSignals("short", 1), "long": PoolSignals("long", 3)}
    fleet = Fleet(signals, BOUNDS, AutoscalingConfig(), ["long", "short"], 0.0,
                  split=SplitDecision(256, 256, "at its lowest useful setting", asked))
    decisions = SplitReplicaPolicy().decide(fleet, dict(plan), AutoscalerState())
    assert {d.pool: d.target for d in decisions} == expected
    assert all(d.policy == "split" and d.reason == "at its lowest useful setting" for d in decisions)
    assert SplitReplicaPolicy().decide(Fleet(signals, BOUNDS, AutoscalingConfig(), [], 0.0), plan,
                                       AutoscalerState()) == []


BUSY = (made("short", 0.9, SHORT_WORK), made("long", 0.3, LONG_WORK))
EVEN = (made("short", 0.5, SHORT_WORK), made("long", 0.5, LONG_WORK))


def test_a_move_waits_for_its_streak_and_a_hold_in_between_starts_it_over():
    split = make_split(after_periods=3)
    seen = [decide(split, *pools, now=5.0 * period).threshold
            for period, pools in enumerate([BUSY, BUSY, EVEN, BUSY, BUSY, BUSY])]
    assert seen == [1024, 1024, 1024, 1024, 1024, 724]


def test_a_move_waits_for_the_cooldown_after_the_last():
    split = make_split(cooldown_s=30.0)
    assert decide(split, *BUSY, now=0.0).threshold == 724
    at_724 = (made("short", 0.9, {512: 100.0, 724: 100.0}), made("long", 0.3, {1024: 200.0, 2048: 400.0}))
    waiting = decide(split, *at_724, now=5.0)
    assert not waiting.moved and "cooling down: 5 of 30 s since the last move" in waiting.reason
    assert "threshold 724 -> 512" in waiting.reason  # what it will do once cooled
    assert decide(split, *at_724, now=30.0).threshold == 512


def test_a_second_call_in_the_period_gets_the_first_decision_and_counts_once():
    split = make_split(after_periods=2)
    first = decide(split, *BUSY, now=100.0)
    assert decide(split, *EVEN, now=102.0) is first  # the other pool's policy, same period
    assert split.state.streak_periods == 1
    assert decide(split, *BUSY, now=105.0).threshold == 724  # the second period: moves


def test_the_split_state_is_plain_data_that_resumes_the_threshold():
    state = SplitState(threshold=724, streak="lower", streak_periods=2, last_move_at=10.0, decided_at=12.0)
    assert SplitState.from_dict(state.to_dict()) == state
    assert SplitState.from_dict({**state.to_dict(), "unknown": 1}) == state  # an older or newer board's keys
    assert SplitState.from_dict(None) == SplitState()
    assert make_split(state=SplitState.from_dict(state.to_dict())).threshold == 724
    assert make_split().threshold == 1024  # none set: the config's routing threshold
    # Set before the config lowered its bounds: back within them.
    assert make_split(state=SplitState(threshold=4096), ceiling=2048).threshold == 2048
    assert make_split(state=SplitState(threshold=300), min_threshold_tokens=512).threshold == 512


def _raw(config_path=DEFAULT_CONFIG_PATH, **split) -> dict:
    raw = TrilemmaConfig.from_yaml(config_path).model_dump(mode="json")
    raw["autoscaling"].update(enabled=True, split={"enabled": True, **split})
    raw["autoscaling"]["pools"] = {name: {"min_replicas": 1, "max_replicas": 2} for name in raw["pools"]}
    return raw


def test_the_split_comes_from_the_config_only_where_it_and_autoscaling_are_on():
    split = TrafficSplit.from_config(TrilemmaConfig.from_dict(_raw()))
    assert (split.short, split.long, split.threshold, split.low, split.high) == ("short", "long", 1024, 256, 2048)
    assert (split.max_num_seqs, split.busy_measure, split.period_s) == ({"short": 8, "long": 4}, "batch_occupancy", 5.0)
    off = _raw()
    off["autoscaling"]["enabled"] = False
    assert TrafficSplit.from_config(TrilemmaConfig.from_dict(off)) is None
    assert TrafficSplit.from_config(TrilemmaConfig.from_dict(_raw(enabled=False))) is None


@pytest.mark.parametrize(
    ("path", "split", "error"),
    [
        (DEFAULT_CONFIG_PATH, {"short_pool": "tiny"}, "autoscaling.split.short_pool names unknown pool 'tiny'"),
        # The router sends short requests to the first short pool: the split must read that one.
        (DEFAULT_CONFIG_PATH, {"short_pool": "long"}, "autoscaling.split.short_pool 'long' is not the pool the router "
         "sends short requests to ('short', the first pool of role short)"),
        (CONFIG_DIR / "models-h200.yaml", {}, "autoscaling.split's pools serve different models ('chat': "
         "smollm2-135m-shape, 'batch': llama-8b-shape)"),
        (DEFAULT_CONFIG_PATH, {"max_threshold_tokens": 4096}, "max_threshold_tokens (4096) is above the max_model_len of pool short"),
        (DEFAULT_CONFIG_PATH, {"min_threshold_tokens": 4096}, "min_threshold_tokens (4096) is above"),
        (DEFAULT_CONFIG_PATH, {"min_threshold_tokens": 512, "max_threshold_tokens": 300},
         "max_threshold_tokens (300) is below min_threshold_tokens (512)"),
    ],
)
def test_a_split_without_a_pair_of_pools_to_move_work_between_is_refused(path, split, error):
    with pytest.raises(ConfigError, match=error.replace("(", r"\(").replace(")", r"\)")):
        TrilemmaConfig.from_dict(_raw(path, **split))


def test_a_config_without_a_long_pool_names_the_role_it_needs():
    raw = _raw()
    raw["pools"]["long"]["role"] = "short"
    with pytest.raises(ConfigError, match="autoscaling.split needs a pool of role long"):
        TrilemmaConfig.from_dict(raw)


def test_the_autoscaler_runs_the_split_first_and_grows_the_busy_pool_in_the_same_step():
    autoscaler = Autoscaler(AutoscalingConfig(), BOUNDS, ["long", "short"])
    short = PoolSignals("short", 1, batch_occupancy=0.95, **recorded(256)["short"])
    long = PoolSignals("long", 3, batch_occupancy=0.3, **recorded(256)["long"])
    step = autoscaler.step({"short": short, "long": long}, 0.0, split=make_split(256))
    assert step.split.replicas == {"short": 2, "long": 2}
    assert (step.decisions["short"].target, step.decisions["short"].policy) == (2, "split")
    assert step.decisions["short"].reason == step.split.reason
    assert Autoscaler(AutoscalingConfig(), BOUNDS, ["long", "short"]).step({"short": short}, 0.0).split is None


def test_the_idle_pool_gives_its_replica_under_the_default_hysteresis():
    autoscaler, split = Autoscaler(AutoscalingConfig(), BOUNDS, ["long", "short"]), make_split(256, cooldown_s=30.0)
    replicas = {"short": 1, "long": 3}
    for now in range(0, 60, 5):
        signals = {"short": PoolSignals("short", replicas["short"], batch_occupancy=0.95, **recorded(256)["short"]),
                   "long": PoolSignals("long", replicas["long"], batch_occupancy=0.3, **recorded(256)["long"])}
        replicas = autoscaler.step(signals, float(now), split=split).targets()
    assert replicas["long"] < 3


def test_pool_signals_sum_their_replicas_size_histograms():
    short = recorded(1024)["short"]
    # Two replicas that each served half the requests of each bucket; a third from before sizes were counted.
    halves = {key: value / 2 for keys, values in ((wire.SIZE_REQUESTS_KEYS, short["size_requests_per_s"]),
                                                   (wire.SIZE_TOKENS_KEYS, short["size_tokens_per_s"]))
              for key, value in zip(keys, values)}
    signals = PoolSignals.from_replica_stats("short", 3, [halves, halves, {"batch_occupancy": 0.5}])
    assert signals.size_requests_per_s == pytest.approx(short["size_requests_per_s"])
    assert signals.size_tokens_per_s == pytest.approx(short["size_tokens_per_s"])
    assert sum(signals.size_requests_per_s) == pytest.approx(sum(1 for s in SIZES if s <= 1024) / TRACE.span_s)
    bare = PoolSignals.from_replica_stats("short", 1, [{"batch_occupancy": 0.5}])
    assert bare.size_requests_per_s is None and bare.size_tokens_per_s is None


def test_recorded_traffic_replayed_period_by_period_settles_within_the_bounds():
    # Each pool's load is its share of the trace's work over what it serves at full load.
    capacity = {"short": 700.0, "long": 15000.0}
    split, thresholds = make_split(), [1024]
    for period in range(8):
        histograms = recorded(split.threshold)
        signals = {pool: PoolSignals(pool, 1, batch_occupancy=sum(h["size_tokens_per_s"]) / capacity[pool], **h)
                   for pool, h in histograms.items()}
        decision = split.decide(signals, BOUNDS, PLAN, 5.0 * period)
        if decision.moved:
            assert decision.previous / 2 <= decision.threshold < decision.previous
            assert 256 <= decision.threshold
        thresholds.append(split.threshold)
    assert thresholds[:3] == [1024, 512, 362] and set(thresholds[3:]) == {362}
    assert "both pools have room" in decision.reason


# Through Ray Serve's policy: every pool's policy runs the fleet's step in the controller.
APP, PRICES = "split-app", {"short": 0.05, "long": 0.05}


@pytest.fixture(autouse=True)
def _fresh_controller():
    PoolScalingPolicy._fleets.clear()
    PoolScalingPolicy._splits.clear()
    yield
    PoolScalingPolicy._fleets.clear()
    PoolScalingPolicy._splits.clear()


def _policy_config(**split) -> dict:
    raw = _raw(after_periods=2, cooldown_s=0, **split)
    raw["autoscaling"]["pools"] = {"short": {"min_replicas": 1, "max_replicas": 4},
                                   "long": {"min_replicas": 1, "max_replicas": 4}}
    return raw


def _ctx(pool: str, now: float, threshold: int = 1024) -> SimpleNamespace:
    histograms = recorded(threshold)[pool]
    stats = {**dict(zip(wire.SIZE_REQUESTS_KEYS, histograms["size_requests_per_s"])),
             **dict(zip(wire.SIZE_TOKENS_KEYS, histograms["size_tokens_per_s"])),
             "batch_occupancy": 0.95 if pool == "short" else 0.25, "requests_per_s": 1.5}
    return SimpleNamespace(current_time=now, policy_state=None, app_name=APP, current_num_replicas=1,
                           target_num_replicas=1, total_queued_requests=0.0,
                           aggregated_metrics={key: {f"{pool}-1": value} for key, value in stats.items()})


def test_both_pools_policies_in_one_period_publish_one_threshold_and_a_restart_resumes_it():
    board = MemoryControlBoard()
    policies = {pool: PoolScalingPolicy(_policy_config(), pool, PRICES, board=board, export_metrics=False)
                for pool in ("short", "long")}

    def period(now: float) -> dict:
        for offset, pool in enumerate(policies):
            policies[pool](_ctx(pool, now + 0.5 * offset))
        return board.get(split_key(APP))

    assert "no figures from pool long" in period(100.0)["reason"]  # the long pool had not reported yet
    waiting = period(105.0)
    # Two asks, one period; no threshold on the board until the split moves one: routers keep theirs.
    assert waiting["threshold"] is None and "asked 1 of 2 periods" in waiting["reason"]
    moved = period(110.0)
    assert (moved["threshold"], moved["state"]["threshold"]) == (512, 512)
    records = [board.get(decisions_key(APP, pool))[-1] for pool in policies]
    assert records[0]["split"] == records[1]["split"]
    assert records[0]["split"].startswith("threshold 1024 -> 512: short 0.95 (batch occupancy 0.95)")
    # The controller restarts: its class-level views are gone; the routers' threshold is not.
    PoolScalingPolicy._fleets.clear()
    PoolScalingPolicy._splits.clear()
    PoolScalingPolicy(_policy_config(), "long", PRICES, board=board, export_metrics=False)(_ctx("long", 200.0, 512))
    resumed = board.get(split_key(APP))
    assert resumed["threshold"] == 512 and "no figures from pool short" in resumed["reason"]


def test_a_redeploy_that_turns_the_split_off_stops_it():
    board = MemoryControlBoard()
    PoolScalingPolicy(_policy_config(), "short", PRICES, board=board, export_metrics=False)(_ctx("short", 100.0))
    off = _policy_config(enabled=False)
    PoolScalingPolicy(off, "short", PRICES, board=board, export_metrics=False)(_ctx("short", 200.0))
    assert PoolScalingPolicy._splits[APP][1] is None


def test_a_split_pool_without_autoscaling_is_refused():
    raw = _policy_config()
    del raw["autoscaling"]["pools"]["long"]
    with pytest.raises(ConfigError, match="long"):
        TrilemmaConfig.from_dict(raw)


def test_no_move_where_the_best_threshold_would_leave_the_loads_further_apart():
    """Most of the short pool's work sits just under the threshold: lowering it at all hands the
    long pool 300 of the short pool's 400 tokens/s (predicted 0.15 / 0.53 from 0.60 / 0.30, a
    wider gap), so the split holds rather than flap."""
    split = make_split()
    decision = decide(split, made("short", 0.6, {512: 100.0, 1024: 300.0}), made("long", 0.3, LONG_WORK))
    assert (decision.threshold, decision.replicas) == (1024, {})
    assert "no threshold lower than 1024 brings the loads closer" in decision.reason


def test_a_replica_moves_only_for_a_pressed_pool():
    """At its bound, the busier pool gets a replica only once its load reaches replica_move_above."""
    at_bound = make_split(threshold=256, min_threshold_tokens=256, replica_move_above=0.8)
    calm = decide(at_bound, made("short", 0.6, SHORT_WORK), made("long", 0.1, LONG_WORK))
    assert calm.replicas == {} and "under replica_move_above (0.8)" in calm.reason
    pressed = decide(make_split(threshold=256, min_threshold_tokens=256, replica_move_above=0.8),
                     made("short", 0.95, SHORT_WORK), made("long", 0.1, LONG_WORK))
    assert pressed.replicas.get("short") == PLAN["short"] + 1
