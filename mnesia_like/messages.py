"""The messages MnesiaCores send each other, and their validation.

Every message is a JSON object `{"v": 1, "t": type, "l": lamport, ...}`. `problem()` describes
what is wrong with one (unknown type, missing or mistyped field); the core logs that and drops
the message, it never raises on network input (docs/architecture.md, rule 4). The fields are
checked by the shared validator (monitors/message_fields.py) with this module's kinds
(`KINDS`); entries and schema definitions inside are checked where they are used.
"""

from __future__ import annotations

from typing import Any

from monitors.message_fields import ANY, Check, MessageFields, check, not_an_object

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


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# kind -> check (monitors/message_fields.py)
KINDS: dict[str, Check] = {
    "str": check(lambda v: isinstance(v, str) and len(v) <= 4 * MAX_NAME, "expected a string"),
    "str?": check(lambda v: v is None or isinstance(v, str), "expected a string or null"),
    "int": check(_is_int, "expected an integer"),
    "bool": check(lambda v: isinstance(v, bool), "expected true or false"),
    "list": check(lambda v: isinstance(v, list), "expected a list"),
    "dict": check(lambda v: isinstance(v, dict), "expected an object"),
    "any": ANY,
}
_FIELDS = {t: MessageFields(t, KINDS, schema) for t, schema in SCHEMAS.items()}


def problem(msg: Any) -> str | None:
    """What is wrong with `msg`, or None if it is a well-formed message of a known type."""
    bad = not_an_object(msg)
    if bad:
        return bad
    if msg.get("v") != VERSION:
        return f"unsupported message version {msg.get('v')!r} (expected {VERSION})"
    t = msg.get("t")
    if not isinstance(t, str):
        return "no message type (key 't')"
    fields = _FIELDS.get(t)
    if fields is None:
        return f"unknown message type {t[:64]!r}"
    lam = msg.get("l")
    if not isinstance(lam, int) or isinstance(lam, bool) or lam < 0:
        return f"{t}: 'l' (the Lamport clock) must be a non-negative integer"
    return fields.problem(msg)


def str_list(value: Any) -> list[str] | None:
    """`value` as a list of strings, or None if it is not one."""
    if isinstance(value, list) and all(isinstance(v, str) and v for v in value):
        return value
    return None
