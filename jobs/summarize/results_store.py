"""Results as the job goes, so that stopping it loses nothing and a rerun resumes.

The state is a folder of append-only JSONL part files, one record per line, keyed by document
id; a run never rewrites what another wrote. Locally a run appends to its own part file and
flushes (and fsyncs) each record as it comes, so a killed job loses at most the line being
written, which is recognizably torn and ignored. An object store cannot append, so there a
run writes a new part object every `flush_interval_s` (and when it stops); a hard kill loses
at most that interval's results, which the next run redoes. Reading merges every part: a
`done` record is final, otherwise a document's latest record stands.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

from core.storage import Location, StorageError

RecordStatus = Literal["done", "failed", "empty", "unreadable"]
PART_PREFIX = "part-"
OBJECT_FLUSH_INTERVAL_S = 2.0


@dataclass
class ResultRecord:
    id: str
    status: RecordStatus
    summary: str | None = None
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    pool: str | None = None  # the pools that served it, comma-separated
    chunks: int = 0
    requests: int = 0
    document_tokens: int | None = None
    attempts: int = 1  # runs that recorded a summary or a failure for it, this one included
    mode: str = "serve"
    metadata: dict[str, Any] = field(default_factory=dict)
    finished_at: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, default=str)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ResultRecord:
        known = {name: raw[name] for name in cls.__dataclass_fields__ if name in raw}
        return cls(**known)


@dataclass
class StoredResults:
    """What earlier runs left: the standing record per id, and how many runs tried each."""

    records: dict[str, ResultRecord] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    torn_lines: int = 0

    def is_done(self, document_id: str) -> bool:
        record = self.records.get(document_id)
        return record is not None and record.status == "done"


class ResultsStore:
    def __init__(
        self, folder: Location, *, flush_interval_s: float = OBJECT_FLUSH_INTERVAL_S, appendable: bool | None = None,
    ) -> None:
        """`appendable`: whether the folder's files can be appended to; by default a local
        folder's can and an object store's cannot."""
        self.folder = folder
        self._appendable = folder.is_local if appendable is None else appendable
        self._run = f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S%f}-{uuid.uuid4().hex[:6]}"
        self._flush_interval_s = flush_interval_s
        self._handle = None  # local: this run's part file, opened on first append
        self._pending: list[str] = []  # object store: lines not yet in a part object
        self._sequence = 0
        self._last_flush = time.monotonic()
        self._lock = None

    def lock(self) -> None:
        """One run at a time per local results folder: two would summarize the same documents.
        The kernel drops the lock with its process, so a killed run never leaves it behind.
        (An object store has no such lock: do not start two runs on one output there.)"""
        if not self.folder.is_local:
            return
        self.folder.make_dir()
        handle = open(os.path.join(self.folder.path, ".lock"), "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise StorageError(f"{self.folder.uri}: another run of the job is writing these results") from None
        self._lock = handle

    def load(self) -> StoredResults:
        stored = StoredResults()
        if not self.folder.exists():
            return stored
        # Part names start with their run's UTC time: sorted names are the order of the runs.
        for name in self.folder.list_files():
            if not name.rsplit("/", 1)[-1].startswith(PART_PREFIX):
                continue
            for line in self.folder.child(name).read_bytes().decode("utf-8", "replace").splitlines():
                if not line.strip():
                    continue
                try:
                    record = ResultRecord.from_dict(json.loads(line))
                except (ValueError, TypeError):
                    stored.torn_lines += 1  # a write cut short by a kill: that document is redone
                    continue
                if record.status in ("done", "failed"):
                    stored.attempts[record.id] = stored.attempts.get(record.id, 0) + 1
                if not stored.is_done(record.id):
                    stored.records[record.id] = record
        return stored

    def append(self, record: ResultRecord) -> None:
        line = record.to_json() + "\n"
        if self._appendable:
            if self._handle is None:
                self.folder.make_dir()
                self._handle = open(os.path.join(self.folder.path, f"{PART_PREFIX}{self._run}.jsonl"), "a",
                                    encoding="utf-8")
            self._handle.write(line)
            self._handle.flush()
            os.fsync(self._handle.fileno())
            return
        self._pending.append(line)
        if time.monotonic() - self._last_flush >= self._flush_interval_s:
            self.flush()

    def flush(self) -> None:
        """Writes what an object store has not got yet as a part object of its own."""
        self._last_flush = time.monotonic()
        if not self._pending:
            return
        self._sequence += 1
        part = self.folder.child(f"{PART_PREFIX}{self._run}-{self._sequence:06d}.jsonl")
        # On a failed write the lines stay pending for the next flush, and the error goes up.
        part.write_bytes("".join(self._pending).encode("utf-8"))
        self._pending.clear()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        try:
            self.flush()
        finally:
            if self._lock is not None:
                self._lock.close()  # closing the file releases the lock
                self._lock = None
