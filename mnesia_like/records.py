"""Records, keys, entries, match patterns and the select spec language.

A table has `attributes` (field names) and a `key` attribute (Mnesia: the first one). A record
is a JSON object whose fields are among the attributes; missing ones are filled with None, so
every stored record has every attribute, as Mnesia's tuples do. The key must be a JSON scalar
or a list of them (what the disc log accepts).

What is stored per key is an *entry*: `{"r": record, "s": [lamport, node]}`, or a tombstone
`{"r": null, "s": [...]}` for a delete. The stamp orders writes: replicas apply an entry only if
its stamp is newer than theirs, which makes replication, copies and the lww merge
order-independent.

Queries never evaluate code: `match` is a dict of attribute -> value (omitted attributes are
wildcards, as Mnesia's '_'), and `select` is a small JSON spec (see `check_select`).
"""

from __future__ import annotations

import hashlib
import json
import math
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

from mnesia_like.errors import BadArgument, BadRecord

MAX_RECORD_BYTES = 256 * 1024  # a record must fit in one dist frame with room to spare
_encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
_encode_key = json.JSONEncoder(separators=(",", ":"), allow_nan=False, sort_keys=True).encode

Stamp = list  # [lamport: int, node: str]
Entry = dict  # {"r": record | None, "s": Stamp}


def key_json(key: Any) -> str:
    """The canonical JSON text of a key (the same text the disc log indexes by)."""
    return _encode_key(key)


def key_from_json(text: str) -> Any:
    return json.loads(text)


def _key_problem(key: Any) -> str | None:
    if isinstance(key, bool | str | int):
        return None
    if isinstance(key, float):
        return None if math.isfinite(key) else f"key {key!r} is not a JSON number"
    if isinstance(key, list | tuple):
        for part in key:
            bad = _key_problem(part)
            if bad:
                return bad
        return None
    return f"key {key!r} is a {type(key).__name__}: keys are str, int, float, bool or lists of them"


def check_key(table: str, key: Any) -> str:
    """The key's canonical JSON, or BadRecord."""
    bad = _key_problem(key)
    if bad:
        raise BadRecord(table, bad)
    return key_json(key)


def check_record(
    table: str, attributes: list[str], key_attr: str, record: Any
) -> tuple[str, dict[str, Any]]:
    """Validate `record` for `table`; return (key_json, the full record as JSON gives it back).

    Raises BadRecord naming what is wrong (not a dict, unknown field, no key, not JSON, too big).
    """
    if not isinstance(record, Mapping):
        raise BadRecord(table, f"expected a dict of {attributes}, got {type(record).__name__}")
    unknown = [k for k in record if k not in attributes]
    if unknown:
        raise BadRecord(table, f"unknown field(s) {unknown}; the attributes are {attributes}")
    if record.get(key_attr) is None:
        raise BadRecord(table, f"no value for the key attribute {key_attr!r}")
    full = {a: record.get(a) for a in attributes}
    try:
        text = _encode(full)
    except (TypeError, ValueError) as exc:
        raise BadRecord(table, f"not JSON-serialisable: {exc}") from None
    if len(text) > MAX_RECORD_BYTES:
        raise BadRecord(table, f"{len(text)} bytes as JSON, above the limit of {MAX_RECORD_BYTES}")
    kj = check_key(table, full[key_attr])
    return kj, json.loads(text)  # what every replica will hold: tuples become lists


def newer(a: Entry | None, b: Entry | None) -> bool:
    """Whether entry `a` wins over `b` (None loses to anything)."""
    if a is None:
        return False
    if b is None:
        return True
    return (a["s"][0], a["s"][1]) > (b["s"][0], b["s"][1])


def stamp_of(entry: Entry | None) -> tuple[int, str]:
    if entry is None:
        return (0, "")
    return (entry["s"][0], entry["s"][1])


