"""The progress bar: documents, tokens, dollars so far, the concurrency the service allows, ETA."""

from __future__ import annotations

import sys

from tqdm import tqdm

from jobs.summarize.results_store import ResultRecord


class Progress:
    def __init__(self, total: int, *, enabled: bool = True) -> None:
        self._bar = tqdm(total=total, unit="doc", desc="summarize", file=sys.stderr, disable=not enabled,
                         dynamic_ncols=True)
        self._tokens = 0
        self._usd = 0.0
        self._failed = 0

    def update(self, record: ResultRecord, concurrency: int | None = None) -> None:
        self._tokens += record.input_tokens + record.output_tokens
        self._usd += record.cost_usd or 0.0
        self._failed += record.status == "failed"
        postfix = {"tokens": f"{self._tokens:,}", "usd": f"{self._usd:.6f}", "failed": self._failed}
        if concurrency is not None:
            postfix["in_flight_limit"] = concurrency
        self._bar.set_postfix(postfix, refresh=False)
        self._bar.update(1)

    def close(self) -> None:
        self._bar.close()
