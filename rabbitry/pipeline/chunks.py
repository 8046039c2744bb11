"""One claim batch of input (a slice of an Arrow batch) parsed into columns, and the verdict
columns built from it: the pipeline's Python pass without a Python object per message where
the input allows.

The fast path parses a slice of JSON lines with Arrow's C++ JSON reader and checks it with
Arrow compute; Parquet rows with string `id` and `payload` columns skip the parse. It only
vouches for a slice in which every line is one object with a non-empty string id and a string
payload within the limits, and nothing that Arrow reads differently from Python's json. Any
other slice (a reject, a blank line, an integer id, a payload that is an object, ...) takes the
row-at-a-time checks of inputs.py, which define the rules. The two give the same verdicts
(tests/pipeline/test_chunks.py compares them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from rabbitry.pipeline.inputs import (
    JSONL,
    MAX_ID,
    Message,
    Reject,
    check_message,
    parse_line,
)
from rabbitry.spark.claims import VERDICTS

REJECT = "reject"

# Arrow's reader (RapidJSON) takes `Inf`, `-Inf` and `-NaN`, which Python's json refuses: a
# slice with either word anywhere (even inside a string) goes the slow way. A BOM: Arrow skips
# one, Python's json refuses it.
_NOT_ALIKE = (b"Inf", b"NaN", "\ufeff".encode())
_JSON_SPACE = " \t\r\n"


@dataclass
class Chunk:
    """Parsed input: the messages as Arrow columns, and the rejects (rare) as objects."""

    lines: Any  # pa.Int64Array: each message's line (or row) number
    ids: Any  # pa.StringArray
    payloads: Any  # pa.StringArray
    rejects: list[Reject]

    def __len__(self) -> int:
        return len(self.ids)

    def id_strings(self) -> list[str]:
        """The ids as Python strings, for the claim's sort-out (a set of the ids seen).
        Through NumPy: pyarrow's to_pylist made them 9x slower here (0.11 s against 0.013 s
        for 200,000 ids), and it ran on the partition's main thread for every message."""
        return self.ids.to_numpy(zero_copy_only=False).tolist()


def parse_chunk(batch: Any, fmt: str, first_line: int, max_payload: int) -> Chunk:
    """The messages and rejects of `batch` (lines in column 0 for JSON lines, else Parquet
    rows), numbered from `first_line`."""
    fast = (
        _fast_lines(batch.column(0), first_line, max_payload)
        if fmt == JSONL
        else _fast_rows(batch, first_line, max_payload)
    )
    return fast if fast is not None else _slow(batch, fmt, first_line, max_payload)


def _numbers(first_line: int, count: int) -> Any:
    import numpy as np
    import pyarrow as pa

    return pa.array(np.arange(first_line, first_line + count, dtype=np.int64))


def _checked(ids: Any, payloads: Any, first_line: int, max_payload: int) -> Chunk | None:
    """The chunk, if every id and payload passes check_message's rules; else None."""
    import pyarrow.compute as pc

    if ids.null_count or payloads.null_count:
        return None  # missing id, or a null payload (which check_message writes as "null")
    if len(ids):
        lengths = pc.min_max(pc.utf8_length(ids)).as_py()
        if lengths["min"] < 1 or lengths["max"] > MAX_ID:
            return None
        if pc.max(pc.binary_length(payloads)).as_py() > max_payload:
            return None
    return Chunk(_numbers(first_line, len(ids)), ids, payloads, [])


