"""Summarize job: its config, its flags, and bad input refused with a clear message before
anything is sent (no app and no Ray needed for any of it); the sample corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.config_base import ConfigError
from jobs.summarize.chunking import Chunker
from jobs.summarize.cli import main
from jobs.summarize.config import SummarizeConfig
from jobs.summarize.sample_corpus import LONG_TOPICS, sample_documents, write_sample

DEFAULT_YAML = Path(__file__).parents[3] / "jobs" / "summarize" / "configs" / "default.yaml"


def test_the_shipped_config_file_is_the_defaults():
    assert SummarizeConfig.from_yaml(DEFAULT_YAML) == SummarizeConfig()


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"chunking": {"overlap_tokns": 3}}, "chunking.overlap_tokns: Extra inputs are not permitted"),
        ({"prompt": {"template": "Summarize this"}}, "prompt.template must contain {text}"),
        ({"prompt": {"max_tokens": 700}}, "prompt.max_tokens (700) leaves no room to combine"),
        ({"chunking": {"chunk_tokens": 64, "overlap_tokens": 64}}, "overlap_tokens (64) must be under"),
        ({"concurrency": {"min": 8, "max": 4}}, "concurrency.min (8) is over concurrency.max (4)"),
        ({"mode": "offline"}, "mode: Input should be 'serve' or 'engine'"),
        ({"mode": "engine", "model": {"adapter": "tagged"}}, "model.adapter 'tagged' is applied by the app"),
    ],
)
def test_bad_configs_name_the_key(tmp_path, raw, message):
    path = tmp_path / "job.yaml"
    path.write_text(__import__("yaml").safe_dump(raw))
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")) as error:
        SummarizeConfig.from_yaml(path)
    assert str(path) in str(error.value)


def test_flags_and_set_override_the_file(tmp_path, capsys):
    from jobs.summarize.cli import load_config, parser

    path = tmp_path / "job.yaml"
    path.write_text("prompt: {max_tokens: 64}\nconcurrency: {max: 8}\n")
    args = parser().parse_args(["--config", str(path), "--input", "in.jsonl", "--max-concurrency", "4",
                                "--set", "concurrency.initial=3", "--set", "serve.pool=null", "--no-progress"])
    config = load_config(args)
    assert (config.input.uri, config.prompt.max_tokens, config.concurrency.max, config.concurrency.initial) == (
        "in.jsonl", 64, 4, 3)
    assert config.progress is False and config.serve.pool is None
    assert load_config(parser().parse_args(["--max-concurrency", "1"])).concurrency.initial == 1  # start at the cap


def run_cli(tmp_path, *args):
    return main(["--output", str(tmp_path / "out.jsonl"), "--no-progress", *args])


def test_bad_input_stops_before_anything_is_sent(tmp_path, capsys):
    corpus = tmp_path / "in.jsonl"
    corpus.write_text('{"id": "a", "text": "ok"}\n{"id": "b" "text": "x"}\n{"id": "a", "text": "again"}\n'
                      '{"text": "no id"}\n')
    assert run_cli(tmp_path, "--input", str(corpus)) == 2
    err = capsys.readouterr().err
    assert "3 problem(s) in the input; nothing was sent" in err
    assert f"{corpus}:2: not a JSON object" in err
    assert f"{corpus}:3: duplicate id 'a' (first at {corpus}:1)" in err
    assert f"{corpus}:4: 'id' missing" in err
    assert "input.on_invalid: skip" in err
    assert not (tmp_path / "out.jsonl.parts").exists() and not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--input", "{tmp}/missing.jsonl"], "missing.jsonl: no such file"),
        (["--input", "{tmp}/in.jsonl", "--output", "{tmp}/out.csv"], "out.csv: unknown output format"),
        (["--input", "{tmp}/in.jsonl", "--output-format", "xml"], "output.format: Input should be"),
        (["--output", "{tmp}/x.jsonl"], "no input given: set input.uri in the config or pass --input"),
        (["--input", "{tmp}/in.jsonl", "--url", "http://127.0.0.1:9"], "no app answers at http://127.0.0.1:9"),
        (["--input", "{tmp}/in.jsonl", "--set", "chunking.context_tokns=1"], "context_tokns: Extra inputs"),
    ],
)
def test_unusable_runs_exit_2_with_the_reason(tmp_path, capsys, args, message):
    (tmp_path / "in.jsonl").write_text('{"id": "a", "text": "Some text."}\n')
    assert run_cli(tmp_path, *[arg.format(tmp=tmp_path) for arg in args]) == 2
    assert message in capsys.readouterr().err


def test_a_corpus_of_nothing_to_send_finishes_without_an_app(tmp_path, capsys):
    """Empty and unreadable documents are recorded, never sent: no app is asked for."""
    corpus = tmp_path / "in.jsonl"
    corpus.write_text('{"id": "blank", "text": " "}\n{"id": "null", "text": null}\n')
    assert run_cli(tmp_path, "--input", str(corpus), "--url", "http://127.0.0.1:9") == 0
    out = capsys.readouterr().out
    assert "0 done, 0 failed, 1 empty, 1 unreadable" in out
    rows = (tmp_path / "out.jsonl").read_text().splitlines()
    assert len(rows) == 2 and '"status": "empty"' in rows[0] and '"status": "unreadable"' in rows[1]


def test_the_sample_corpus_is_real_text_with_long_documents(embedded_model_dir, tmp_path):
    documents = sample_documents()
    assert documents == sample_documents()  # built the same way every time
    assert len({d["id"] for d in documents}) == len(documents) >= 12
    chunker = Chunker(str(embedded_model_dir))
    lengths = {d["metadata"]["topic"]: chunker.count(d["text"]) for d in documents}
    assert all(lengths[name] > 2048 for name in LONG_TOPICS)  # over the short pool's context
    assert sum(length < 1024 for length in lengths.values()) >= 8
    assert [d["metadata"]["topic"] for d in sample_documents(count=4, long_count=1)] == [
        "pass", "lambda", "assert", "import"]
    path = write_sample(tmp_path / "sample" / "corpus.jsonl", count=3, long_count=1)
    assert len(path.read_text().splitlines()) == 3


def test_every_topic_is_a_larger_corpus_with_unique_ids(tmp_path):
    every = [json.loads(line) for line in
             write_sample(tmp_path / "every.jsonl", every_topic=True).read_text().splitlines()]
    ids = [d["id"] for d in every]
    assert len(set(ids)) == len(ids) > len(sample_documents())
    assert {d["id"] for d in sample_documents()} <= set(ids)
    assert all(d["text"] for d in every)


def test_a_chunk_size_that_cannot_fit_is_refused_before_anything_is_sent(tmp_path, capsys):
    (tmp_path / "in.jsonl").write_text('{"id": "a", "text": "Some text."}\n')
    assert run_cli(tmp_path, "--input", str(tmp_path / "in.jsonl"), "--chunk-tokens", "2000") == 2
    assert "chunking.chunk_tokens 2000 does not fit: context 2048 - max_tokens 128" in capsys.readouterr().err
