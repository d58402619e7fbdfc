"""The run's progress as Prometheus series, through Ray's metrics as the app's are: documents
of this run still to do, done and failed, tokens and dollars. The dashboard's batch row reads
them; the progress bar says the same on the terminal."""

from __future__ import annotations

from ray.util.metrics import Counter, Gauge

from core import wire
from jobs.summarize.results_store import ResultRecord


class JobMetrics:
    def __init__(self, output: str, documents: int) -> None:
        self._tags = {"output": output}
        self._documents = Gauge(wire.BATCH_DOCUMENTS, "Documents of a batch run, by state (to_do, done, failed).",
                                tag_keys=("output", "state"))
        self._tokens = Counter(wire.BATCH_TOKENS_TOTAL, "Prompt and completion tokens of a batch run.",
                               tag_keys=("output",))
        self._usd = Counter(wire.BATCH_COST_USD_TOTAL, "Dollars a batch run was charged.", tag_keys=("output",))
        self._counts = {"to_do": documents, "done": 0, "failed": 0}
        self._export()

    def update(self, record: ResultRecord) -> None:
        self._counts["to_do"] -= 1
        self._counts["failed" if record.status == "failed" else "done"] += 1
        tokens = record.input_tokens + record.output_tokens
        if tokens:
            self._tokens.inc(tokens, self._tags)
        if record.cost_usd:
            self._usd.inc(record.cost_usd, self._tags)
        self._export()

    def _export(self) -> None:
        for state, count in self._counts.items():
            self._documents.set(count, {**self._tags, "state": state})
