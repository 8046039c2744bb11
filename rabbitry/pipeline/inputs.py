"""The pipeline's input and output checks, and the parsing of one message: pure functions.

Paths are checked before Spark starts (it takes seconds to start, and a typo should cost
none). A message is `{"id": "...", "payload": ...}`; every line or row that is not one is a
reject, with its line number and the reason, never silently dropped.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

JSONL, PARQUET = "jsonl", "parquet"
DEFAULT_MAX_PAYLOAD = 256 * 1024  # bytes of a payload's UTF-8 (or JSON) encoding
MAX_ID = 512  # characters: an id is a key, not a payload
REJECT_EXCERPT = 200  # characters of the offending line kept in the reject file


class PipelineInputError(ValueError):
    """The input or output is unusable; raised before Spark starts."""


@dataclass(frozen=True)
class Message:
    line: int  # 1-based line (JSON lines) or row (Parquet) number
    id: str
    payload: str


@dataclass(frozen=True)
class Reject:
    line: int
    reason: str
    text: str

    def to_json(self) -> str:
        return json.dumps({"line": self.line, "reason": self.reason, "text": self.text})


def detect_format(path: Path) -> str:
    """Parquet for a .parquet file or a directory of part files, else JSON lines."""
    if path.suffix == ".parquet":
        return PARQUET
    if path.is_dir():
        names = [p.name for p in path.iterdir() if not p.name.startswith(("_", "."))]
        if names and all(n.endswith(".parquet") for n in names):
            return PARQUET
        if any(n.endswith(".parquet") for n in names):
            return PARQUET
    return JSONL


def check_paths(
    input_path: str, output_path: str, overwrite: bool = False
) -> tuple[Path, Path, str]:
    """Check the input exists and is readable, and that the output can be written; return the
    resolved paths and the input format. Raises PipelineInputError naming what to fix."""
    source = Path(input_path).expanduser().resolve()
    if not source.exists():
        raise PipelineInputError(f"input {source} does not exist")
    if not os.access(source, os.R_OK):
        raise PipelineInputError(f"input {source} is not readable")
    if source.is_dir() and not any(source.iterdir()):
        raise PipelineInputError(f"input directory {source} is empty")
    target = Path(output_path).expanduser().resolve()
    if target == source:
        raise PipelineInputError("output and input are the same path")
    if target in source.parents:
        raise PipelineInputError(
            f"input {source} is inside the output {target}, which the job replaces"
        )
    if source == rejects_path(target):
        raise PipelineInputError(
            f"input {source} is the output's reject file, which the job rewrites"
        )
    if target.exists() and not overwrite:
        raise PipelineInputError(f"output {target} already exists; remove it or pass --overwrite")
    parent = target.parent
    if not parent.exists():
        raise PipelineInputError(f"output directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PipelineInputError(f"output directory {parent} is not writable")
    return source, target, detect_format(source)


def rejects_path(output: Path) -> Path:
    """Where the rejects go: next to the output, `<output>.rejects.jsonl`."""
    return output.with_name(output.name + ".rejects.jsonl")


def _excerpt(text: str) -> str:
    return text if len(text) <= REJECT_EXCERPT else text[:REJECT_EXCERPT] + "..."


def _encodable(text: str) -> bool:
    """False for text JSON gave a lone surrogate (`"\\ud800"`): it has no UTF-8, so it could
    be neither a Redis key nor an output string (it crashed the task before)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_message(line: int, data: Any, raw: str, max_payload: int) -> Message | Reject:
    """Validate one decoded record."""
    if not isinstance(data, dict):
        return Reject(line, f"expected a JSON object, got {type(data).__name__}", _excerpt(raw))
    mid = data.get("id")
    if mid is None or mid == "":
        return Reject(line, "missing id", _excerpt(raw))
    if isinstance(mid, bool) or not isinstance(mid, str | int):
        return Reject(
            line, f"id must be a string or an integer, got {type(mid).__name__}", _excerpt(raw)
        )
    mid = str(mid)
    if len(mid) > MAX_ID:
        return Reject(line, f"id longer than {MAX_ID} characters", _excerpt(raw))
    if not _encodable(mid):
        return Reject(line, "id is not valid Unicode (a lone surrogate escape)", _excerpt(raw))
    if "payload" not in data:
        return Reject(line, "missing payload", _excerpt(raw))
    payload = data["payload"]
    text = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    if not _encodable(text):
        return Reject(line, "payload is not valid Unicode (a lone surrogate escape)", _excerpt(raw))
    size = len(text.encode("utf-8"))
    if size > max_payload:
        return Reject(line, f"payload of {size} bytes exceeds {max_payload}", _excerpt(raw))
    return Message(line, mid, text)


def parse_line(line: int, raw: str, max_payload: int) -> Message | Reject | None:
    """One JSON line; None for a blank line (not a message, not an error)."""
    if not raw.strip():
        return None
    try:
        data = json.loads(raw)
    except ValueError as exc:
        return Reject(line, f"malformed JSON: {exc}", _excerpt(raw))
    return check_message(line, data, raw, max_payload)
