"""The store's own effects, next to the common ones in monitors/effects.py.

The contract with the shell: a `DiscCommit` is durable (fsync="commit") before any effect that
follows it in the list is performed, so a `DiscCommit` followed by a `Send` of an ack means
"acknowledged after it is on disc". The shell keeps it with group commit (mnesia_like/shell.py):
it holds every later effect that could let anything out of the node until one fsync has made
the whole batch of commits durable; only answers to a transaction's own operations and messages
to the node itself may pass, and disc effects keep their order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from monitors.effects import Effect


@dataclass(frozen=True)
class Reply:
    """Answer the local API request `req_id`: `value`, or raise `error` in the caller."""

    req_id: int
    value: Any = None
    error: Exception | None = None


@dataclass(frozen=True)
class DiscCommit:
    """Append one commit to the disc copy of `table`: `TableLog.append_commit(tid, ops)`.

    `tid` is this node's per-table commit counter (strictly increasing per table); `ops` are
    `("put", key, entry)` (a tombstone is a put of an entry whose record is None, so deletes
    survive restarts for the lww merge) and `("del", key, None)` (a pruned tombstone).

    Two relaxations, for a parallel commit (coordinator.py), whose writes are durable in the
    participants' prepare records before they are applied:
    - `lazy`: the append is fsynced with the next batch, but nothing waits for it (the effects
      after it are not held): it only materialises what a prepare record already holds;
    - `after`: the append waits until everything appended before it is on disc (the marker
      that replaces a prepare record must never be on disc before the table's own append).
    A `tid` of 0 (the `_prepared` log only) is numbered by the shell as the record reaches
    the log.
    """

    table: str
    tid: int
    ops: tuple[tuple[str, Any, Any], ...]
    lazy: bool = False
    after: bool = False


@dataclass(frozen=True)
class ReplaceTable:
    """Make `entries` (key_json -> entry) the whole disc copy of `table`: `replace_all`.

    After a copy from another replica (load, add_table_copy, autoheal reload)."""

    table: str
    tid: int
    entries: dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class DropTable:
    """Delete the disc files of `table` here (delete_table, del_table_copy, disc -> none)."""

    table: str


@dataclass(frozen=True)
class PersistSchema:
    """Write the node's schema state (`schema_file.write_schema`): db_nodes, tables, the
    active disc copies per table as last seen (Mnesia's nodes-running-at-shutdown rule), the
    nodes this node saw go down, and its Lamport clock."""

    state: dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class MnesiaEvent:
    """For subscribers (Mnesia's system events): `kind` is mnesia_up, mnesia_down,
    inconsistent_database (detail: running_partitioned_network | starting_partitioned_network),
    schema_conflict, table_loaded, heal (detail: what was done)."""

    kind: str
    node: str
    detail: Any = None


# Everything a MnesiaCore part may return: the common effects and the store's own.
MnesiaEffect = Effect | Reply | DiscCommit | ReplaceTable | DropTable | PersistSchema | MnesiaEvent