def entry_ok(entry: Any) -> bool:
    """Whether `entry` (from the network or disc) has the entry shape."""
    if not isinstance(entry, dict):
        return False
    s = entry.get("s")
    r = entry.get("r")
    return (
        isinstance(s, list)
        and len(s) == 2
        and isinstance(s[0], int)
        and not isinstance(s[0], bool)
        and isinstance(s[1], str)
        and (r is None or isinstance(r, dict))
    )


# ---------------------------------------------------------------------------- anti-entropy sums

SYNC_BUCKETS = 64  # keys are spread over this many buckets; each has its own digest


def bucket_of(kj: str) -> int:
    """The anti-entropy bucket of a key (stable across processes and versions)."""
    return zlib.crc32(kj.encode()) % SYNC_BUCKETS


def entry_hash(kj: str, entry: Entry | None) -> int:
    """A live entry's contribution to its bucket's digest (XOR-combined, so it can be
    updated in place). Tombstones count as nothing: a replica that pruned one and a replica
    that keeps it agree, and a live record against a tombstone still differs."""
    if entry is None or entry["r"] is None:
        return 0
    text = f"{kj}\x00{entry['s'][0]}\x00{entry['s'][1]}".encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")


def table_sums(content: Mapping[str, Entry]) -> list[int]:
    """Per-bucket digests of a table's live entries (by key and stamp)."""
    sums = [0] * SYNC_BUCKETS
    for kj, entry in content.items():
        if entry["r"] is not None:
            sums[bucket_of(kj)] ^= entry_hash(kj, entry)
    return sums


def sums_ok(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) == SYNC_BUCKETS
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    )


# ---------------------------------------------------------------------------- table definitions


def check_table_def(
    name: Any,
    attributes: Any,
    key: Any,
    ram_copies: Any,
    disc_copies: Any,
) -> tuple[list[str], str, list[str], list[str]]:
    """Validate create_table arguments; return (attributes, key, ram, disc) normalised."""
    from mnesia_like.disc_log import check_table_name

    if not isinstance(name, str):
        raise BadArgument(f"create_table: the name must be a str, not {name!r}")
    try:
        check_table_name(name)
    except (ValueError, TypeError) as exc:
        raise BadArgument(f"create_table: {exc}") from None
    if name == "schema":
        raise BadArgument("create_table: 'schema' is the schema's own table name")
    if not isinstance(attributes, list | tuple) or not attributes:
        raise BadArgument(f"create_table({name!r}): attributes must be a non-empty list of names")
    attrs = list(attributes)
    if not all(isinstance(a, str) and a for a in attrs) or len(set(attrs)) != len(attrs):
        raise BadArgument(f"create_table({name!r}): attributes must be distinct names: {attrs}")
    key = attrs[0] if key is None else key
    if key not in attrs:
        raise BadArgument(f"create_table({name!r}): key {key!r} is not one of {attrs}")
    ram = _node_list(name, "ram_copies", ram_copies)
    disc = _node_list(name, "disc_copies", disc_copies)
    both = set(ram) & set(disc)
    if both:
        raise BadArgument(f"create_table({name!r}): {sorted(both)} in both ram and disc copies")
    if not ram and not disc:
        raise BadArgument(f"create_table({name!r}): give at least one ram or disc copy")
    return attrs, key, ram, disc


def _node_list(table: str, what: str, nodes: Any) -> list[str]:
    if nodes is None:
        return []
    if isinstance(nodes, str) or not isinstance(nodes, Iterable):
        raise BadArgument(f"create_table({table!r}): {what} must be a list of node names")
    out = list(nodes)
    if not all(isinstance(n, str) and "@" in n for n in out):
        raise BadArgument(f"create_table({table!r}): {what} must hold node names 'name@host'")
    return sorted(set(out))


# ---------------------------------------------------------------------------- match and select


def check_pattern(table: str, attributes: list[str], pattern: Any) -> dict[str, Any]:
    """A match pattern: {attribute: value}; omitted attributes match anything."""
    if not isinstance(pattern, Mapping):
        raise BadArgument(f"match on {table!r}: the pattern must be a dict attribute -> value")
    unknown = [k for k in pattern if k not in attributes]
    if unknown:
        raise BadArgument(f"match on {table!r}: unknown attribute(s) {unknown}; have {attributes}")
    try:
        return json.loads(_encode(dict(pattern)))
    except (TypeError, ValueError) as exc:
        raise BadArgument(f"match on {table!r}: the pattern is not JSON: {exc}") from None


