"""monitors/message_fields.py: the one field validator the four message modules share, and the
texts every one of them gives for a missing or mistyped field."""

from __future__ import annotations

import pytest

from failover import messages as failover_messages
from mnesia_like import messages as mnesia_messages
from monitors.gossip import wire
from monitors.message_fields import ANY, MessageFields, check, not_an_object
from monitors.node_monitor import messages as node_monitor_messages

KINDS = {
    "int": check(lambda v: isinstance(v, int) and not isinstance(v, bool), "expected an integer"),
    "any": ANY,
}


def test_required_fields_first_then_the_optional_ones_present() -> None:
    fields = MessageFields("hello", KINDS, {"a": "int", "b": "any"}, {"c": "int"})
    assert fields.problem({"a": 1, "b": None}) is None
    assert fields.problem({"b": 1}) == "hello: missing field 'a'"
    assert fields.problem({"a": True, "b": 1}) == "hello: field 'a': expected an integer"
    assert fields.problem({"a": 1, "b": 1, "c": "x"}) == "hello: field 'c': expected an integer"
    # the first problem in field order is the one named
    assert fields.problem({"a": "x", "c": "x"}) == "hello: field 'a': expected an integer"


def test_a_kind_no_vocabulary_names_fails_at_import_not_silently() -> None:
    with pytest.raises(ValueError, match=r"hello: field 'a' has an unknown kind 'nat'"):
        MessageFields("hello", KINDS, {"a": "nat"})


def test_not_an_object() -> None:
    assert not_an_object({}) is None
    assert not_an_object([1]) == "expected a JSON object, got list"


def test_the_four_message_modules_give_the_shared_texts() -> None:
    """Each keeps its own head and version rules; the field texts are the validator's."""
    assert node_monitor_messages.problem({"t": "left_cluster"}) == (
        "left_cluster: missing field 'node'"
    )
    assert mnesia_messages.problem({"v": 1, "t": "copy_req", "l": 0, "table": "t", "rid": "1"}) == (
        "copy_req: field 'rid': expected an integer"
    )
    head = {"v": 1, "type": "worker-revoke", "hostname": "a@h", "pid": 1, "clock": 1, "ts": 1.0}
    assert wire.problem(wire.REVOKE, head) == "worker.revoke: missing field 'ids'"
    body = failover_messages.build("sys", "invalidate", "rcs", (1, 1), server="nope")
    assert failover_messages.problem("failover.sys.invalidate", body, "sys") == (
        "invalidate: field 'server': no port: expected \"host:port\""
    )
    for bad in ([], "x", 3):
        expected = f"expected a JSON object, got {type(bad).__name__}"
        assert node_monitor_messages.problem(bad) == expected
        assert mnesia_messages.problem(bad) == expected
        assert wire.problem(wire.REVOKE, bad) == expected
        assert failover_messages.problem("failover.sys.ping", bad, "sys") == expected
