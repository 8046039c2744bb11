"""The failover wire: routing keys, message bodies, tokens, and validation.

Beetle's names, on the bus under `failover.<system>.<name>` (Beetle used the system name as
the exchange and the message name as the routing key):

    RCS -> RCCs   ping, invalidate, reconfigure, system_notification
    RCCs -> RCS   client_started, heartbeat, pong, client_invalidated

Everything is a broadcast, as in Beetle: the active RCS may move from host to host, and a
standby RCS learns what it needs (heartbeats, the announced master) by listening.

Every body is a versioned JSON object (docs/architecture.md, rule 4) with one head:

    {"v": 1, "type": "pong", "system": "cluster1", "sender": "rcc-1",
     "term": 3, "token": 1700000000123, ...fields of the type}

`(term, token)` is the message's *token*. From the RCS it is the token of this request; `term`
comes from the election that made this RCS active and strictly grows from one active RCS to
the next, `token` grows within a term. An RCC accepts a message whose token is >= the highest
it has seen, compared as a pair, so a newer RCS outranks an older one whatever their counters.
From an RCC, pong and client_invalidated carry the token they answer; heartbeat and
client_started the highest token the client has seen, which tells a standby or a deposed RCS
which term the clients follow.

Type fields beyond the head:

| type | fields |
|---|---|
| ping | - |
| pong | `master`: the client's master file ("" if empty) |
| invalidate | `server`: the master to stop using |
| client_invalidated | - |
| reconfigure | `server`: the new master |
| client_started | `master` |
| heartbeat | `master` |
| system_notification | `message` |

`problem(routing_key, body)` says what is wrong with a message, or None; the cores log the
reason and drop it, they never raise on input from the bus. The fields are checked by the
shared validator (monitors/message_fields.py) with this module's kinds (`KINDS`).
"""

from __future__ import annotations

import re
from typing import Any

from monitors.message_fields import Check, MessageFields, check, not_an_object

VERSION = 1
PREFIX = "failover"

PING = "ping"
PONG = "pong"
INVALIDATE = "invalidate"
CLIENT_INVALIDATED = "client_invalidated"
RECONFIGURE = "reconfigure"
CLIENT_STARTED = "client_started"
HEARTBEAT = "heartbeat"
SYSTEM_NOTIFICATION = "system_notification"

#: What the active RCS sends; what the RCCs send.
SERVER_MESSAGES = frozenset({PING, INVALIDATE, RECONFIGURE, SYSTEM_NOTIFICATION})
CLIENT_MESSAGES = frozenset({PONG, CLIENT_INVALIDATED, CLIENT_STARTED, HEARTBEAT})

MAX_ID = 255  # client ids, server ids, system names, server addresses
MAX_TEXT = 4096  # notification text

Token = tuple[int, int]
"""(term, counter): compared lexicographically."""

NO_TOKEN: Token = (0, 0)

_SYSTEM_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

# type -> {field: kind}, beyond the head
_FIELDS: dict[str, dict[str, str]] = {
    PING: {},
    PONG: {"master": "master"},
    INVALIDATE: {"server": "server"},
    CLIENT_INVALIDATED: {},
    RECONFIGURE: {"server": "server"},
    CLIENT_STARTED: {"master": "master"},
    HEARTBEAT: {"master": "master"},
    SYSTEM_NOTIFICATION: {"message": "text"},
}
_HEAD = {"system": "system", "sender": "id", "term": "count", "token": "count"}


# ---- names ------------------------------------------------------------------------------------


def routing_key(system: str, name: str) -> str:
    return f"{PREFIX}.{system}.{name}"


def pattern(system: str) -> str:
    """What a shell subscribes to for one failover system (AMQP topic syntax)."""
    return f"{PREFIX}.{system}.*"


def name_of(routing_key: str, system: str) -> str | None:
    """The message name of a routing key of `system`, or None if it is not one of ours."""
    head = f"{PREFIX}.{system}."
    if not isinstance(routing_key, str) or not routing_key.startswith(head):
        return None
    name = routing_key[len(head) :]
    return name if name in _FIELDS else None


