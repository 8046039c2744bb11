"""The messages MnesiaCores send each other, and their validation.

Every message is a JSON object `{"v": 1, "t": type, "l": lamport, ...}`. `problem()` describes
what is wrong with one (unknown type, missing or mistyped field); the core logs that and drops
the message, it never raises on network input (docs/architecture.md, rule 4). Entries and schema
definitions inside are checked where they are used.
"""

from __future__ import annotations

from typing import Any

VERSION = 1
MAX_NAME = 255

# field -> kind: str, str?, int, bool, list, dict, any
SCHEMAS: dict[str, dict[str, str]] = {
    # membership and the mnesia monitor
    "hello": {
        "reply": "bool",
        "inc": "int",
        "db_nodes": "list",
        "tables": "dict",
        "running": "list",
        "loaded": "list",
        "loading": "list",
        "mark": "bool",
        "starting": "bool",
        "heal": "bool",
        "disc_max": "dict",
    },
    "leave": {},
    "heal_req": {},
    "check": {"loaded": "list", "loading": "list"},  # optional "sums": {table: digests}
    "not_running": {},
    "up": {},  # the sender now counts the receiver as running (its hello was taken)
    "loaded": {"tables": "list"},
    "loading": {"tables": "list"},
    "unloaded": {"tables": "list"},
    # table copies and merges
    "copy_req": {"table": "str", "rid": "int"},
    "copy_chunk": {"table": "str", "rid": "int", "entries": "list", "last": "bool"},
    "copy_nak": {"table": "str", "rid": "int"},
    "merge_chunk": {"table": "str", "entries": "list", "last": "bool"},
    "sync": {"table": "str", "buckets": "list", "entries": "list", "reply": "bool"},
    # dirty operations
    "dirty": {"table": "str", "entries": "list", "to": "list", "fwd": "bool"},
    "rread": {"rid": "int", "table": "str", "op": "str", "arg": "any"},
    "rread_r": {"rid": "int", "ok": "bool", "result": "any"},
    # transactions
    "lock": {
        "tid": "str",
        "age": "list",
        "seq": "int",
        "table": "str",
        "key": "str?",
        "mode": "str",
        "want": "any",
    },
    "lock_r": {"tid": "str", "seq": "int", "ans": "str", "value": "any"},
    "release": {"tid": "str"},
    # optional: "locks" [[table, key_json]...], "age", "fresh" (checked by the participant)
    "prepare": {"tid": "str", "ops": "list", "parts": "dict"},
    "vote": {"tid": "str", "yes": "bool", "why": "str", "active": "dict"},
    "commit": {"tid": "str"},  # and "stamp", the decision's
    "abort": {"tid": "str"},
    "ack": {"tid": "str"},
    "outcome_q": {"tid": "str"},
    "outcome_r": {"tid": "str", "state": "str"},  # and "stamp" with "committed"
}


def _kind_problem(kind: str, value: Any) -> str | None:
    if kind == "str":
        if not isinstance(value, str) or len(value) > 4 * MAX_NAME:
            return "expected a string"
    elif kind == "str?":
        if value is not None and not isinstance(value, str):
            return "expected a string or null"
    elif kind == "int":
        if not isinstance(value, int) or isinstance(value, bool):
            return "expected an integer"
    elif kind == "bool":
        if not isinstance(value, bool):
            return "expected true or false"
    elif kind == "list":
        if not isinstance(value, list):
            return "expected a list"
    elif kind == "dict" and not isinstance(value, dict):
        return "expected an object"
    return None


def problem(msg: Any) -> str | None:
    """What is wrong with `msg`, or None if it is a well-formed message of a known type."""
    if not isinstance(msg, dict):
        return f"expected a JSON object, got {type(msg).__name__}"
    if msg.get("v") != VERSION:
        return f"unsupported message version {msg.get('v')!r} (expected {VERSION})"
    t = msg.get("t")
    if not isinstance(t, str):
        return "no message type (key 't')"
    schema = SCHEMAS.get(t)
    if schema is None:
        return f"unknown message type {t[:64]!r}"
    lam = msg.get("l")
    if not isinstance(lam, int) or isinstance(lam, bool) or lam < 0:
        return f"{t}: 'l' (the Lamport clock) must be a non-negative integer"
    for key, kind in schema.items():
        if key not in msg:
            return f"{t}: missing field {key!r}"
        bad = _kind_problem(kind, msg[key])
        if bad:
            return f"{t}: field {key!r}: {bad}"
    return None


def str_list(value: Any) -> list[str] | None:
    """`value` as a list of strings, or None if it is not one."""
    if isinstance(value, list) and all(isinstance(v, str) and v for v in value):
        return value
    return None
