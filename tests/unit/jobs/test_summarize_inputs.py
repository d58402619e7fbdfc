"""Summarize job: reading JSONL, Parquet and folders; every bad line named with its place."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.storage import locate
from jobs.summarize.inputs import InputError, input_format, read_documents


def read(path, **kwargs):
    return read_documents(locate(str(path)), **kwargs)


def test_jsonl_documents_with_metadata_statuses_and_blank_lines(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text(
        '{"id": "a", "text": "Alpha text.", "metadata": {"lang": "en"}}\n'
        "\n"
        '{"id": 7, "text": "Seven.", "source": "web"}\n'
        '{"id": "blank", "text": "  \\n "}\n'
        '{"id": "null", "text": null}\n'
    )
    reading = read(path)
    assert not reading.problems
    assert [(d.id, d.status) for d in reading.documents] == [
        ("a", "ok"), ("7", "ok"), ("blank", "empty"), ("null", "unreadable")]
    assert reading.documents[0].metadata == {"lang": "en"}
    assert reading.documents[1].metadata == {"source": "web"}  # other fields, when no metadata object
    assert reading.documents[1].where == f"{path}:3"
    assert reading.documents[3].error == "'text' is NoneType, not text"


def test_bad_jsonl_lines_are_named_by_line_and_the_rest_still_read(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text(
        '{"id": "a", "text": "fine"}\n'
        '{"id": "b", "text": "cut off\n'
        '["a", "list"]\n'
        '{"text": "no id"}\n'
        '{"id": "c"}\n'
        '{"id": "", "text": "empty id"}\n'
        '{"id": "a", "text": "again"}\n'
        '{"id": "d", "text": "fine too"}\n'
    )
    reading = read(path)
    assert [d.id for d in reading.documents] == ["a", "d"]
    problems = [str(p) for p in reading.problems]
    assert problems[0].startswith(f"{path}:2: not a JSON object")
    assert problems[1] == f"{path}:3: not a JSON object but a list"
    assert problems[2] == f"{path}:4: 'id' missing"
    assert problems[3] == f"{path}:5: 'text' missing (document 'c')"
    assert problems[4] == f"{path}:6: 'id' '' is not a non-empty string or integer"
    assert problems[5] == f"{path}:7: duplicate id 'a' (first at {path}:1)"


def test_custom_field_names(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text('{"doc_id": "x", "body": "Some text."}\n')
    reading = read(path, id_field="doc_id", text_field="body")
    assert [(d.id, d.text) for d in reading.documents] == [("x", "Some text.")]


def test_parquet_rows(tmp_path):
    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"id": ["a", "b", None, "a"], "text": ["Alpha.", "", "orphan", "dup"],
                             "year": [2001, 2002, 2003, 2004]}), path)
    reading = read(path)
    assert [(d.id, d.status, d.metadata) for d in reading.documents] == [
        ("a", "ok", {"year": 2001}), ("b", "empty", {"year": 2002})]
    assert [str(p) for p in reading.problems] == [
        f"{path} row 2: 'id' missing", f"{path} row 3: duplicate id 'a' (first at {path} row 0)"]


def test_parquet_without_the_text_column_names_the_columns(tmp_path):
    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"id": ["a"], "body": ["x"]}), path)
    with pytest.raises(InputError, match=r"no column 'text'; columns: \['id', 'body'\]"):
        read(path)


def test_folder_documents_are_named_by_relative_path(tmp_path):
    (tmp_path / "corpus" / "sub").mkdir(parents=True)
    (tmp_path / "corpus" / "a.txt").write_text("Alpha.")
    (tmp_path / "corpus" / "sub" / "b.md").write_text("# Beta\n\nText.")
    (tmp_path / "corpus" / "empty.txt").write_text("\n")
    (tmp_path / "corpus" / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    (tmp_path / "corpus" / "image.png").write_bytes(b"\x89PNG")
    reading = read(tmp_path / "corpus")
    assert [(d.id, d.status) for d in reading.documents] == [
        ("a.txt", "ok"), ("empty.txt", "empty"), ("latin1.txt", "unreadable"), ("sub/b.md", "ok")]
    assert reading.documents[2].error.startswith("not UTF-8 text")
    assert reading.ignored_files == ["image.png"]


def test_inputs_that_cannot_be_read_at_all(tmp_path):
    with pytest.raises(InputError, match="no such file or folder"):
        read(tmp_path / "missing.csv")
    with pytest.raises(InputError, match="no such file"):
        read(tmp_path / "missing.jsonl")
    (tmp_path / "notes.csv").write_text("id,text\n")
    with pytest.raises(InputError, match="cannot tell the input format"):
        read(tmp_path / "notes.csv")
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(InputError, match="not a readable Parquet file"):
        read(tmp_path / "bad.parquet")
    assert input_format(locate(str(tmp_path / "notes.csv")), "jsonl") == "jsonl"