def check_system(system: Any) -> str:
    """A system name is a routing-key word: letters, digits, '_' and '-', at most 64."""
    if not isinstance(system, str) or not _SYSTEM_RE.match(system):
        raise ValueError(
            f"invalid failover system name {system!r}: use 1-64 letters, digits, '_' or '-'"
        )
    return system


def check_id(what: str, value: Any) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_ID or not value.isprintable():
        raise ValueError(f"invalid {what} {value!r}: expected 1-{MAX_ID} printable characters")
    if any(c.isspace() for c in value):
        raise ValueError(f"invalid {what} {value!r}: no spaces allowed")
    return value


def server_problem(server: Any) -> str | None:
    """What is wrong with a "host:port" server address, or None. The same rules as
    failover.redis_ops.parse_address (IPv6 hosts in brackets), without importing redis."""
    if not isinstance(server, str) or not 0 < len(server) <= MAX_ID:
        return 'expected a "host:port" string'
    if server.startswith("["):
        host, sep, rest = server[1:].partition("]")
        if not sep or not rest.startswith(":"):
            return 'expected "[ipv6]:port"'
        port = rest[1:]
    else:
        host, sep, port = server.rpartition(":")
        if not sep:
            return 'no port: expected "host:port"'
        if ":" in host:
            return "an IPv6 host must be in brackets"
    if not host or any(c.isspace() or c in "/[]" for c in host) or not host.isprintable():
        return "bad host"
    if not port.isdigit() or not 0 < int(port) < 65536:
        return "port must be a number 1..65535"
    return None


def check_server(server: Any) -> str:
    bad = server_problem(server)
    if bad:
        raise ValueError(f"invalid Redis server {server!r}: {bad}")
    return server


# ---- bodies -----------------------------------------------------------------------------------


def build(system: str, name: str, sender: str, token: Token, **fields: Any) -> dict[str, Any]:
    """A message body of type `name` from `sender` with `token` = (term, counter)."""
    return {
        "v": VERSION,
        "type": name,
        "system": system,
        "sender": sender,
        "term": token[0],
        "token": token[1],
        **fields,
    }


def token_of(body: dict[str, Any]) -> Token:
    return (body["term"], body["token"])


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _master_problem(v: Any) -> str | None:
    return None if v == "" else server_problem(v)


# kind -> check (monitors/message_fields.py)
KINDS: dict[str, Check] = {
    "count": check(lambda v: _is_count(v) and v < 2**63, "expected an integer >= 0"),
    "system": check(lambda v: isinstance(v, str) and bool(_SYSTEM_RE.match(v)), "bad system name"),
    "id": check(
        lambda v: isinstance(v, str) and 0 < len(v) <= MAX_ID and v.isprintable(),
        f"expected 1-{MAX_ID} printable characters",
    ),
    "server": server_problem,
    "master": _master_problem,
    "text": check(lambda v: isinstance(v, str) and len(v) <= MAX_TEXT, "expected a short string"),
}
# the head, then the type's fields
_CHECKED = {name: MessageFields(name, KINDS, {**_HEAD, **f}) for name, f in _FIELDS.items()}


def problem(routing_key: str, body: Any, system: str) -> str | None:
    """What is wrong with `body` received under `routing_key` for `system`, or None."""
    name = name_of(routing_key, system)
    if name is None:
        return f"not a failover message of system {system!r}: {str(routing_key)[:80]!r}"
    bad = not_an_object(body)
    if bad:
        return bad
    if body.get("v") != VERSION:
        return f"unsupported version {str(body.get('v'))[:16]!r} (we speak {VERSION})"
    if body.get("type") != name:
        return f"type {str(body.get('type'))[:64]!r} sent under routing key {routing_key!r}"
    bad = _CHECKED[name].problem(body)
    if bad:
        return bad
    if body["system"] != system:
        return f"{name}: system {body['system']!r} under the routing key of {system!r}"
    return None
