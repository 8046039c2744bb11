"""The node's persisted schema: one JSON file in data_dir, replaced atomically.

Mnesia keeps its schema in schema.DAT; we keep `data_dir/schema.json`. What goes in it (the
schema's db_nodes, the tables with their copies and attributes, ...) is the schema core's
business; this module only makes sure a crash leaves the old file or the new one, never a
half-written one, and that a file this code cannot read is reported, naming it, instead of
being taken for an empty schema (which would make the node forget its tables).

On disc: `{"format": "rabbitry.mnesia_like.schema", "version": 1, "schema": {...}}`, indented
and with sorted keys, because an operator may have to read or diff it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from monitors.durable_files import atomic_write

SCHEMA_FILE_NAME = "schema.json"
SCHEMA_FORMAT = "rabbitry.mnesia_like.schema"
SCHEMA_VERSION = 1


class SchemaFileError(Exception):
    """The schema file exists but cannot be used: damaged, foreign or from another version."""


def schema_path(data_dir: str | os.PathLike[str]) -> Path:
    """Where a node keeps its schema: `data_dir/schema.json`."""
    return Path(data_dir) / SCHEMA_FILE_NAME


def write_schema(path: str | os.PathLike[str], schema: Mapping[str, Any]) -> None:
    """Persist `schema` (JSON-serialisable) at `path`: tmp file, fsync, rename, fsync dir.

    A schema that is not JSON raises TypeError before the file is touched.
    """
    path = Path(path)
    if not isinstance(schema, Mapping):
        raise TypeError(f"{path}: the schema must be a mapping, not {type(schema).__name__}")
    doc = {"format": SCHEMA_FORMAT, "version": SCHEMA_VERSION, "schema": dict(schema)}
    try:
        text = json.dumps(doc, indent=2, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{path}: the schema is not JSON-serialisable: {exc}") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, (text + "\n").encode())


def read_schema(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The schema stored at `path`, or None if there is no file (a node's first start).

    Raises SchemaFileError naming the path for a file that is not valid JSON, not a schema
    file, or of a version this code does not read.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    hint = "restore it from a backup, or move it away to start this node with an empty schema"
    try:
        doc = json.loads(raw)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError both are ValueErrors
        raise SchemaFileError(f"{path}: schema file is damaged (not JSON: {exc}); {hint}") from None
    if not isinstance(doc, dict) or doc.get("format") != SCHEMA_FORMAT:
        raise SchemaFileError(f"{path}: not a rabbitry schema file (no format {SCHEMA_FORMAT!r})")
    version = doc.get("version")
    if version != SCHEMA_VERSION:
        raise SchemaFileError(
            f"{path}: schema file version {version!r} is not supported: this rabbitry reads "
            f"version {SCHEMA_VERSION}"
        )
    schema = doc.get("schema")
    if not isinstance(schema, dict):
        raise SchemaFileError(f"{path}: schema file has no 'schema' object; {hint}")
    return schema
