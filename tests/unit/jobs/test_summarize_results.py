"""Summarize job: the results store a rerun resumes from, the plan of a run, the final output."""

from __future__ import annotations

import json

import pytest

from core.storage import StorageError, locate
from jobs.summarize.inputs import Document
from jobs.summarize.job import plan_run
from jobs.summarize.outputs import OutputFormatError, output_format, read_output, write_output
from jobs.summarize.report import RunReport
from jobs.summarize.results_store import ResultRecord, ResultsStore


def store_at(path, **kwargs):
    return ResultsStore(locate(str(path)), **kwargs)


def test_records_are_on_disk_as_soon_as_they_are_appended(tmp_path):
    store = store_at(tmp_path / "state")
    store.append(ResultRecord("a", "done", summary="A."))
    # Not closed: a kill now loses nothing already appended.
    stored = store_at(tmp_path / "state").load()
    assert stored.records["a"].summary == "A." and stored.is_done("a")
    store.close()


def test_resume_keeps_done_records_and_retries_failed_ones(tmp_path):
    first = store_at(tmp_path / "state")
    first.append(ResultRecord("a", "done", summary="A."))
    first.append(ResultRecord("b", "failed", error="HTTP 502"))
    first.close()
    second = store_at(tmp_path / "state")
    second.append(ResultRecord("b", "failed", error="HTTP 502 again"))
    second.append(ResultRecord("a", "failed", error="a stray record never undoes a done one"))
    second.close()
    stored = store_at(tmp_path / "state").load()
    assert stored.records["a"].status == "done"
    assert stored.records["b"].error == "HTTP 502 again"
    assert stored.attempts == {"a": 2, "b": 2}
    assert len(list((tmp_path / "state").glob("part-*.jsonl"))) == 2  # one part per run, none rewritten


def test_a_line_torn_by_a_kill_is_ignored(tmp_path):
    (tmp_path / "state").mkdir()
    good = ResultRecord("a", "done", summary="A.").to_json()
    (tmp_path / "state" / "part-20260101T000000000000-aaaaaa.jsonl").write_text(good + '\n{"id": "b", "stat')
    stored = store_at(tmp_path / "state").load()
    assert list(stored.records) == ["a"] and stored.torn_lines == 1


def test_one_run_at_a_time_per_results_folder(tmp_path):
    first = store_at(tmp_path / "state")
    first.lock()
    second = store_at(tmp_path / "state")
    with pytest.raises(StorageError, match="another run of the job is writing these results"):
        second.lock()
    first.close()
    second.lock()  # released with the first run
    second.close()


def test_an_object_store_gets_whole_part_objects_per_interval(tmp_path):
    # A local folder written the way an object store must be: no appends, whole objects.
    store = store_at(tmp_path / "state", flush_interval_s=3600, appendable=False)
    store.append(ResultRecord("a", "done"))
    store.append(ResultRecord("b", "done"))
    assert not (tmp_path / "state").exists()  # buffered until the interval passes or the run stops
    store.close()
    parts = list((tmp_path / "state").glob("part-*-000001.jsonl"))
    assert len(parts) == 1 and len(parts[0].read_text().splitlines()) == 2
    assert set(store_at(tmp_path / "state").load().records) == {"a", "b"}


def doc(id_, status="ok", text="Some text."):
    return Document(id_, None if status == "unreadable" else text, f"f:{id_}", status,
                    "bad bytes" if status == "unreadable" else None)


def test_the_plan_skips_done_retries_failed_and_records_unsendable_once(tmp_path):
    store = store_at(tmp_path / "state")
    store.append(ResultRecord("done", "done"))
    store.append(ResultRecord("failed", "failed", error="boom"))
    store.append(ResultRecord("empty", "empty"))
    store.close()
    documents = [doc("done"), doc("failed"), doc("new"), doc("empty", "empty"), doc("bad", "unreadable")]
    plan = plan_run(documents, store_at(tmp_path / "state").load(), "serve")
    assert plan.already_done == 1
    assert [d.id for d in plan.to_send] == ["failed", "new"]
    assert [r.id for r in plan.not_sent] == ["empty", "bad"]
    assert [r.id for r in plan.to_record] == ["bad"]  # "empty" is recorded as such already
    assert plan.not_sent[1].error == "bad bytes"


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_the_output_has_every_record_once_in_both_formats(tmp_path, suffix):
    target = locate(str(tmp_path / "out" / f"summaries{suffix}"))
    fmt = output_format(target)
    records = [ResultRecord("a", "done", summary="A.", input_tokens=10, output_tokens=3, cost_usd=1e-6,
                            pool="short", chunks=1, requests=1, metadata={"lang": "en"}),
               ResultRecord("b", "failed", error="HTTP 400: too long"), ResultRecord("c", "empty")]
    write_output(target, fmt, records)
    rows = read_output(target, fmt)
    assert [(r["id"], r["status"]) for r in rows] == [("a", "done"), ("b", "failed"), ("c", "empty")]
    assert rows[0]["summary"] == "A." and rows[0]["cost_usd"] == 1e-6 and rows[1]["error"] == "HTTP 400: too long"
    metadata = rows[0]["metadata"]
    assert (json.loads(metadata) if fmt == "parquet" else metadata) == {"lang": "en"}
    assert not list((tmp_path / "out").glob("*.tmp-*"))  # written through a rename


def test_an_unknown_output_format_is_named():
    with pytest.raises(OutputFormatError, match=r"out\.csv: unknown output format; name it .jsonl or .parquet"):
        output_format(locate("out.csv"))
    assert output_format(locate("out.csv"), "parquet") == "parquet"


def test_the_report_counts_and_prices():
    report = RunReport(documents=5, already_done=1, elapsed_s=4.0)
    report.count(ResultRecord("a", "done", input_tokens=100, output_tokens=10, cost_usd=0.002))
    report.count(ResultRecord("b", "done", input_tokens=50, output_tokens=10, cost_usd=0.004))
    report.count(ResultRecord("c", "failed", error="HTTP 502", cost_usd=0.001))
    report.count(ResultRecord("d", "empty"))
    assert (report.done, report.failed, report.empty, report.settled) == (2, 1, 1, 4)
    assert report.cost_usd == pytest.approx(0.007) and report.usd_per_document == pytest.approx(0.0035)
    assert report.documents_per_s == 0.5
    text = report.render()
    assert "5 in the input; 4 settled, 1 failed, 0 not reached" in text
    assert "150 in, 20 out" in text and "$0.007000; $0.003500 per document" in text and "c: HTTP 502" in text
    assert "run the same command again" in text
