"""The quality a move to a cheaper pool gives up: read from a `bench quality` result, said on
the route's reason, and held to the scenario's `max_quality_loss`."""

from __future__ import annotations

import json

import pytest

from core.config import ConfigError, PoolConfig, QualityLossLimit, RoutingConfig, TrilemmaConfig
from router.quality_ledger import PoolQuality, QualityLedger
from router.routing import ContextLengthPolicy, RouteRequest

# Three pools that take a chat request: full precision, a quantized one close to it, a small one.
POOLS = {name: PoolConfig(role="short", max_model_len=2048, max_num_seqs=4) for name in ("full", "fp8", "small")}
PRICES = {"full": 4.0, "fp8": 2.5, "small": 1.0}
LEDGER = QualityLedger({"full": PoolQuality(10.0, 0.80), "fp8": PoolQuality(10.3, 0.775),
                        "small": PoolQuality(14.0, 0.55)}, "quality-h200.json")
POLICY = ContextLengthPolicy(RoutingConfig(), PRICES, LEDGER)


def cheapest(limit: QualityLossLimit | None):
    return POLICY.choose(RouteRequest(100, 50, "cost", prefer_cheapest=True, max_quality_loss=limit), POOLS)


def test_without_a_limit_the_cheapest_pool_serves_and_the_reason_says_what_it_gives_up():
    decision = cheapest(None)
    assert decision.pool == "small"
    assert "quality against pool full: perplexity +4.00, task -25.0 points" in decision.reason


def test_a_move_beyond_the_limit_is_refused_and_the_next_cheapest_within_it_serves():
    decision = cheapest(QualityLossLimit(perplexity=0.5))
    assert decision.pool == "fp8"
    assert "perplexity +0.30, task -2.5 points" in decision.reason
    assert "pool small refused: perplexity +4.00 over max_quality_loss.perplexity 0.5" in decision.reason
    decision = cheapest(QualityLossLimit(task_points=1))
    assert decision.pool == "full"
    assert "pool fp8 refused: 2.5 task points lost, over max_quality_loss.task_points 1" in decision.reason


def test_a_pool_never_measured_is_refused_where_a_limit_is_set():
    policy = ContextLengthPolicy(RoutingConfig(), PRICES, QualityLedger({"full": PoolQuality(10.0, 0.8)}, "q.json"))
    decision = policy.choose(RouteRequest(100, 50, "cost", True, QualityLossLimit(perplexity=100)), POOLS)
    assert decision.pool == "full"
    assert "pool small refused: no measured quality for it or pool full in q.json" in decision.reason
    # Without a limit the move is made, with no quality to report.
    assert policy.choose(RouteRequest(100, 50, "cost", True), POOLS).pool == "small"


def test_the_ledger_reads_a_bench_quality_result_and_travels_as_a_dict(tmp_path):
    path = tmp_path / "quality.json"
    path.write_text(json.dumps({"pools": [{"pool": "full", "perplexity": 10.0, "task_score": 0.8, "other": 1}]}))
    ledger = QualityLedger.from_result(path)
    assert ledger.pools == {"full": PoolQuality(10.0, 0.8)} and ledger.source == "quality.json"
    assert QualityLedger.from_dict(ledger.to_dict()).pools == ledger.pools
    path.write_text(json.dumps({"points": []}))
    with pytest.raises(ConfigError, match="is not a `trilemma bench quality` result"):
        QualityLedger.from_result(path)


def test_a_limit_without_a_measurement_is_a_config_error():
    raw = {"pools": {"short": {"role": "short", "max_model_len": 2048, "max_num_seqs": 4}},
           "scenarios": {"chat": {"priority": 0, "prefer": "cheapest", "max_quality_loss": {"perplexity": 0.5}}}}
    with pytest.raises(ValueError, match=r"scenarios \['chat'\] set max_quality_loss, but quality.results"):
        TrilemmaConfig.from_dict(raw)
    raw["quality"] = {"results": "bench/results/quality-cpu/quality-cpu.json"}
    assert TrilemmaConfig.from_dict(raw).scenarios["chat"].max_quality_loss.perplexity == 0.5
    with pytest.raises(ValueError, match="nats"):
        TrilemmaConfig.from_dict({**raw, "scenarios": {"chat": {"priority": 0, "max_quality_loss": {"nats": 1}}}})


@pytest.mark.parametrize("cap, expected", [
    (64, "token cap 64: 3 of 4 measured answers of pool full run longer (median 130 tokens; quality-h200.json)"),
    (200, "token cap 200: 1 of 4 measured answers of pool full run longer (median 130 tokens; quality-h200.json)"),
    (256, "token cap 256: 0 of 4 measured answers of pool full run longer (median 130 tokens, none measured past 256;"),
])
def test_a_token_cap_says_how_many_measured_answers_it_would_cut(cap, expected):
    ledger = QualityLedger({"full": PoolQuality(10.0, 0.8, (60, 140, 256, 120), 256), "fp8": PoolQuality(10.3, 0.775)},
                           "quality-h200.json")
    assert ledger.token_cap_note("full", cap).startswith(expected)
    assert ledger.token_cap_note("fp8", cap) is None and ledger.token_cap_note("gone", cap) is None
    # The router gets the ledger as data: the measured answers survive the trip.
    assert QualityLedger.from_dict(ledger.to_dict()).token_cap_note("full", cap) == ledger.token_cap_note("full", cap)


def test_answer_lengths_are_read_from_the_result_and_older_results_still_load(tmp_path):
    path = tmp_path / "quality.json"
    path.write_text(json.dumps({"pools": [
        {"pool": "full", "perplexity": 10.0, "task_score": 0.8, "answer_tokens": [50, 300], "answer_max_tokens": 512},
        {"pool": "old", "perplexity": 11.0, "task_score": 0.7},
    ]}))
    ledger = QualityLedger.from_result(path)
    assert ledger.pools["full"].answer_tokens == (50, 300) and ledger.pools["old"].answer_tokens == ()
    assert "1 of 2 measured answers" in ledger.token_cap_note("full", 256)