def _fast_lines(lines: Any, first_line: int, max_payload: int) -> Chunk | None:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    count = len(lines)
    if count == 0:
        return Chunk(
            _numbers(first_line, 0), pa.array([], pa.string()), pa.array([], pa.string()), []
        )
    if lines.null_count:
        return None
    # Every line must look like one object: `{` first and `}` last, bar JSON's whitespace.
    # Blank lines (neither messages nor rejects) and other values go the slow way: Arrow skips
    # the one and reads a `null` as a row (and crashes when the first value is one). So every
    # line holds at least one object, and Arrow's row count equal to the line count means one
    # object per line, row i being line i.
    trimmed = pc.utf8_trim(lines, _JSON_SPACE)
    if not (
        pc.all(pc.starts_with(trimmed, "{")).as_py() and pc.all(pc.ends_with(trimmed, "}")).as_py()
    ):
        return None
    text = pc.binary_join(pa.ListArray.from_arrays([0, count], lines.cast(pa.string())), "\n")
    data = text[0].as_buffer()
    raw = data.to_pybytes()  # one search over the slice's bytes, not one per line
    if any(word in raw for word in _NOT_ALIKE):
        return None
    schema = pa.schema([("id", pa.string()), ("payload", pa.string())])
    try:
        table = pj.read_json(
            pa.BufferReader(data),
            read_options=pj.ReadOptions(use_threads=False, block_size=max(1 << 20, data.size + 1)),
            parse_options=pj.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="ignore"
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        # Not JSON, not an object, an id that is a number, a payload that is an object, a
        # key given twice: Python says which, and what it means.
        return None
    if table.num_rows != count:
        return None
    ids = table.column("id").combine_chunks()
    payloads = table.column("payload").combine_chunks()
    return _checked(ids, payloads, first_line, max_payload)


def _fast_rows(batch: Any, first_line: int, max_payload: int) -> Chunk | None:
    import pyarrow as pa

    names = batch.schema.names
    if "id" not in names or "payload" not in names:
        return None
    ids, payloads = batch.column("id"), batch.column("payload")
    if not (pa.types.is_string(ids.type) and pa.types.is_string(payloads.type)):
        return None  # integer ids, structured payloads: check_message converts them
    return _checked(ids, payloads, first_line, max_payload)


def _slow(batch: Any, fmt: str, first_line: int, max_payload: int) -> Chunk:
    """Row at a time, by inputs.py's rules."""
    import pyarrow as pa

    items: list[Message | Reject | None]
    if fmt == JSONL:
        rows = batch.column(0).to_pylist()
        items = [parse_line(n, raw or "", max_payload) for n, raw in enumerate(rows, first_line)]
    else:
        items = []
        for n, data in enumerate(batch.to_pylist(), first_line):
            item = check_message(n, data, "", max_payload)
            if isinstance(item, Reject):  # the excerpt only for the rare reject
                item = check_message(n, data, json.dumps(data, default=str), max_payload)
            items.append(item)
    messages = [item for item in items if isinstance(item, Message)]
    return Chunk(
        pa.array([m.line for m in messages], pa.int64()),
        pa.array([m.id for m in messages], pa.string()),
        pa.array([m.payload for m in messages], pa.string()),
        [item for item in items if isinstance(item, Reject)],
    )


def verdict_columns(chunk: Chunk, codes: bytes, node: str, partition: int) -> Any:
    """The output Arrow batch of a chunk's messages, given their verdict codes (claim_ids):
    built column by column; the payload is kept for PROCESS only."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    count = len(chunk)
    code_array = pa.array(np.frombuffer(codes, dtype=np.uint8), pa.uint8())
    kinds = pa.array(VERDICTS, pa.string()).take(code_array)
    payloads = pc.if_else(pc.equal(code_array, 0), chunk.payloads, pa.scalar(None, pa.string()))
    return pa.RecordBatch.from_arrays(
        [
            kinds,
            chunk.ids,
            payloads,
            pa.array([node] * count, pa.string()),
            pa.array(np.full(count, partition, dtype=np.int32)),
            chunk.lines,
            pa.nulls(count, pa.string()),
            pa.nulls(count, pa.string()),
        ],
        schema=output_schema(),
    )


def reject_columns(rejects: list[Reject], partition: int) -> Any:
    """The output Arrow batch of some rejects."""
    import pyarrow as pa

    count = len(rejects)
    return pa.RecordBatch.from_pydict(
        {
            "kind": [REJECT] * count,
            "id": [None] * count,
            "payload": [None] * count,
            "node": [None] * count,
            "partition": [partition] * count,
            "line": [r.line for r in rejects],
            "reason": [r.reason for r in rejects],
            "text": [r.text for r in rejects],
        },
        schema=output_schema(),
    )


LINES = "lines"  # not a verdict: one row per partition, its line (or row) count in `line`


def lines_columns(partition: int, count: int, tally: dict[str, int] | None = None) -> Any:
    """The row that ends a partition's output: how many lines (or rows) it read, so that the
    driver turns each partition's own line numbers into the file's after the one pass, and in
    `text` (JSON) its rows per verdict kind, so that the driver's counts need only these rows,
    not a pass over all the verdicts (job._tally)."""
    import pyarrow as pa

    return pa.RecordBatch.from_pydict(
        {
            "kind": [LINES],
            "id": [None],
            "payload": [None],
            "node": [None],
            "partition": [partition],
            "line": [count],
            "reason": [None],
            "text": [json.dumps(tally or {}, sort_keys=True)],
        },
        schema=output_schema(),
    )


def output_schema() -> Any:
    """What the Python pass returns per input line: its verdict, and what the outputs need
    (job._verdict_schema is the same in Spark's types)."""
    import pyarrow as pa

    return pa.schema(
        [
            ("kind", pa.string()),  # process|duplicate|revoked|reject
            ("id", pa.string()),
            ("payload", pa.string()),  # only for PROCESS
            ("node", pa.string()),
            ("partition", pa.int32()),
            ("line", pa.int64()),
            ("reason", pa.string()),  # only for REJECT
            ("text", pa.string()),
        ]
    )