def matches(record: dict[str, Any], pattern: dict[str, Any]) -> bool:
    return all(record.get(k) == v for k, v in pattern.items())


SELECT_OPS = ("==", "!=", "<", "<=", ">", ">=", "in", "prefix")


def check_select(table: str, attributes: list[str], spec: Any) -> dict[str, Any]:
    """Validate a select spec: {"where": [[attr, op, value], ...], "fields": [...], "limit": n}.

    Conditions are ANDed; ops are == != < <= > >= (a comparison across types is false),
    "in" (value is a list) and "prefix" (strings). `fields` projects the records (default:
    whole records); `limit` caps the number of results.
    """
    if not isinstance(spec, Mapping):
        raise BadArgument(f"select on {table!r}: the spec must be a dict (where, fields, limit)")
    extra = set(spec) - {"where", "fields", "limit"}
    if extra:
        raise BadArgument(f"select on {table!r}: unknown spec key(s) {sorted(extra)}")
    where = spec.get("where", [])
    if not isinstance(where, list | tuple):
        raise BadArgument(f"select on {table!r}: where must be a list of [attr, op, value]")
    conds = []
    for cond in where:
        if not isinstance(cond, list | tuple) or len(cond) != 3:
            raise BadArgument(f"select on {table!r}: condition {cond!r} is not [attr, op, value]")
        attr, op, value = cond
        if attr not in attributes:
            raise BadArgument(f"select on {table!r}: unknown attribute {attr!r}; have {attributes}")
        if op not in SELECT_OPS:
            raise BadArgument(f"select on {table!r}: op {op!r} is not one of {SELECT_OPS}")
        if op == "in" and not isinstance(value, list | tuple):
            raise BadArgument(f"select on {table!r}: 'in' needs a list, got {value!r}")
        if op == "prefix" and not isinstance(value, str):
            raise BadArgument(f"select on {table!r}: 'prefix' needs a string, got {value!r}")
        conds.append([attr, op, value])
    fields = spec.get("fields")
    if fields is not None and (
        not isinstance(fields, list | tuple) or any(f not in attributes for f in fields)
    ):
        raise BadArgument(f"select on {table!r}: fields must be a list of {attributes}")
    limit = spec.get("limit")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        raise BadArgument(f"select on {table!r}: limit must be a non-negative int")
    out = {"where": conds, "fields": list(fields) if fields is not None else None, "limit": limit}
    try:
        return json.loads(_encode(out))
    except (TypeError, ValueError) as exc:
        raise BadArgument(f"select on {table!r}: the spec is not JSON: {exc}") from None


def _holds(value: Any, op: str, arg: Any) -> bool:
    try:
        if op == "==":
            return value == arg
        if op == "!=":
            return value != arg
        if op == "in":
            return value in arg
        if op == "prefix":
            return isinstance(value, str) and value.startswith(arg)
        if type(value) is not type(arg) and not (
            isinstance(value, int | float)
            and isinstance(arg, int | float)
            and not isinstance(value, bool)
            and not isinstance(arg, bool)
        ):
            return False
        if op == "<":
            return value < arg
        if op == "<=":
            return value <= arg
        if op == ">":
            return value > arg
        return value >= arg
    except TypeError:
        return False


def select(records: Iterable[dict[str, Any]], spec: dict[str, Any]) -> list[Any]:
    """Apply a checked spec (see check_select) to records."""
    out: list[Any] = []
    where = spec["where"]
    fields = spec["fields"]
    limit = spec["limit"]
    for rec in records:
        if limit is not None and len(out) >= limit:
            break
        if all(_holds(rec.get(a), op, v) for a, op, v in where):
            out.append(rec if fields is None else {f: rec.get(f) for f in fields})
    return out
