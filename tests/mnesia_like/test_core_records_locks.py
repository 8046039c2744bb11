"""records.py (validation, keys, match, select) and locks.py (wait-die)."""

from __future__ import annotations

import pytest

from mnesia_like import records as rec
from mnesia_like.errors import BadArgument, BadRecord
from mnesia_like.locks import Granted, LockManager

ATTRS = ["name", "age", "city"]


def test_a_record_is_filled_and_keyed() -> None:
    kj, full = rec.check_record("people", ATTRS, "name", {"name": "ann", "age": 3})
    assert kj == '"ann"'
    assert full == {"name": "ann", "age": 3, "city": None}


@pytest.mark.parametrize(
    ("record", "why"),
    [
        ([1, 2], "expected a dict"),
        ({"age": 3}, "no value for the key attribute 'name'"),
        ({"name": "x", "zip": 1}, "unknown field(s) ['zip']"),
        ({"name": "x", "age": {1, 2}}, "not JSON-serialisable"),
        ({"name": "x", "age": float("nan")}, "not JSON-serialisable"),
        ({"name": {"a": 1}}, "keys are str, int, float, bool or lists"),
        ({"name": "x", "city": "y" * (rec.MAX_RECORD_BYTES + 1)}, "above the limit"),
    ],
)
def test_bad_records_say_what_is_wrong(record: object, why: str) -> None:
    with pytest.raises(BadRecord, match="people") as info:
        rec.check_record("people", ATTRS, "name", record)
    assert why in str(info.value)


def test_tuples_become_lists_as_every_replica_will_hold_them() -> None:
    kj, full = rec.check_record("t", ["k", "v"], "k", {"k": (1, "a"), "v": (2,)})
    assert kj == '[1,"a"]' and full == {"k": [1, "a"], "v": [2]}


def test_newer_orders_by_lamport_then_node() -> None:
    a = {"r": None, "s": [2, "a@h"]}
    b = {"r": {}, "s": [2, "b@h"]}
    c = {"r": {}, "s": [3, "a@h"]}
    assert rec.newer(b, a) and rec.newer(c, b) and not rec.newer(a, c)
    assert rec.newer(a, None) and not rec.newer(None, a)


def test_match_and_select() -> None:
    rows = [
        {"name": "ann", "age": 30, "city": "oslo"},
        {"name": "bob", "age": 25, "city": "rome"},
        {"name": "cy", "age": "old", "city": "oslo"},
    ]
    pattern = rec.check_pattern("p", ATTRS, {"city": "oslo"})
    assert [r["name"] for r in rows if rec.matches(r, pattern)] == ["ann", "cy"]
    spec = rec.check_select("p", ATTRS, {"where": [["age", ">", 26]], "fields": ["name"]})
    assert rec.select(rows, spec) == [{"name": "ann"}]  # "old" > 26 is false, not an error
    spec = rec.check_select("p", ATTRS, {"where": [["name", "in", ["bob", "cy"]]], "limit": 1})
    assert rec.select(rows, spec) == [rows[1]]
    spec = rec.check_select("p", ATTRS, {"where": [["city", "prefix", "os"]]})
    assert len(rec.select(rows, spec)) == 2


@pytest.mark.parametrize(
    "spec",
    [
        {"where": [["nope", "==", 1]]},
        {"where": [["age", "eval", "1"]]},
        {"where": [["age", "in", 3]]},
        {"where": "age > 3"},
        {"order": "age"},
        {"fields": ["zip"]},
        {"limit": -1},
    ],
)
def test_bad_select_specs_are_refused(spec: dict) -> None:
    with pytest.raises(BadArgument, match="select on 'p'"):
        rec.check_select("p", ATTRS, spec)


def test_table_definitions_are_checked() -> None:
    assert rec.check_table_def("t", ["k", "v"], None, ["a@h"], None) == (
        ["k", "v"],
        "k",
        ["a@h"],
        [],
    )
    for args in [
        ("schema", ["k"], None, ["a@h"], None),
        ("t", [], None, ["a@h"], None),
        ("t", ["k", "k"], None, ["a@h"], None),
        ("t", ["k"], "v", ["a@h"], None),
        ("t", ["k"], None, ["a@h"], ["a@h"]),
        ("t", ["k"], None, "a@h", None),
        ("t", ["k"], None, None, None),
        ("../x", ["k"], None, ["a@h"], None),
    ]:
        with pytest.raises(BadArgument):
            rec.check_table_def(*args)


# ---------------------------------------------------------------------------- locks

OLD, MID, YOUNG = (1, "a", 1), (2, "a", 2), (3, "a", 3)


def test_reads_share_and_writes_exclude() -> None:
    lm = LockManager()
    assert lm.request("t1", OLD, "t", "k", "read") == "granted"
    assert lm.request("t2", YOUNG, "t", "k", "read") == "granted"
    assert lm.request("t3", YOUNG, "t", "other", "write") == "granted"
    assert lm.request("t2", YOUNG, "t", "k", "write") == "die"  # t1 (older) reads k


def test_wait_die_an_older_one_waits_a_younger_one_dies() -> None:
    lm = LockManager()
    assert lm.request("mid", MID, "t", "k", "write") == "granted"
    assert lm.request("young", YOUNG, "t", "k", "write") == "die"
    assert lm.request("old", OLD, "t", "k", "write") == "wait"
    assert lm.release("mid") == [Granted("old", "t", "k", "write")]
    assert lm.held_by("old") == [("t", "k", "write")]


def test_a_queued_older_request_blocks_later_ones() -> None:
    lm = LockManager()
    assert lm.request("mid", MID, "t", "k", "read") == "granted"
    assert lm.request("old", OLD, "t", "k", "write") == "wait"
    # compatible with the holder, but the queued older writer comes first: die
    assert lm.request("young", YOUNG, "t", "k", "read") == "die"


def test_table_locks_conflict_with_key_locks() -> None:
    lm = LockManager()
    assert lm.request("young", YOUNG, "t", "k", "write") == "granted"
    assert lm.request("old", OLD, "t", None, "read") == "wait"
    assert lm.request("mid", MID, "u", None, "read") == "granted"  # another table
    assert lm.release("young") == [Granted("old", "t", None, "read")]
    assert lm.request("young2", YOUNG, "t", "x", "write") == "die"


def test_upgrade_and_release_forget_everything() -> None:
    lm = LockManager()
    assert lm.request("t1", OLD, "t", "k", "read") == "granted"
    assert lm.request("t1", OLD, "t", "k", "write") == "granted"
    assert lm.request("t1", OLD, "t", "k", "read") == "granted"
    assert lm.held_by("t1") == [("t", "k", "write")]
    lm.release("t1")
    assert lm.tids() == [] and not lm.holds("t1")
    assert lm.request("t2", YOUNG, "t", "k", "write") == "granted"


def test_no_deadlock_across_two_replicas() -> None:
    """Two transactions lock the same two keys in opposite orders on two replicas: the younger
    one dies on one of them, so the older one never waits forever."""
    r1, r2 = LockManager(), LockManager()
    assert r1.request("old", OLD, "t", "x", "write") == "granted"
    assert r2.request("young", YOUNG, "t", "y", "write") == "granted"
    assert r2.request("old", OLD, "t", "y", "write") == "wait"
    assert r1.request("young", YOUNG, "t", "x", "write") == "die"
    assert r2.release("young") == [Granted("old", "t", "y", "write")]
