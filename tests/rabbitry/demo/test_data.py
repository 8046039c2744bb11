"""generate_messages: the file has what GeneratedInput says, duplicates are near and far, and a
seed replays exactly."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from rabbitry.demo.data import format_id, generate_messages


def _read(path: Path) -> list[dict[str, str]]:
    with open(path) as lines:
        return [json.loads(line) for line in lines]


def test_counts_match_the_file(tmp_path: Path) -> None:
    generated = generate_messages(tmp_path / "in.jsonl", 5_000, duplicate_ratio=0.1)
    rows = _read(generated.path)
    ids = Counter(row["id"] for row in rows)

    assert generated.messages == len(rows) == 5_000
    assert generated.distinct_ids == len(ids) == 4_500
    assert generated.duplicates == sum(c - 1 for c in ids.values()) == 500
    assert set(ids) == generated.expected_ids()
    assert all(set(row) == {"id", "payload"} and row["payload"] for row in rows)


def test_revoked_is_a_seeded_subset_of_the_ids(tmp_path: Path) -> None:
    a = generate_messages(tmp_path / "a.jsonl", 10_000, revoked_ratio=0.02, seed=1)
    b = generate_messages(tmp_path / "b.jsonl", 10_000, revoked_ratio=0.02, seed=2)

    assert len(a.revoked) == round(a.distinct_ids * 0.02) == len(set(a.revoked))
    assert set(a.revoked) <= a.expected_ids()
    assert a.revoked == sorted(a.revoked)
    assert a.revoked != b.revoked


def test_same_seed_same_file(tmp_path: Path) -> None:
    a = generate_messages(tmp_path / "a.jsonl", 2_000, seed=3)
    b = generate_messages(tmp_path / "b.jsonl", 2_000, seed=3)
    c = generate_messages(tmp_path / "c.jsonl", 2_000, seed=4)

    assert a.path.read_bytes() == b.path.read_bytes()
    assert a.revoked == b.revoked
    assert a.path.read_bytes() != c.path.read_bytes()


def test_duplicates_are_both_near_and_far(tmp_path: Path) -> None:
    generated = generate_messages(tmp_path / "in.jsonl", 20_000, duplicate_ratio=0.1)
    rows = _read(generated.path)
    lines: dict[str, list[int]] = defaultdict(list)
    payloads: dict[str, set[str]] = defaultdict(set)
    for number, row in enumerate(rows):
        lines[row["id"]].append(number)
        payloads[row["id"]].add(row["payload"])
    gaps = [max(n) - min(n) for n in lines.values() if len(n) > 1]

    near = sum(1 for gap in gaps if gap <= 60)
    far = sum(1 for gap in gaps if gap >= len(rows) // 4)  # surely another Spark partition
    assert near >= len(gaps) // 4
    assert far >= len(gaps) // 8
    # A duplicate is a redelivery: same id, same payload.
    assert all(len(p) == 1 for p in payloads.values())


def test_edge_sizes(tmp_path: Path) -> None:
    empty = generate_messages(tmp_path / "empty.jsonl", 0)
    assert (empty.messages, empty.distinct_ids, empty.revoked) == (0, 0, [])
    assert empty.path.read_text() == ""

    one = generate_messages(tmp_path / "one.jsonl", 1, duplicate_ratio=0.5)
    assert one.distinct_ids == 1
    assert _read(one.path) == [{"id": "m000000", "payload": _read(one.path)[0]["payload"]}]

    assert format_id(123) == "m000123"
    assert format_id(1_234_567, 7) == "m1234567"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n": -1}, "n must be"),
        ({"n": 10, "duplicate_ratio": 1.0}, "duplicate_ratio"),
        ({"n": 10, "revoked_ratio": -0.1}, "revoked_ratio"),
    ],
)
def test_bad_arguments_are_refused(tmp_path: Path, kwargs: dict, message: str) -> None:
    n = kwargs.pop("n")
    with pytest.raises(ValueError, match=message):
        generate_messages(tmp_path / "x.jsonl", n, **kwargs)
