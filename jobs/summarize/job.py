"""One run of the job: read the corpus, skip what earlier runs finished, summarize the rest,
record each document as it finishes, and write the output once every document has a record."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

from core.model_store import resolve_model_source
from core.storage import Location, locate
from jobs.summarize.chunking import Chunker, ChunkPlan, plan_chunks
from jobs.summarize.config import SummarizeConfig
from jobs.summarize.inputs import Document, InputError, InputProblem, read_documents
from jobs.summarize.outputs import output_format, write_output
from jobs.summarize.progress import Progress
from jobs.summarize.prompts import Prompts
from jobs.summarize.report import RunReport
from jobs.summarize.results_store import ResultRecord, ResultsStore, StoredResults

logger = logging.getLogger(__name__)

STATE_SUFFIX = ".parts"
MAX_PROBLEMS_SHOWN = 20


@dataclass
class RunPlan:
    to_send: list[Document] = field(default_factory=list)
    not_sent: list[ResultRecord] = field(default_factory=list)  # empty and unreadable documents
    to_record: list[ResultRecord] = field(default_factory=list)  # of those, the ones not yet recorded so
    already_done: int = 0


def plan_run(documents: list[Document], stored: StoredResults, mode: str) -> RunPlan:
    """What this run does with each document: skip it (done before), record it without sending
    it (empty, unreadable), or summarize it (new, or failed before: retried)."""
    plan = RunPlan()
    for document in documents:
        if stored.is_done(document.id):
            plan.already_done += 1
        elif document.status != "ok":
            record = ResultRecord(document.id, document.status, error=document.error, mode=mode,
                                  metadata=document.metadata, attempts=0)
            plan.not_sent.append(record)
            earlier = stored.records.get(document.id)
            if earlier is None or (earlier.status, earlier.error) != (record.status, record.error):
                plan.to_record.append(record)
        else:
            plan.to_send.append(document)
    return plan


def state_location(config: SummarizeConfig, output: Location) -> Location:
    if config.output.state_uri:
        return locate(config.output.state_uri, endpoint_url=config.s3.endpoint_url, region=config.s3.region)
    return output.sibling(STATE_SUFFIX)


def chunk_plan(config: SummarizeConfig, chunker: Chunker) -> ChunkPlan:
    prompts = Prompts.from_config(config.prompt)
    return plan_chunks(
        config.chunking.context_tokens, config.prompt.max_tokens,
        chunker.count_prompt(prompts.summarize("")), chunker.count_prompt(prompts.combine(["", ""])),
        config.chunking.chunk_tokens, config.chunking.overlap_tokens,
    )


def run(config: SummarizeConfig, *, api_key: str | None = None) -> RunReport:
    """Raises InputError, StorageError, ConfigError or AppUnavailable before any document is
    sent; after that every outcome, an interruption included, is in the report."""
    config.require_paths()
    where = {"endpoint_url": config.s3.endpoint_url, "region": config.s3.region}
    source, target = locate(config.input.uri, **where), locate(config.output.uri, **where)
    fmt = output_format(target, config.output.format)  # a bad name fails now, not after the work
    reading = read_documents(source, declared_format=config.input.format, id_field=config.input.id_field,
                             text_field=config.input.text_field, suffixes=tuple(config.input.suffixes))
    if reading.problems and config.input.on_invalid == "stop":
        shown = [str(problem) for problem in reading.problems[:MAX_PROBLEMS_SHOWN]]
        more = len(reading.problems) - len(shown)
        raise InputError(
            f"{len(reading.problems)} problem(s) in the input; nothing was sent:\n  " + "\n  ".join(shown)
            + (f"\n  ... and {more} more" if more > 0 else "")
            + "\n(fix them, or set input.on_invalid: skip to summarize the rest)"
        )
    store = ResultsStore(state_location(config, target))
    store.lock()
    try:
        return _run_locked(config, reading.documents, reading.problems, len(reading.ignored_files), store, target,
                           fmt, api_key or os.environ.get(config.serve.api_key_env))
    finally:
        store.close()


def _run_locked(
    config: SummarizeConfig, documents: list[Document], problems: list[InputProblem], ignored_files: int,
    store: ResultsStore, target: Location, fmt: str, api_key: str | None,
) -> RunReport:
    stored = store.load()
    if stored.torn_lines:
        logger.warning("%d torn result lines from a killed run are ignored; their documents are redone",
                       stored.torn_lines)
    plan = plan_run(documents, stored, config.mode)
    model_source = chunks = None
    if plan.to_send:  # what can be refused is refused now, before anything is sent
        model_source = resolve_model_source(config.model.source)
        chunks = chunk_plan(config, Chunker(model_source))
        if config.mode == "serve":
            from jobs.summarize.serve_client import check_app

            check_app(config.serve.url, config.model.requested, api_key)
    report = RunReport(documents=len(documents), already_done=plan.already_done,
                       problems=[str(problem) for problem in problems], ignored_files=ignored_files,
                       concurrency_cap=config.concurrency.max if config.mode == "serve" else None)
    metadata = {document.id: document.metadata for document in documents}
    started = time.monotonic()
    try:
        for record in plan.to_record:
            store.append(record)
        for record in plan.not_sent:
            report.count(record)
        if plan.to_send:
            _summarize(config, plan.to_send, chunks, model_source, stored, metadata, store, report, api_key)
    except KeyboardInterrupt:
        report.interrupted = True
    except Exception as error:  # noqa: BLE001 - what was recorded stays; the report says what stopped it
        logger.exception("the run stopped early")
        report.error = f"{type(error).__name__}: {' '.join(str(error).split())[:500]}"
    finally:
        store.flush()
        report.elapsed_s = time.monotonic() - started
    if not (report.interrupted or report.error):
        final = store.load()
        records = [final.records[document.id] for document in documents if document.id in final.records]
        if len(records) == len(documents):
            write_output(target, fmt, records)
            report.output = target.uri
    return report


def _summarize(
    config: SummarizeConfig, documents: list[Document], plan: ChunkPlan, model_source: str, stored: StoredResults,
    metadata: dict[str, Any], store: ResultsStore, report: RunReport, api_key: str | None,
) -> None:
    from jobs.summarize.job_metrics import JobMetrics
    from jobs.summarize.ray_session import ensure_ray, release_ray

    started_ray = ensure_ray()
    progress = Progress(len(documents), enabled=config.progress)
    metrics = JobMetrics(config.output.uri or "", len(documents))
    try:
        for row in _results(config, documents, plan, model_source, api_key):
            record = ResultRecord(
                **{key: row[key] for key in ("id", "status", "summary", "error", "input_tokens", "output_tokens",
                                             "cost_usd", "pool", "chunks", "requests", "document_tokens")},
                attempts=stored.attempts.get(row["id"], 0) + 1, mode=config.mode, metadata=metadata[row["id"]],
            )
            store.append(record)
            report.count(record)
            report.observe_limit(row.get("concurrency_limit"))
            progress.update(record, row.get("concurrency_limit"))
            metrics.update(record)
    finally:
        progress.close()
        release_ray(started_ray)


def _results(config: SummarizeConfig, documents: list[Document], plan: ChunkPlan, model_source: str,
             api_key: str | None) -> Iterator[dict[str, Any]]:
    if config.mode == "serve":
        from jobs.summarize.pipeline import serve_results

        return serve_results(config, documents, plan, model_source, api_key)
    from jobs.summarize.engine_mode import EngineMeter, engine_results, engine_usd_per_s, ray_pass

    return engine_results(config, documents, plan, ray_pass(config, model_source, plan),
                          EngineMeter(engine_usd_per_s(config)))
