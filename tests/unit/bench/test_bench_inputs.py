"""Benchmark inputs: prompt sets and arrival processes."""

from __future__ import annotations

import statistics

import pytest

from bench.arrivals import LoadShape, poisson_arrival_times
from bench.datasets import DatasetError, docs_dataset, jsonl_dataset, load_dataset, random_dataset, shared_prefix_dataset


def test_docs_set_mixes_questions_and_long_documents():
    prompts = docs_dataset(200, long_fraction=0.3, long_words=900, seed=1)
    kinds = [p.kind for p in prompts]
    assert 0.2 < kinds.count("long") / len(kinds) < 0.4
    long_prompt = next(p for p in prompts if p.kind == "long")
    assert len(long_prompt.messages[0]["content"].split()) > 900
    assert prompts == docs_dataset(200, long_fraction=0.3, long_words=900, seed=1)  # reproducible


def test_random_set_respects_its_bounds():
    prompts = random_dataset(50, min_words=10, max_words=20, seed=3)
    assert all(10 <= len(p.messages[0]["content"].split()) <= 20 for p in prompts)


def test_shared_prefix_set_shares_its_system_prompt():
    prompts = shared_prefix_dataset(10, prefix_words=100)
    assert len({p.messages[0]["content"] for p in prompts}) == 1
    assert len(prompts[0].messages[0]["content"].split()) > 100


def test_jsonl_set(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"prompt": "hi", "max_tokens": 7, "scenario": "batch"}\n\n'
                    '{"messages": [{"role": "user", "content": "yo"}]}\n')
    prompts = jsonl_dataset(path)
    assert [(p.messages[0]["content"], p.max_tokens, p.scenario) for p in prompts] == [
        ("hi", 7, "batch"), ("yo", 64, None)]
    assert len(load_dataset("jsonl", 5, path=path)) == 5


@pytest.mark.parametrize("content, message", [
    ('{"prompt": "a"}\nnot json\n', "prompts.jsonl:2: not JSON"),
    ('{"text": "a"}\n', "prompts.jsonl:1: needs a 'prompt'"),
    ("\n", "no prompts"),
])
def test_bad_jsonl_names_the_line(tmp_path, content, message):
    path = tmp_path / "prompts.jsonl"
    path.write_text(content)
    with pytest.raises(DatasetError, match=message):
        jsonl_dataset(path)


def test_poisson_gaps_are_exponential():
    times = poisson_arrival_times(rate_rps=4.0, count=20000, seed=7)
    gaps = [b - a for a, b in zip([0.0] + times, times)]
    mean = statistics.fmean(gaps)
    assert mean == pytest.approx(0.25, rel=0.03)
    assert statistics.pstdev(gaps) / mean == pytest.approx(1.0, rel=0.05)  # exponential: CV = 1
    assert times == sorted(times)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_short_schedule_offers_exactly_the_asked_load(seed):
    times = poisson_arrival_times(rate_rps=2.0, count=40, seed=seed)
    assert times[-1] == pytest.approx(20.0)          # 40 requests at 2 req/s: the last at 20 s
    assert 0 < times[0] and times == sorted(times)


def test_load_shape_takes_exactly_one_knob():
    with pytest.raises(ValueError):
        LoadShape()
    with pytest.raises(ValueError):
        LoadShape(rate_rps=1, concurrency=2)
    with pytest.raises(ValueError):
        poisson_arrival_times(0, 3)


def test_questions_are_the_docs_set_without_long_documents():
    prompts = load_dataset("questions", 40, seed=3)
    assert len(prompts) == 40 and {p.kind for p in prompts} == {"short"}
    assert all(p.messages[-1]["content"].endswith("In one sentence, what is this about?") for p in prompts)
