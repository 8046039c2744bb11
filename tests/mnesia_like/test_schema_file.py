"""The schema file: atomic replacement, reload, and clear errors for files it cannot read."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mnesia_like import schema_file
from mnesia_like.schema_file import (
    SCHEMA_VERSION,
    SchemaFileError,
    read_schema,
    schema_path,
    write_schema,
)

SCHEMA = {
    "db_nodes": ["a@127.0.0.1", "b@127.0.0.1"],
    "tables": {"rabbit_queue": {"disc_copies": ["a@127.0.0.1"], "attributes": ["name", "pid"]}},
}


def test_write_then_read_round_trips(tmp_path: Path) -> None:
    path = schema_path(tmp_path / "data")
    assert path == tmp_path / "data" / "schema.json"
    assert read_schema(path) is None  # a first start: no file is no schema, not an error
    write_schema(path, SCHEMA)
    assert read_schema(path) == SCHEMA
    doc = json.loads(path.read_text())
    assert doc["version"] == SCHEMA_VERSION and doc["format"] == schema_file.SCHEMA_FORMAT
    write_schema(path, {"db_nodes": []})
    assert read_schema(path) == {"db_nodes": []}
    assert sorted(p.name for p in path.parent.iterdir()) == ["schema.json"]  # no tmp left


def test_a_crash_before_the_rename_leaves_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = schema_path(tmp_path)
    write_schema(path, SCHEMA)

    def crash(*_args: object) -> None:
        raise OSError("simulated crash before the rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated"):
        write_schema(path, {"db_nodes": ["other"]})
    monkeypatch.undo()
    assert read_schema(path) == SCHEMA
    # A tmp file left by a real crash is never read, and the next write replaces it.
    (tmp_path / "schema.json.tmp").write_text("{half a fi")
    assert read_schema(path) == SCHEMA
    write_schema(path, {"db_nodes": ["c"]})
    assert read_schema(path) == {"db_nodes": ["c"]}


def test_a_schema_that_is_not_json_writes_nothing(tmp_path: Path) -> None:
    path = schema_path(tmp_path)
    write_schema(path, SCHEMA)
    with pytest.raises(TypeError, match=r"schema\.json.*not JSON-serialisable"):
        write_schema(path, {"db_nodes": {"a", "b"}})
    with pytest.raises(TypeError, match="mapping"):
        write_schema(path, ["a"])  # type: ignore[arg-type]
    assert read_schema(path) == SCHEMA


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"format": "rabbitry.mnesia_like.schema", "vers', "damaged"),
        (b"\xff\xfe garbage", "damaged"),
        (b"", "damaged"),
        (b"[1, 2]", "not a rabbitry schema file"),
        (b'{"db_nodes": []}', "not a rabbitry schema file"),
        (b'{"format": "rabbitry.mnesia_like.schema", "version": 1}', "no 'schema' object"),
    ],
)
def test_a_damaged_or_foreign_file_raises_naming_the_path(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = schema_path(tmp_path)
    path.write_bytes(content)
    with pytest.raises(SchemaFileError, match=message) as info:
        read_schema(path)
    assert str(path) in str(info.value)


def test_an_unknown_version_raises_naming_path_and_versions(tmp_path: Path) -> None:
    path = schema_path(tmp_path)
    doc = {"format": schema_file.SCHEMA_FORMAT, "version": SCHEMA_VERSION + 1, "schema": {}}
    path.write_text(json.dumps(doc))
    with pytest.raises(SchemaFileError) as info:
        read_schema(path)
    text = str(info.value)
    assert str(path) in text
    assert f"version {SCHEMA_VERSION + 1} is not supported" in text
    assert f"reads version {SCHEMA_VERSION}" in text
