"""The Ray Data stages of serve mode: chunking with the model's tokenizer, and summarizing
through the app, many documents at once in one actor so that one controller paces every request.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from jobs.summarize.chunking import Chunker, ChunkPlan
from jobs.summarize.concurrency import AimdController, AimdSettings
from jobs.summarize.latency_signal import LatencyWatch
from jobs.summarize.mapreduce import Outcome, summarize_document
from jobs.summarize.prompts import Prompts
from jobs.summarize.request_gate import RequestGate
from jobs.summarize.serve_client import ServeClient, ServeSettings

logger = logging.getLogger(__name__)

# Columns of the summarize stage's output: one row per document, what the driver records.
RESULT_COLUMNS = ("id", "status", "summary", "error", "input_tokens", "output_tokens", "cost_usd",
                  "pool", "chunks", "requests", "document_tokens", "concurrency_limit")


class ChunkStage:
    """Adds each document's chunks and token count (a tokenizer per actor, loaded once)."""

    def __init__(self, tokenizer_source: str, plan: ChunkPlan) -> None:
        self._chunker = Chunker(tokenizer_source)
        self._plan = plan

    def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        tokens, chunks = self._chunker.split(row["text"], self._plan)
        return {"id": row["id"], "chunks": chunks, "document_tokens": tokens}


@dataclass(frozen=True)
class SummarizeSettings:
    serve: ServeSettings
    aimd: AimdSettings
    prompts: Prompts
    combine_budget_tokens: int
    signal_interval_s: float | None
    latency: LatencyWatch | None = None


class ServeSummarizeStage:
    """Summarizes a batch of documents concurrently through the app. Ray Data runs several
    batches of one actor at once on the actor's event loop, so every request of the job passes
    through this one gate; a document that fails becomes a `failed` row, never an exception."""

    def __init__(self, settings: SummarizeSettings) -> None:
        self._settings = settings
        self._client: ServeClient | None = None
        self._watcher: asyncio.Task | None = None

    def _started(self) -> ServeClient:
        # Made on the first call, inside the event loop its requests and tasks will run on.
        if self._client is None:
            gate = RequestGate(AimdController(self._settings.aimd))
            self._client = ServeClient(self._settings.serve, gate)
            if self._settings.signal_interval_s:
                self._watcher = asyncio.get_running_loop().create_task(
                    self._client.watch_service(self._settings.signal_interval_s, self._settings.latency)
                )
        return self._client

    async def __call__(self, batch: pa.Table) -> pa.Table:
        client = self._started()
        rows = await asyncio.gather(*(self._summarize(client, row) for row in batch.to_pylist()))
        return pa.Table.from_pylist(rows)

    async def _summarize(self, client: ServeClient, row: dict[str, Any]) -> dict[str, Any]:
        outcome = Outcome()
        result = {"id": row["id"], "chunks": len(row["chunks"]), "document_tokens": row["document_tokens"]}
        try:
            await summarize_document(
                row["chunks"], lambda messages: client.complete(messages, row["id"]),
                self._settings.prompts, self._settings.combine_budget_tokens, outcome,
            )
            result.update(status="done", summary=outcome.summary, error=None)
        except Exception as error:  # noqa: BLE001 - the document fails; the job goes on
            logger.warning("document %s failed: %s", row["id"], error)
            result.update(status="failed", summary=None, error=f"{error}" or type(error).__name__)
        result.update(
            input_tokens=outcome.input_tokens, output_tokens=outcome.output_tokens, cost_usd=outcome.cost_usd,
            pool=",".join(sorted(outcome.pools)) or None, requests=outcome.requests,
            concurrency_limit=client.gate.controller.limit,
        )
        return {column: result.get(column) for column in RESULT_COLUMNS}
