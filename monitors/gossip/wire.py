"""The messages of mingle, gossip and elections: routing keys, stamping, validation, chunking.

Every message is a versioned JSON object (docs/architecture.md, rule 4) with a common head:

    {"v": 1, "type": "worker-heartbeat", "hostname": "a@h", "pid": 4711,
     "clock": 17, "ts": 1700000000.25, ...fields of the type...}

`type` is the routing key with dots turned into dashes (Celery's event naming), so a message
that arrives under another routing key than its type says is refused. `clock` is the sender's
Lamport clock, forwarded for this message; `ts` its wall clock (time.time()) when sent.

`problem(routing_key, body)` says what is wrong with a message, or None: the cores log the
reason and drop the message, they never raise on input from the bus.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

from monitors.gossip.clock import LamportClock
from monitors.message_fields import ANY, Check, MessageFields, check, not_an_object

VERSION = 1

# ---- routing keys (type = routing key with "." -> "-") ------------------------------------------

ONLINE = "worker.online"
HEARTBEAT = "worker.heartbeat"
OFFLINE = "worker.offline"
REVOKE = "worker.revoke"
ELECT = "worker.elect"
ELECT_ACK = "worker.elect.ack"
ELECT_RESULT = "worker.elect.result"
HELLO = "mingle.hello"
REPLY = "mingle.reply"
CHUNK = "mingle.chunk"

#: What the shell subscribes to (AMQP topic patterns); a direct send uses the same keys.
PATTERNS = ("worker.#", "mingle.#")
#: What a client (an executor, issue 26) subscribes to: revokes, election results and the
#: replies to its own hello. Heartbeats, hellos and proposals reach core members only, so the
#: broker delivers O(N) messages for N clients, not O(N x N).
CLIENT_PATTERNS = (REVOKE, ELECT_RESULT, REPLY, CHUNK)

# ---- limits -------------------------------------------------------------------------------------

MAX_NAME = 255  # node names, task ids, election ids
MAX_TOPIC = 64
MAX_LIST = 1024  # nodes in an alive list
MAX_IDS = 5000  # revoked ids accepted in one message (we send at most `sync_chunk`)
MAX_CHUNKS = 1000  # chunks announced for one sync


def type_of(routing_key: str) -> str:
    return routing_key.replace(".", "-")


def member_id(hostname: str, pid: int) -> str:
    """Celery's "host.pid": a node's identity in elections (a restart is a new member)."""
    return f"{hostname}.{pid}"


class Stamper:
    """Who we are on the wire: builds the common head and forwards the clock for each message.

    Shared by the three cores of a node, so that every message they send moves the same clock.
    """

    def __init__(self, hostname: str, pid: int, clock: LamportClock) -> None:
        self.hostname = hostname
        self.pid = pid
        self.clock = clock
        self.member = member_id(hostname, pid)

    def stamp(
        self, routing_key: str, now: float, *, clock: int | None = None, **fields: Any
    ) -> dict[str, Any]:
        """A message for `routing_key`, stamped with a fresh clock (or `clock`, to resend a
        message with the clock it had: an election proposal keeps its clock across resends)."""
        return {
            "v": VERSION,
            "type": type_of(routing_key),
            "hostname": self.hostname,
            "pid": self.pid,
            "clock": self.clock.forward() if clock is None else clock,
            "ts": now,
            **fields,
        }


# ---- validation ---------------------------------------------------------------------------------

_HEAD = {
    "v": "int",
    "type": "str",
    "hostname": "name",
    "pid": "count",
    "clock": "count",
    "ts": "num",
}
_WORKER_OPT = {
    "freq": "pos",
    "active": "count",
    "processed": "count",
    "loadavg": "loadavg",
    "utcoffset": "num",
    "sw_ident": "text",
    "sw_ver": "text",
    "sw_sys": "text",
    "revoked_digest": "digest",
    "client": "bool",
}

#: routing key -> (required fields, optional fields), beyond the head.
SCHEMAS: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    ONLINE: ({"freq": "pos"}, _WORKER_OPT),
    HEARTBEAT: ({"freq": "pos"}, _WORKER_OPT),
    OFFLINE: ({}, _WORKER_OPT),
    REVOKE: ({"ids": "revoked"}, {}),
    ELECT: (
        {"id": "name", "topic": "topic", "candidate": "bool"},
        {"action": "any", "client": "bool", "for": "member"},
    ),
    ELECT_ACK: (
        {"id": "name", "to": "name", "to_clock": "count"},
        {"best": "best", "best_topic": "topic", "best_for": "member"},
    ),
    ELECT_RESULT: (
        {
            "id": "name",
            "topic": "topic",
            "winner": "name",
            "winner_pid": "count",
            "winner_clock": "count",
        },
        {"action": "any", "for": "member"},
    ),
    HELLO: (
        {"round": "count", "chunks": "chunks", "revoked": "revoked"},
        {"client": "bool", "one": "bool"},
    ),
    REPLY: (
        {"round": "count", "chunks": "chunks", "revoked": "revoked", "alive": "names"},
        {"settled": "bool", "to_pid": "count", "ask": "bool"},
    ),
    CHUNK: (
        {
            "round": "count",
            "of": "of",
            "seq": "count",
            "chunks": "chunks",
            "revoked": "revoked",
        },
        {},
    ),
}


def _is_int(v: Any) -> bool:
    return type(v) is int  # exactly: JSON gives int or bool, and bool is no number here


def _is_num(v: Any) -> bool:
    t = type(v)
    return t is int or (t is float and math.isfinite(v))


def _name_ok(v: Any, limit: int = MAX_NAME) -> bool:
    return isinstance(v, str) and 0 < len(v) <= limit


def _names_ok(v: Any) -> bool:
    """A list of node names. Checked with C-level loops: a reply names every alive node, and a
    joiner checks 50 such lists at once."""
    if not isinstance(v, list) or len(v) > MAX_LIST:
        return False
    return not v or (
        set(map(type, v)) == {str} and all(map(len, v)) and max(map(len, v)) <= MAX_NAME
    )


def _loadavg_ok(v: Any) -> bool:
    return isinstance(v, list) and len(v) <= 3 and all(map(_is_num, v))


def _digest_ok(v: Any) -> bool:
    return isinstance(v, list) and len(v) == 2 and all(_is_int(x) and x >= 0 for x in v)


def _member_ok(v: Any) -> bool:
    return isinstance(v, list) and len(v) == 2 and _name_ok(v[0]) and _is_int(v[1]) and v[1] >= 0


def _best_ok(v: Any) -> bool:
    ok = isinstance(v, list) and len(v) == 3 and _is_int(v[0]) and v[0] >= 0
    return ok and _name_ok(v[1]) and _is_int(v[2]) and v[2] >= 0


def _revoked_problem(v: Any) -> str | None:
    if not isinstance(v, dict) or len(v) > MAX_IDS:
        return f"expected an object {{task id: timestamp}} of at most {MAX_IDS} entries"
    for key, ts in v.items():
        if not _name_ok(key):
            return f"bad task id {str(key)[:64]!r}"
        if not _is_num(ts) or ts < 0:
            return f"bad timestamp for {key[:64]!r}"
    return None


# kind -> check (monitors/message_fields.py): every message is checked field by field, and
# each type's MessageFields looks its fields' checks up once, at import
KINDS: dict[str, Check] = {
    "int": check(_is_int, "expected an integer"),
    "count": check(lambda v: _is_int(v) and v >= 0, "expected an integer >= 0"),
    "num": check(_is_num, "expected a finite number"),
    "pos": check(lambda v: _is_num(v) and v > 0, "expected a number > 0"),
    "bool": check(lambda v: isinstance(v, bool), "expected true or false"),
    "str": check(lambda v: isinstance(v, str), "expected a string"),
    "text": check(lambda v: isinstance(v, str) and len(v) <= MAX_NAME, "expected a short string"),
    "name": check(_name_ok, f"expected a non-empty string of <= {MAX_NAME} chars"),
    "topic": check(lambda v: _name_ok(v, MAX_TOPIC), f"expected a topic of <= {MAX_TOPIC} chars"),
    "names": check(_names_ok, f"expected a list of at most {MAX_LIST} node names"),
    "chunks": check(lambda v: _is_int(v) and 1 <= v <= MAX_CHUNKS, f"expected 1..{MAX_CHUNKS}"),
    "of": check(lambda v: v in ("hello", "reply"), 'expected "hello" or "reply"'),
    "loadavg": check(_loadavg_ok, "expected a list of at most 3 numbers"),
    "digest": check(_digest_ok, "expected [count, crc]"),
    "best": check(_best_ok, "expected [clock, hostname, pid]"),
    "member": check(_member_ok, "expected [hostname, pid]"),
    "revoked": _revoked_problem,
    "any": ANY,  # the frame limit of the bus bounds it
}
# the head, then the type's fields (in that order, so the first problem named is the same as
# field by field)
_FIELDS = {
    rk: MessageFields(rk, KINDS, {**_HEAD, **required}, optional)
    for rk, (required, optional) in SCHEMAS.items()
}


def problem(routing_key: str, body: Any) -> str | None:
    """What is wrong with `body` received under `routing_key`, or None if it is well formed."""
    fields = _FIELDS.get(routing_key)
    if fields is None:
        return f"unknown routing key {routing_key[:64]!r}"
    bad = not_an_object(body)
    if bad:
        return bad
    if body.get("v") != VERSION:
        return f"unsupported version {str(body.get('v'))[:16]!r} (we speak {VERSION})"
    bad = fields.problem(body)
    if bad:
        return bad
    if body["type"] != type_of(routing_key):
        return f"type {body['type'][:64]!r} sent under routing key {routing_key!r}"
    if ("best" in body) != ("best_topic" in body):
        return f"{routing_key}: best and best_topic go together"
    return None


# ---- revoked sets on the wire ---------------------------------------------------------------------


def as_stamps(entries: Mapping[str, Any], now: float) -> dict[str, float]:
    """Validated wire entries as LimitedSet stamps: floats, none later than `now`.

    A stamp from a peer whose clock runs ahead would keep the id past its expiry everywhere;
    an id cannot have been revoked later than now, so later stamps become now.
    """
    return {k: min(float(v), now) for k, v in entries.items()}


def split(entries: Mapping[str, float], size: int, cap: int) -> list[dict[str, float]]:
    """`entries` as chunks of at most `size`, newest first, at most `cap` entries in all.

    Newest first because a capped or interrupted sync should carry the ids whose tasks may
    still be queued; every entry carries its stamp, so order means nothing to the receiver.
    Always at least one (possibly empty) chunk: the header message carries the first.
    """
    items = sorted(entries.items(), key=lambda kv: kv[1], reverse=True)[: max(cap, 0)]
    size = max(size, 1)
    chunks = [dict(items[i : i + size]) for i in range(0, len(items), size)]
    return chunks or [{}]


def digest(ids: Iterable[str]) -> list[int]:
    """[count, sum of crc32 mod 2**32] of a set of ids: equal sets give equal digests on every
    host (Python's hash() is salted per process), and it needs no sorting."""
    n = 0
    total = 0
    crc = zlib.crc32
    for item in ids:
        n += 1
        total += crc(item.encode())
    return [n, total & 0xFFFFFFFF]
