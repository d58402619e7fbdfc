"""`trilemma bench quality`: how perplexity and the task are scored, and how each pool is set
against the reference."""

from __future__ import annotations

import math

import pytest

from bench.plots import quality_corners
from bench.quality.cli import against_reference, markdown, precision_label, scoring_scenario
from bench.quality.scores import Task, heldout_passages, is_right, perplexity, prompt_nll, tasks
from core.config import CONFIG_DIR, TrilemmaConfig


def test_perplexity_comes_from_each_prompt_tokens_own_log_probability():
    # vLLM's prompt_logprobs with 0 alternatives, as JSON carries it: nothing for the first
    # token, then the prompt's own token per position (keys are token ids).
    logprobs = [None, {"504": {"logprob": -1.0, "rank": 3, "decoded_token": " a"}},
                {"17": {"logprob": -3.0, "rank": 1, "decoded_token": " b"}}]
    nll, tokens = prompt_nll(logprobs)
    assert (nll, tokens) == (4.0, 2)
    assert perplexity(nll, tokens) == pytest.approx(math.exp(2.0))


def test_alternatives_in_the_log_probabilities_are_refused_rather_than_misread():
    with pytest.raises(ValueError, match="prompt_logprobs=0"):
        prompt_nll([None, {"1": {"logprob": -1.0}, "2": {"logprob": -0.5}}])


def test_a_reply_is_right_when_an_answer_is_among_its_first_words():
    paris = Task("What is the capital of France?", ("Paris",))
    assert is_right("Paris", paris) and is_right("The capital of France is Paris.", paris)
    assert not is_right("Lyon.", paris)
    assert not is_right("It is a city in the north of the country, and it is Paris", paris)
    seven = Task("How many days are in a week?", ("7", "seven"))
    assert is_right("Seven days.", seven) and not is_right("17", seven)


def test_the_shipped_data_is_there_and_every_task_has_an_answer():
    assert len(heldout_passages()) >= 6 and all(len(p.split()) > 80 for p in heldout_passages())
    assert len(tasks()) >= 40 and all(task.answers for task in tasks())


def _pool(name: str, ppl: float, right: int, usd: float | None) -> dict:
    return {"pool": name, "precision_label": "bfloat16", "perplexity": ppl, "task_right": right, "task_total": 40,
            "task_score": right / 40, "usd_per_1m_tokens": usd, "ttft_ms": {"p50": 100.0, "p99": 200.0},
            "burst_in_flight": 8, "burst_output_tokens_per_s": 50.0}


def test_each_pool_shows_its_loss_beside_its_saving(tmp_path):
    pools = [_pool("quality", 20.0, 30, 2.0), _pool("cost", 20.6, 28, 1.0), _pool("free", 25.0, 20, None)]
    pools[1]["answer_tokens"] = [40, 90, 256, 70]
    against_reference(pools, "quality")
    assert pools[1]["perplexity_added"] == pytest.approx(0.6)
    assert pools[1]["task_points_lost"] == pytest.approx(5.0) and pools[1]["saving"] == pytest.approx(0.5)
    assert pools[2]["saving"] is None
    text = markdown({"name": "q", "command": "c", "machine": "m", "model": "smol", "passages": 6, "task_total": 40,
                     "reference": "quality", "burst_tokens": 64, "plot": "q.png", "pools": pools})
    assert "| cost | smol | bfloat16 | 20.60 | 28/40 | 1.0000 | 100 / 200 | 50.0 | 80 / 256 | +0.60 | +5.0 | 50% |" in text
    assert "| free | smol | bfloat16 | 25.00 | 20/40 | - | 100 / 200 | 50.0 | - |" in text  # no answers measured
    assert quality_corners(pools, tmp_path / "q.png").stat().st_size > 0


def test_the_precision_names_the_quantization_before_the_dtype_and_a_kv_cache_apart():
    assert precision_label({"dtype": "bfloat16", "quantization": None, "kv_cache_dtype": "auto"}) == "bfloat16"
    assert precision_label({"dtype": "auto", "quantization": "fp8", "kv_cache_dtype": "fp8"}) == "fp8, KV fp8"


@pytest.mark.parametrize("config_name, pool, scenario", [
    ("local-cpu.yaml", "short", "quality"),        # no cap and the prompts left as they are
    ("precision-cpu.yaml", "long", "batch"),        # int8: the quality scenario never reaches it
    ("models-h200.yaml", "chat", "chat"),           # the only scenario of the small model
    ("models-h200.yaml", "cost", "batch"),          # the large model's pool in fp8
])
def test_each_pool_is_scored_in_a_scenario_that_reaches_it_with_the_loosest_cap(config_name, pool, scenario):
    config = TrilemmaConfig.from_yaml(CONFIG_DIR / config_name)
    assert scoring_scenario(config, pool) == scenario


def test_a_pool_no_scenario_reaches_cannot_be_scored():
    raw = TrilemmaConfig.from_yaml(CONFIG_DIR / "local-cpu.yaml").model_dump(mode="json")
    for scenario in raw["scenarios"].values():
        scenario["pools"] = ["short"]
    assert scoring_scenario(TrilemmaConfig.from_dict(raw), "long") is None
