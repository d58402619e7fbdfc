"""The final output: one row per input document, in input order, as JSONL or Parquet."""

from __future__ import annotations

import io
import json
from dataclasses import asdict

import pyarrow as pa
import pyarrow.parquet as pq

from core.storage import Location
from jobs.summarize.results_store import ResultRecord

OUTPUT_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".pq": "parquet"}

# Fixed, so that every run's file has the same columns whatever its rows hold.
PARQUET_SCHEMA = pa.schema([
    ("id", pa.string()), ("status", pa.string()), ("summary", pa.string()), ("error", pa.string()),
    ("input_tokens", pa.int64()), ("output_tokens", pa.int64()), ("cost_usd", pa.float64()),
    ("pool", pa.string()), ("chunks", pa.int64()), ("requests", pa.int64()),
    ("document_tokens", pa.int64()), ("attempts", pa.int64()), ("mode", pa.string()),
    ("metadata", pa.string()),  # JSON: documents' metadata need not share one schema
    ("finished_at", pa.string()),
])


class OutputFormatError(ValueError):
    pass


def output_format(location: Location, declared: str = "auto") -> str:
    if declared != "auto":
        return declared
    for suffix, fmt in OUTPUT_FORMATS.items():
        if location.path.lower().endswith(suffix):
            return fmt
    raise OutputFormatError(
        f"{location.uri}: unknown output format; name it .jsonl or .parquet, or set output.format "
        "(--output-format jsonl|parquet)"
    )


def write_output(location: Location, fmt: str, records: list[ResultRecord]) -> None:
    """Replaces the output whole (readers never see half of it)."""
    if fmt == "jsonl":
        data = "".join(record.to_json() + "\n" for record in records).encode("utf-8")
    else:
        rows = []
        for record in records:
            row = asdict(record)
            row["metadata"] = json.dumps(row["metadata"], ensure_ascii=False, default=str)
            rows.append(row)
        buffer = io.BytesIO()
        pq.write_table(pa.Table.from_pylist(rows, schema=PARQUET_SCHEMA), buffer)
        data = buffer.getvalue()
    location.write_bytes(data)


def read_output(location: Location, fmt: str) -> list[dict]:
    """The rows of an output file (for tests and for checking a run)."""
    data = location.read_bytes()
    if fmt == "jsonl":
        return [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]
    return pq.read_table(io.BytesIO(data)).to_pylist()
