"""The messages node monitors send each other, and their validation.

Every message is a JSON object with a type `t` and the sender's creation `c` (so a message from
an incarnation that has since restarted can be told apart and dropped). Bad input (unknown
type, missing field, wrong type, oversized list) is described by `problem()`; the core logs it
and drops the message, it never raises (docs/architecture.md, rule 4). The fields are checked
by the shared validator (monitors/message_fields.py) with this module's kinds (`KINDS`).
"""

from __future__ import annotations

from typing import Any

from monitors.message_fields import Check, MessageFields, check, not_an_object

# Every message a node monitor sends carries "v": VERSION. A message without "v" is read as
# version 1: the monitors from before versioned messages sent none, and a rolling upgrade
# has them in the cluster. Any other version is dropped (its fields may mean other things).
VERSION = 1
MAX_NAME = 255  # a node name or alarm resource
MAX_LIST = 1024  # nodes in a list, views in a view message
ROLES = ("core", "ephemeral")  # every message says its sender's role (`role`) and creation (`c`)

# field -> kind: "str", "int", "bool", "int?" (int or null), "[str]" (a list of strings),
# "views" (checked entry by entry by the core)
_PEER = {
    "node": "str",
    "disc": "bool",
    "creation": "int",
    "running": "bool",
    "down": "int?",
    "alarms": "[str]",
}
SCHEMAS: dict[str, dict[str, str]] = {
    # membership and liveness (rabbit_node_monitor)
    "node_up": _PEER,
    "announce": _PEER,
    "app_down": {},
    "joined_cluster": {"node": "str", "disc": "bool"},
    "left_cluster": {"node": "str"},
    "keepalive": {},
    "alarm": {"resources": "[str]"},
    # partial partitions
    "check_partial_partition": {
        "node": "str",
        "reporter": "str",
        "node_c": "int",
        "checker_c": "int",
        "reporter_c": "int",
    },
    "creation_query": {},
    "creation_reply": {"creation": "int"},
    "partial_partition": {"node": "str", "proxy": "str", "creation": "int"},
    "partial_partition_disconnect": {"node": "str"},
    "view": {"views": "views"},
    # rabbit_autoheal
    "request_start": {"node": "str"},
    "autoheal_status_request": {},
    "autoheal_status": {"partitions": "[str]", "nodes": "[str]", "weight": "int"},
    "become_winner": {"losers": "[str]"},
    "winner_is": {"winner": "str"},
    "autoheal_safe_to_start": {},
    "autoheal_finished": {"winner": "str"},
    "report_autoheal_status": {},
    # ephemeral members (ephemeral.py): a core node tells the other core nodes that one left
    "ephemeral_left": {"node": "str", "creation": "int"},
}


# Fields that may be there. A keepalive carries the sender's node_up record and its own view,
# so that a lost node_up, app_down or view is repaired within one keepalive round.
# A record also says the sender's role (core or ephemeral) and, from a core node to an
# ephemeral one, the core members it knows and, from a node that left a cluster, that
# cluster's members (`left`).
_ROLE = {"role": "str", "members": "[str]", "mode": "mode", "left": "[str]"}
OPTIONAL: dict[str, dict[str, str]] = {
    "keepalive": {**_PEER, "views": "views", **_ROLE},  # mode: the sender's partition_handling
    "node_up": _ROLE,
    "announce": _ROLE,
}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _str_list_problem(value: Any) -> str | None:
    if not isinstance(value, list) or len(value) > MAX_LIST:
        return f"expected a list of at most {MAX_LIST} strings"
    if not all(isinstance(v, str) and 0 < len(v) <= MAX_NAME for v in value):
        return "expected a list of non-empty strings"
    return None


def _is_mode(value: Any) -> bool:
    return (isinstance(value, str) and 0 < len(value) <= MAX_NAME) or (
        isinstance(value, dict) and len(value) == 1
    )


# kind -> check (monitors/message_fields.py)
KINDS: dict[str, Check] = {
    "str": check(
        lambda v: isinstance(v, str) and 0 < len(v) <= MAX_NAME,
        f"expected a non-empty string of at most {MAX_NAME} characters",
    ),
    "int": check(_is_int, "expected an integer"),
    "int?": check(lambda v: v is None or _is_int(v), "expected an integer or null"),
    "bool": check(lambda v: isinstance(v, bool), "expected true or false"),
    "[str]": _str_list_problem,
    "views": check(
        lambda v: isinstance(v, dict) and len(v) <= MAX_LIST,
        f"expected an object of at most {MAX_LIST} views",
    ),
    "mode": check(
        _is_mode, "expected a partition_handling setting (a name, or one {mode: {...}} object)"
    ),
}
_FIELDS = {t: MessageFields(t, KINDS, schema, OPTIONAL.get(t)) for t, schema in SCHEMAS.items()}


def problem(msg: Any) -> str | None:
    """What is wrong with `msg`, or None if it is a well-formed node monitor message."""
    bad = not_an_object(msg)
    if bad:
        return bad
    if msg.get("v", VERSION) != VERSION:
        return f"unsupported message version {msg.get('v')!r} (expected {VERSION}, or none)"
    t = msg.get("t")
    if not isinstance(t, str):
        return "no message type (key 't')"
    fields = _FIELDS.get(t)
    if fields is None:
        return f"unknown message type {t[:64]!r}"
    if "c" in msg and not _is_int(msg["c"]):
        return "c (the sender's creation) must be an integer"
    if "role" in msg and msg["role"] not in ROLES:
        return f"role (the sender's) must be one of {', '.join(ROLES)}"
    bad = fields.problem(msg)
    if bad:
        return bad
    if t == "keepalive" and any(k in msg for k in _PEER) and not all(k in msg for k in _PEER):
        return "keepalive: a peer record needs all of " + ", ".join(_PEER)
    return None
