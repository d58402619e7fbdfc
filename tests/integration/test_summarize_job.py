"""The summarize job through the app with fake engines: a corpus in serve mode, resume after a
kill without redoing or duplicating a document, and a round trip through S3 (a local moto)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

import httpx
import pytest

from core.wire import BATCH_DOCUMENT_HEADER as DOCUMENT_HEADER
from core.wire import BATCH_DOCUMENTS, exported
from jobs.summarize.cli import main
from tests.support import METRICS_TEST_PORT

pytestmark = pytest.mark.integration

REPO = Path(__file__).parents[2]
MOTO_PORT = 5056
# Small requests, so that a few hundred words already need chunking and the fake engine's
# answers (max_tokens words) stay short.
SMALL = ["--context-tokens", "512", "--max-tokens", "16", "--overlap-tokens", "16", "--no-progress"]


def write_corpus(path: Path, count: int, *, long_ids=(), extra_rows=()) -> list[str]:
    rows = []
    for i in range(count):
        doc_id = f"doc-{i:03d}"
        sentences = 150 if doc_id in long_ids else 3
        text = " ".join(f"Document {i} sentence {j} talks about topic {(i * j) % 17}." for j in range(sentences))
        rows.append({"id": doc_id, "text": text, "metadata": {"n": i}})
    rows.extend(extra_rows)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return [row["id"] for row in rows]


def output_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def exported_documents(output: str, state: str, expected: float, timeout_s: float = 60) -> float | None:
    """The job's documents in `state` as Ray's metrics agent serves them, once they are
    `expected` (it exports every few seconds: polled) or the time is up."""
    from core.prometheus_text import samples

    deadline = time.monotonic() + timeout_s
    while True:
        text = httpx.get(f"http://127.0.0.1:{METRICS_TEST_PORT}/metrics", timeout=30).text
        values = [value for labels, value in samples(text, exported(BATCH_DOCUMENTS)).items()
                  if dict(labels).get("output") == output and dict(labels).get("state") == state]
        if values == [expected] or time.monotonic() > deadline:
            return values[0] if values else None
        time.sleep(2)


def test_serve_mode_summarizes_every_document_through_the_batch_scenario(fake_app_url, tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    ids = write_corpus(corpus, 6, long_ids={"doc-002"}, extra_rows=[
        {"id": "blank", "text": "   "}, {"id": "nothing", "text": None}])
    out = tmp_path / "summaries.jsonl"
    assert main(["--input", str(corpus), "--output", str(out), "--url", fake_app_url, *SMALL]) == 0
    report = capsys.readouterr().out
    assert "6 done, 0 failed, 1 empty, 1 unreadable" in report and f"output         {out}" in report
    rows = {row["id"]: row for row in output_rows(out)}
    assert list(rows) == ids  # each input id once, in input order
    for doc_id in ids[:6]:
        row = rows[doc_id]
        assert row["status"] == "done" and row["attempts"] == 1 and row["metadata"]["n"] == int(doc_id[-3:])
        # The fake engine stamps the priority it was given: the batch scenario's, the lowest.
        assert "priority=3" in row["summary"] and row["cost_usd"] > 0 and row["input_tokens"] > 0
    long_doc = rows["doc-002"]
    assert long_doc["chunks"] >= 3 and long_doc["requests"] > long_doc["chunks"]  # map, then reduce
    assert long_doc["document_tokens"] > 512
    assert rows["doc-000"]["chunks"] == 1 and rows["doc-000"]["pool"] == "short"
    assert (rows["blank"]["status"], rows["nothing"]["status"]) == ("empty", "unreadable")
    assert rows["nothing"]["requests"] == 0 and rows["nothing"]["error"] == "'text' is NoneType, not text"
    # The run's progress reached Prometheus's exposition (the dashboard's batch row).
    assert exported_documents(str(out), "done", 6) == 6 and exported_documents(str(out), "to_do", 0) == 0

    # Parquet from the same state: nothing is sent again, the output is rewritten whole.
    parquet = tmp_path / "summaries.parquet"
    args = ["--input", str(corpus), "--output", str(parquet), "--state", str(tmp_path / "summaries.jsonl.parts"),
            "--url", fake_app_url, *SMALL]
    assert main(args) == 0
    assert "0 done, 0 failed, 1 empty, 1 unreadable; 6 already done before" in capsys.readouterr().out
    import pyarrow.parquet as pq

    assert pq.read_table(parquet).column("id").to_pylist() == ids


class CountingProxy:
    """Between the job and the app: counts the requests each document made, and slows every
    completion down so that a run can be stopped halfway."""

    def __init__(self, upstream: str, delay_s: float) -> None:
        self.counts: Counter[str] = Counter()
        self.delay_s = delay_s
        self.shed = 0  # this many of the next completions get the pool's 429 instead
        proxy = self
        client = httpx.Client(base_url=upstream, timeout=60)

        class Handler(BaseHTTPRequestHandler):
            def _forward(self, method: str) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0)) if method == "POST" else None
                if method == "POST":
                    proxy.counts[unquote(self.headers.get(DOCUMENT_HEADER, ""))] += 1
                    time.sleep(proxy.delay_s)
                    if proxy.shed > 0:
                        proxy.shed -= 1
                        return self._overloaded()
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                answer = client.request(method, self.path, content=body, headers=headers)
                self.send_response(answer.status_code)
                for key, value in answer.headers.items():
                    if key.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding"):
                        self.send_header(key, value)
                self.send_header("content-length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            def _overloaded(self) -> None:
                body = json.dumps({"error": {"message": "pool 'short' is overloaded", "code": "pool_overloaded"}})
                self.send_response(429)
                self.send_header("Retry-After", "1")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

            def do_GET(self):  # noqa: N802 - http.server's naming
                self._forward("GET")

            def do_POST(self):  # noqa: N802
                self._forward("POST")

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()


@pytest.fixture
def proxy(fake_app_url):
    proxy = CountingProxy(fake_app_url, delay_s=0.4)
    yield proxy
    proxy.close()


def done_records(state: Path) -> Counter[str]:
    """How many `done` records each id has across every part file (a redone document has two)."""
    counts: Counter[str] = Counter()
    for part in state.glob("part-*.jsonl"):
        for line in part.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            counts[record["id"]] += record["status"] == "done"
    return counts


def start_job(args: list[str]) -> subprocess.Popen:
    """The job as its own driver on the test's Ray cluster, as `ray job submit` would run it."""
    import ray

    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_ADDRESS": ray.get_runtime_context().gcs_address}
    return subprocess.Popen([sys.executable, "-m", "jobs.summarize", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=_ctrl_c_reaches_the_job)


def _ctrl_c_reaches_the_job() -> None:
    """A shell without job control starts background commands with SIGINT ignored, and Python
    keeps an ignored SIGINT (no KeyboardInterrupt): under `make test &` or `nohup`, the job
    would rightly finish instead of stopping. Ctrl-C at a terminal is what this test means."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for_records(state: Path, at_least: int, process: subprocess.Popen, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while sum(done_records(state).values()) < at_least:
        if process.poll() is not None:
            pytest.fail(f"the job ended before it was stopped:\n{process.stdout.read()}")
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"no {at_least} records within {timeout_s} s:\n{process.stdout.read()}")
        time.sleep(0.2)


def test_a_stopped_job_resumes_without_redoing_or_duplicating(proxy, tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    ids = write_corpus(corpus, 20, long_ids={"doc-005", "doc-011"})
    out, state = tmp_path / "summaries.jsonl", tmp_path / "summaries.jsonl.parts"
    args = ["--input", str(corpus), "--output", str(out), "--url", proxy.url, "--max-concurrency", "2", *SMALL]

    # Ctrl-C, then `ray job stop`'s SIGTERM: what finished is recorded, the report says so, the
    # exit status is 130, and the output waits for every document.
    for stop in (signal.SIGINT, signal.SIGTERM):
        job = start_job(args)
        wait_for_records(state, sum(done_records(state).values()) + 2, job)
        job.send_signal(stop)
        printed, _ = job.communicate(timeout=60)
        assert job.returncode == 130, printed
        assert "summarize: interrupted" in printed and "run the same command again" in printed
        assert not out.exists()

    # A kill leaves no chance to clean up at all.
    job = start_job(args)
    wait_for_records(state, sum(done_records(state).values()) + 2, job)
    job.send_signal(signal.SIGKILL)
    job.wait(timeout=30)
    recorded = {doc_id for doc_id, count in done_records(state).items() if count}
    assert 6 <= len(recorded) < len(ids)

    # The last run also meets an overloaded pool: it gives way (halves, waits) and loses nothing.
    proxy.counts.clear()
    proxy.delay_s, proxy.shed = 0.0, 3
    assert main(args) == 0
    report = capsys.readouterr().out
    assert f"{len(recorded)} already done before" in report and proxy.shed == 0
    assert "in flight      limit between " in report and "(cap 2)" in report
    assert not recorded & {doc_id for doc_id, count in proxy.counts.items() if count}  # none redone
    assert set(proxy.counts) == set(ids) - recorded
    assert [row["id"] for row in output_rows(out)] == ids  # each id exactly once
    assert all(row["status"] == "done" for row in output_rows(out))
    assert set(done_records(state).values()) == {1}  # no document was ever finished twice


@pytest.fixture(scope="module")
def s3_endpoint():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=MOTO_PORT)
    server.start()
    yield f"http://127.0.0.1:{MOTO_PORT}"
    server.stop()


def test_s3_input_and_output_round_trip(fake_app_url, s3_endpoint, tmp_path, monkeypatch, capsys):
    import boto3
    import pyarrow.parquet as pq

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    s3 = boto3.client("s3", region_name="us-east-1", endpoint_url=s3_endpoint)
    s3.create_bucket(Bucket="corpus")
    for name, text in {"notes/a.txt": "Alpha is the first letter.", "notes/deep/b.md": "# Beta\n\nSecond.",
                       "notes/c.txt": "", "notes/skip.png": "binary"}.items():
        s3.put_object(Bucket="corpus", Key=name, Body=text.encode())
    args = ["--input", "s3://corpus/notes", "--output", "s3://corpus/out/summaries.parquet",
            "--s3-endpoint-url", s3_endpoint, "--url", fake_app_url, *SMALL]
    assert main(args) == 0
    assert "2 done, 0 failed, 1 empty" in capsys.readouterr().out
    body = s3.get_object(Bucket="corpus", Key="out/summaries.parquet")["Body"].read()
    table = pq.read_table(__import__("io").BytesIO(body))
    assert table.column("id").to_pylist() == ["a.txt", "c.txt", "deep/b.md"]
    assert table.column("status").to_pylist() == ["done", "empty", "done"]
    parts = s3.list_objects_v2(Bucket="corpus", Prefix="out/summaries.parquet.parts/")["Contents"]
    assert parts and all(p["Key"].rsplit("/", 1)[1].startswith("part-") for p in parts)
    # A second run finds everything done in the state on S3 and sends nothing.
    assert main(args) == 0
    assert "0 done, 0 failed, 1 empty, 0 unreadable; 2 already done before" in capsys.readouterr().out
