"""The summarize job against the real app (vLLM CPU engines, the embedded model) on a few
documents of the sample corpus, one of them longer than the short pool's context."""

from __future__ import annotations

import json

import pytest

from jobs.summarize.cli import main
from jobs.summarize.sample_corpus import write_sample

pytestmark = pytest.mark.e2e


def test_every_sample_document_gets_a_summary_long_ones_through_chunks(base_url, api_key, tmp_path, capsys):
    corpus = write_sample(tmp_path / "corpus.jsonl", count=4, long_count=1)
    ids = [json.loads(line)["id"] for line in corpus.read_text().splitlines()]
    out = tmp_path / "summaries.jsonl"
    rc = main(["--input", str(corpus), "--output", str(out), "--url", base_url, "--api-key", api_key,
               "--max-tokens", "24", "--no-progress"])
    report = capsys.readouterr().out
    assert rc == 0, report
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["id"] for row in rows] == ids
    for row in rows:
        assert row["status"] == "done" and row["summary"].strip(), row
        assert 0 < row["output_tokens"] <= 24 * row["requests"] and row["cost_usd"] > 0 and row["pool"]
    long_doc = rows[-1]
    assert long_doc["id"] == "python-docs/import" and long_doc["document_tokens"] > 2048
    assert long_doc["chunks"] == 2 and long_doc["requests"] == 3  # two chunk summaries, one combine
    assert all(row["chunks"] == 1 and row["requests"] == 1 for row in rows[:-1])
    assert "4 done, 0 failed" in report and "per document" in report
