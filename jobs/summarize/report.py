"""The run's final report: what was done, what it cost, how fast, and what is left."""

from __future__ import annotations

from dataclasses import dataclass, field

from jobs.summarize.results_store import ResultRecord


@dataclass
class RunReport:
    documents: int = 0  # in the input
    already_done: int = 0  # done by earlier runs, skipped by this one
    done: int = 0  # by this run
    failed: int = 0
    empty: int = 0
    unreadable: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    cost_known: bool = True  # false when the service reported no cost for some request
    elapsed_s: float = 0.0
    interrupted: bool = False
    error: str | None = None  # what stopped the run early, if anything did
    output: str | None = None  # the final output's URI, once written
    concurrency_seen: tuple[int, int] | None = None  # lowest and highest in-flight limit (serve mode)
    concurrency_cap: int | None = None
    ignored_files: int = 0  # files of a folder input without a document suffix
    problems: list[str] = field(default_factory=list)  # skipped input lines and rows
    failures: list[str] = field(default_factory=list)  # "id: error" of documents failed this run

    def count(self, record: ResultRecord) -> None:
        if record.status == "done":
            self.done += 1
        elif record.status == "failed":
            self.failed += 1
            self.failures.append(f"{record.id}: {record.error}")
        elif record.status == "empty":
            self.empty += 1
        else:
            self.unreadable += 1
        self.input_tokens += record.input_tokens
        self.output_tokens += record.output_tokens
        if record.status == "done" and record.cost_usd is None:
            self.cost_known = False
        self.cost_usd += record.cost_usd or 0.0

    def observe_limit(self, limit: int | None) -> None:
        if limit is None:
            return
        low, high = self.concurrency_seen or (limit, limit)
        self.concurrency_seen = (min(low, limit), max(high, limit))

    @property
    def settled(self) -> int:
        """Documents with a final answer: summarized (now or before), empty or unreadable."""
        return self.already_done + self.done + self.empty + self.unreadable

    @property
    def usd_per_document(self) -> float | None:
        return self.cost_usd / self.done if self.done else None

    @property
    def documents_per_s(self) -> float | None:
        return self.done / self.elapsed_s if self.elapsed_s > 0 else None

    def render(self) -> str:
        cost = _usd(self.cost_usd) + ("" if self.cost_known else " (some requests reported no cost)")
        per_doc = _usd(self.usd_per_document) if self.usd_per_document is not None else "-"
        rate = f"{self.documents_per_s:.3g}" if self.documents_per_s is not None else "-"
        lines = [
            "summarize: " + ("interrupted" if self.interrupted else "stopped early" if self.error else "finished"),
            f"  documents      {self.documents} in the input; {self.settled} settled, {self.failed} failed, "
            f"{self.documents - self.settled - self.failed} not reached",
            f"  this run       {self.done} done, {self.failed} failed, {self.empty} empty, "
            f"{self.unreadable} unreadable; {self.already_done} already done before",
            f"  tokens         {self.input_tokens} in, {self.output_tokens} out",
            f"  cost           {cost}; {per_doc} per document",
            f"  speed          {rate} documents/s over {self.elapsed_s:.1f} s",
        ]
        if self.concurrency_seen:
            low, high = self.concurrency_seen
            lines.append(f"  in flight      limit between {low} and {high} requests (cap {self.concurrency_cap})")
        if self.ignored_files:
            lines.append(f"  ignored        {self.ignored_files} file(s) of the input folder without a document suffix")
        if self.output:
            lines.append(f"  output         {self.output}")
        for label, items in (("skipped input", self.problems), ("failed", self.failures)):
            for item in items[:10]:
                lines.append(f"  {label:<14} {item}")
            if len(items) > 10:
                lines.append(f"  {label:<14} ... and {len(items) - 10} more")
        if self.error:
            lines.append(f"  stopped by     {self.error}")
        if self.interrupted or self.error or self.failed:
            lines.append("  run the same command again to finish: done documents are not redone")
        return "\n".join(lines)


def _usd(value: float) -> str:
    """Six decimals down to a hundredth of a cent; below, a small model's fractions keep their digits."""
    return f"${value:.6f}" if value >= 1e-4 or value == 0 else f"${value:.3e}"
