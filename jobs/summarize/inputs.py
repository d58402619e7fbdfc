"""Reading a corpus: a JSONL file, a Parquet file, or a folder of text files, into documents.

Every problem names its file and line (or row) so that it can be fixed; none of them stops the
reading, so one run lists them all. Empty and unreadable documents are documents too, with a
status of their own: they are recorded, never sent.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from core.storage import Location, StorageError

DocumentStatus = Literal["ok", "empty", "unreadable"]
JSONL_SUFFIXES = (".jsonl", ".ndjson")
PARQUET_SUFFIXES = (".parquet", ".pq")


class InputError(Exception):
    """An input that cannot be read at all: missing, unknown format, wrong columns."""


@dataclass(frozen=True)
class Document:
    id: str
    text: str | None
    where: str  # file:line, file row N, or the file itself: what a person opens to look
    status: DocumentStatus = "ok"
    error: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class InputProblem:
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


@dataclass
class InputReading:
    documents: list[Document] = field(default_factory=list)
    problems: list[InputProblem] = field(default_factory=list)
    ignored_files: list[str] = field(default_factory=list)


def input_format(location: Location, declared: str = "auto") -> str:
    if declared != "auto":
        return declared
    if location.is_dir():
        return "folder"
    name = location.path.lower()
    if name.endswith(JSONL_SUFFIXES):
        return "jsonl"
    if name.endswith(PARQUET_SUFFIXES):
        return "parquet"
    if not location.exists():
        raise InputError(f"{location.uri}: no such file or folder")
    raise InputError(
        f"{location.uri}: cannot tell the input format from its name; use a .jsonl or .parquet "
        "file, a folder, or set input.format (--input-format)"
    )


def read_documents(
    location: Location, *, declared_format: str = "auto", id_field: str = "id", text_field: str = "text",
    suffixes: tuple[str, ...] = (".txt", ".md"),
) -> InputReading:
    fmt = input_format(location, declared_format)
    try:
        if fmt == "folder":
            reading = _read_folder(location, suffixes)
        elif fmt == "jsonl":
            reading = _read_jsonl(location, id_field, text_field)
        else:
            reading = _read_parquet(location, id_field, text_field)
    except StorageError as error:
        raise InputError(str(error)) from None
    reading.documents = _without_duplicates(reading.documents, reading.problems)
    return reading


def _read_jsonl(location: Location, id_field: str, text_field: str) -> InputReading:
    reading = InputReading()
    raw = location.read_bytes()
    name = location.uri
    for number, line in enumerate(raw.split(b"\n"), start=1):
        where = f"{name}:{number}"
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            reading.problems.append(InputProblem(where, f"not a JSON object: {error}"))
            continue
        if not isinstance(row, dict):
            reading.problems.append(InputProblem(where, f"not a JSON object but a {type(row).__name__}"))
            continue
        document = _document(row, where, id_field, text_field, reading.problems)
        if document is not None:
            reading.documents.append(document)
    return reading


def _read_parquet(location: Location, id_field: str, text_field: str) -> InputReading:
    reading = InputReading()
    try:
        table = pq.read_table(io.BytesIO(location.read_bytes()))
    except (pa.ArrowInvalid, OSError) as error:
        raise InputError(f"{location.uri}: not a readable Parquet file: {error}") from None
    missing = [column for column in (id_field, text_field) if column not in table.column_names]
    if missing:
        raise InputError(
            f"{location.uri}: no column {', '.join(map(repr, missing))}; columns: {table.column_names}"
        )
    for number, row in enumerate(table.to_pylist()):
        document = _document(row, f"{location.uri} row {number}", id_field, text_field, reading.problems)
        if document is not None:
            reading.documents.append(document)
    return reading


def _document(
    row: dict[str, Any], where: str, id_field: str, text_field: str, problems: list[InputProblem]
) -> Document | None:
    raw_id = row.get(id_field)
    if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)) or str(raw_id).strip() == "":
        what = "missing" if raw_id is None else f"{raw_id!r} is not a non-empty string or integer"
        problems.append(InputProblem(where, f"{id_field!r} {what}"))
        return None
    if text_field not in row:
        problems.append(InputProblem(where, f"{text_field!r} missing (document {raw_id!r})"))
        return None
    metadata = row.get("metadata") if isinstance(row.get("metadata"), dict) else {
        key: value for key, value in row.items() if key not in (id_field, text_field)
    }
    text = row[text_field]
    if not isinstance(text, str):
        return Document(str(raw_id), None, where, "unreadable",
                        f"{text_field!r} is {type(text).__name__}, not text", metadata)
    return Document(str(raw_id), text, where, "ok" if text.strip() else "empty", None, metadata)


def _read_folder(location: Location, suffixes: tuple[str, ...]) -> InputReading:
    reading = InputReading()
    wanted = tuple(suffix.lower() for suffix in suffixes)
    for relative in location.list_files():
        if not relative.lower().endswith(wanted):
            reading.ignored_files.append(relative)
            continue
        where = location.child(relative).uri
        try:
            text = location.child(relative).read_bytes().decode("utf-8")
        except StorageError as error:
            reading.documents.append(Document(relative, None, where, "unreadable", str(error)))
            continue
        except UnicodeDecodeError as error:
            reading.documents.append(Document(relative, None, where, "unreadable", f"not UTF-8 text: {error}"))
            continue
        reading.documents.append(Document(relative, text, where, "ok" if text.strip() else "empty"))
    if not reading.documents and not reading.ignored_files and not location.exists():
        raise InputError(f"{location.uri}: no such folder")
    return reading


def _without_duplicates(documents: list[Document], problems: list[InputProblem]) -> list[Document]:
    """The first document of each id; every later one is a problem naming where the first is."""
    first: dict[str, Document] = {}
    kept = []
    for document in documents:
        earlier = first.get(document.id)
        if earlier is not None:
            problems.append(InputProblem(document.where, f"duplicate id {document.id!r} (first at {earlier.where})"))
            continue
        first[document.id] = document
        kept.append(document)
    return kept
