"""rabbitry.pipeline.chunks: the column-at-a-time parse gives the same messages and rejects as
inputs.py's row-at-a-time rules (which it falls back to), and builds the verdict columns."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rabbitry.pipeline.chunks import (
    _fast_lines,
    _fast_rows,
    _slow,
    output_schema,
    parse_chunk,
    reject_columns,
    verdict_columns,
)
from rabbitry.pipeline.inputs import JSONL, MAX_ID, PARQUET, Reject
from rabbitry.spark.claims import DUPLICATE_CODE, PROCESS_CODE, REVOKED_CODE

pa = pytest.importorskip("pyarrow")

LIMIT = 64  # payload bytes


def lines_batch(lines: list[str | None]) -> Any:
    return pa.RecordBatch.from_pydict({"value": pa.array(lines, pa.string())})


def as_tuple(chunk: Any) -> tuple[list[Any], ...]:
    return (
        chunk.lines.to_pylist(),
        chunk.ids.to_pylist(),
        chunk.payloads.to_pylist(),
        [(r.line, r.reason, r.text) for r in chunk.rejects],
    )


def same_as_slow(batch: Any, fmt: str = JSONL, first: int = 7) -> Any:
    chunk = parse_chunk(batch, fmt, first, LIMIT)
    slow = _slow(batch, fmt, first, LIMIT)
    assert as_tuple(chunk) == as_tuple(slow)
    for c in (chunk, slow):  # what the claims get: the same ids, as plain Python strings
        strings = c.id_strings()
        assert strings == c.ids.to_pylist() and all(type(x) is str for x in strings)
    return chunk


def good(n: int) -> str:
    return json.dumps({"id": f"m{n}", "payload": f"p{n}"})


def test_clean_lines_take_the_fast_path() -> None:
    lines = [good(n) for n in range(5)] + ['  {"payload": "x", "id": "\\u00e9\\n", "z": [1, {}]}']
    assert _fast_lines(lines_batch(lines).column(0), 1, LIMIT) is not None
    chunk = same_as_slow(lines_batch(lines))
    assert chunk.ids.to_pylist()[-1] == "\u00e9\n"
    assert chunk.lines.to_pylist() == list(range(7, 13))


# Lines the fast path must not read differently from Python's json: each alone, and each
# among good lines (the whole slice then goes the slow way, with the same verdicts).
ODD = [
    "",
    "   ",
    "\u00a0",
    "{oops",
    "[1, 2]",
    '"text"',
    "5",
    "null",
    "{}",
    '{"id": "a"}',
    '{"payload": "x"}',
    '{"id": "", "payload": "x"}',
    '{"id": null, "payload": "x"}',
    '{"id": "a", "payload": null}',
    '{"id": 5, "payload": "x"}',
    '{"id": -5, "payload": "x"}',
    '{"id": 1.5, "payload": "x"}',
    '{"id": true, "payload": "x"}',
    '{"id": "a", "payload": {"n": 2}}',
    '{"id": "a", "payload": [1, "\\u00e9"]}',
    '{"id": "a", "payload": 3}',
    '{"id": "a", "id": "b", "payload": "x"}',
    '{"id": "a", "\\u0069d": "b", "payload": "x"}',
    '{"id": "a", "payload": "x", "payload": "y"}',
    '{"id": "a", "payload": "x"}{"id": "b", "payload": "y"}',
    '{"id": "a", "payload": "x"} 5',
    '{"id": "a", "payload": "x", "z": Inf}',
    '{"id": "a", "payload": "x", "z": -Inf}',
    '{"id": "a", "payload": "x", "z": NaN}',
    '{"id": "a", "payload": "x", "z": -NaN}',
    '{"id": "a", "payload": "x", "z": Infinity}',
    '{"id": "a", "payload": "x", "z": 1e999}',
    '\ufeff{"id": "a", "payload": "x"}',
    '{"id": "a", "payload": "x\ty"}',
    '{"id": "a", "payload": "\\ud800"}',
    '{"id": "\\udc00", "payload": "x"}',
    '{"id": "a", "payload": "x",}',
    json.dumps({"id": "x" * MAX_ID, "payload": "x"}),
    json.dumps({"id": "x" * (MAX_ID + 1), "payload": "x"}),
    json.dumps({"id": "a", "payload": "x" * LIMIT}),
    json.dumps({"id": "a", "payload": "x" * (LIMIT + 1)}),
    json.dumps({"id": "a", "payload": "\u00e9" * (LIMIT // 2 + 1)}, ensure_ascii=False),
    None,
]


@pytest.mark.parametrize("line", ODD, ids=range(len(ODD)))
def test_odd_lines_give_the_same_verdicts(line: str | None) -> None:
    same_as_slow(lines_batch([line]))
    same_as_slow(lines_batch([good(1), line, good(2)]))


def test_an_empty_slice() -> None:
    assert len(same_as_slow(lines_batch([]))) == 0


JSON_TOKENS = st.sampled_from(
    ['"a"', '"m1"', '""', "1", "-0", "1e5", "true", "null", "{}", "[]", '"\\u00e9"', "Inf", "NaN"]
)


@st.composite
def json_lines(draw: st.DrawFn) -> str:
    """Object-ish lines near the edges: keys id/payload/other, repeated or missing, values of
    every kind, and now and then a broken or doubled object."""
    members = draw(
        st.lists(st.tuples(st.sampled_from(["id", "payload", "z"]), JSON_TOKENS), max_size=4)
    )
    body = "{" + ", ".join(f'"{k}": {v}' for k, v in members) + "}"
    return draw(st.sampled_from([body, body, body + body, body[:-1], " " + body, ""]))


@settings(max_examples=150, deadline=None)
@given(st.lists(json_lines(), max_size=6))
def test_generated_slices_give_the_same_verdicts(lines: list[str]) -> None:
    same_as_slow(lines_batch(lines))


def rows_batch(ids: list[Any], payloads: list[Any]) -> Any:
    return pa.RecordBatch.from_pydict({"id": ids, "payload": payloads, "extra": [1] * len(ids)})


def test_parquet_rows_of_strings_take_the_fast_path() -> None:
    batch = rows_batch(["a", "b"], ["x", "y"])
    assert _fast_rows(batch, 1, LIMIT) is not None
    assert same_as_slow(batch, PARQUET).ids.to_pylist() == ["a", "b"]


@pytest.mark.parametrize(
    ("ids", "payloads"),
    [
        (["a", None], ["x", "y"]),
        (["a", ""], ["x", "y"]),
        (["a", "b"], ["x", None]),
        ([1, 2], ["x", "y"]),
        (["a", "b"], [{"n": 1}, {"n": 2}]),
        (["a", "b"], ["x", "y" * (LIMIT + 1)]),
    ],
)
def test_odd_parquet_rows_give_the_same_verdicts(ids: list[Any], payloads: list[Any]) -> None:
    same_as_slow(rows_batch(ids, payloads), PARQUET)


def test_verdict_columns() -> None:
    chunk = parse_chunk(lines_batch([good(n) for n in range(3)]), JSONL, 10, LIMIT)
    codes = bytes([PROCESS_CODE, DUPLICATE_CODE, REVOKED_CODE])
    out = verdict_columns(chunk, codes, "n@h", 4)
    assert out.schema == output_schema()
    assert out.to_pylist() == [
        {
            "kind": kind,
            "id": f"m{n}",
            "payload": "p0" if n == 0 else None,  # the payload only for PROCESS
            "node": "n@h",
            "partition": 4,
            "line": 10 + n,
            "reason": None,
            "text": None,
        }
        for n, kind in enumerate(["process", "duplicate", "revoked"])
    ]
    rejects = reject_columns([Reject(3, "missing id", "{}")], 4)
    assert rejects.schema == output_schema()
    assert rejects.to_pylist()[0]["kind"] == "reject"
