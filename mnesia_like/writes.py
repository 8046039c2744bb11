"""Writes: how an entry gets into a replica, and on to the replicas the writer missed.

Every write carries a stamp (Lamport, node) and a replica keeps the newest entry per key.
That makes copies, forwards and the lww merge order-independent. A node that applies a write
forwards it to active replicas the writer did not know of (a table being copied).

This part also keeps, per table this node holds, the count of tombstones (deleted keys kept so
that an older write cannot bring a record back; bounded by max_tombstones) and, per loaded
table, the bucket digests that anti-entropy compares (records.table_sums), kept up to date as
entries apply.
"""

from __future__ import annotations

from typing import Any

from mnesia_like import records as rec
from mnesia_like.effects import DiscCommit, MnesiaEffect
from mnesia_like.messages import str_list
from mnesia_like.state import NodeState, encode, entry_pair_ok


class Writes:
    """Applying stamped entries to this node's tables (see the module docstring)."""

    def __init__(self, state: NodeState, *, chunk_bytes: int, max_tombstones: int) -> None:
        self.s = state
        self.chunk_bytes = chunk_bytes
        self.max_tombstones = max_tombstones
        self.tombs: dict[str, int] = {}
        self.sums: dict[str, list[int]] = {}

    # ---- a table's contents come and go

    def open_empty(self, table: str) -> None:
        """`table` starts empty here (created, or about to be copied into)."""
        self.s.store[table] = {}
        self.tombs[table] = 0

    def open(self, table: str, content: dict[str, Any]) -> None:
        """`table` holds `content` here (read from local disc)."""
        self.s.store[table] = content
        self.count_tombs(table)

    def index(self, table: str) -> None:
        """`table` is loaded: its anti-entropy digests from now on."""
        self.sums[table] = rec.table_sums(self.s.store[table])

    def unindex(self, table: str | None = None) -> None:
        """`table` (None: every table) is no longer loaded here."""
        if table is None:
            self.sums.clear()
        else:
            self.sums.pop(table, None)

    def count_tombs(self, table: str) -> None:
        self.tombs[table] = sum(1 for e in self.s.store[table].values() if e["r"] is None)

    # ---- applying

    def apply_entries(
        self, table: str, entries: list[list[Any]], targets: list[str], forward: bool = True
    ) -> list[MnesiaEffect]:
        """Keep the newer of each incoming entry and ours; disc first, then memory; then
        forward to active replicas the writer did not reach."""
        s = self.s
        content = s.store.get(table)
        if content is None:
            return self._apply_to_disc_data(table, entries)
        out: list[MnesiaEffect] = []
        applied: list[list[Any]] = []
        for kj, entry in entries:
            if rec.newer(entry, content.get(kj)):
                applied.append([kj, entry])
        if not applied:
            return []
        disc_ops: list[tuple[str, Any, Any]] = []
        sums = self.sums.get(table) if table in s.loaded else None
        tombs = self.tombs
        for kj, entry in applied:
            old = content.get(kj)
            content[kj] = entry
            if sums is not None:
                sums[rec.bucket_of(kj)] ^= rec.entry_hash(kj, old) ^ rec.entry_hash(kj, entry)
            if entry["r"] is None and (old is None or old["r"] is not None):
                tombs[table] = tombs.get(table, 0) + 1
            elif entry["r"] is not None and old is not None and old["r"] is None:
                tombs[table] = tombs.get(table, 0) - 1
            disc_ops.append(("put", rec.key_from_json(kj), entry))
        disc_ops += self._prune_tombstones(table)
        if s.is_disc(table):
            out.append(DiscCommit(table, s.next_disc_tid(table), tuple(disc_ops)))
        if forward:
            extra = s.write_view(table) - set(targets) - {s.node}
            for n in sorted(extra):
                out.append(
                    s.send(
                        n,
                        "dirty",
                        table=table,
                        entries=applied,
                        to=sorted({*targets, *extra}),
                        fwd=True,
                    )
                )
        return out

    def _apply_to_disc_data(self, table: str, entries: list[list[Any]]) -> list[MnesiaEffect]:
        """A commit for a disc table not loaded yet (a restarted node resolving an in-doubt
        transaction): into the disc copy it will load from, if it loads from its own disc
        (from a peer, the copy replaces it)."""
        data = self.s.disc_data.get(table)
        if data is None or not self.s.is_disc(table):
            return []
        ops: list[tuple[str, Any, Any]] = []
        for kj, entry in entries:
            if rec.newer(entry, data.get(kj)):
                data[kj] = entry
                ops.append(("put", rec.key_from_json(kj), entry))
        if not ops:
            return []
        return [DiscCommit(table, self.s.next_disc_tid(table), tuple(ops))]

    def _prune_tombstones(self, table: str) -> list[tuple[str, Any, Any]]:
        """Tombstone retention: at most max_tombstones per table; the oldest go first.
        A delete older than the retained ones can be undone by an lww merge or a late
        forward of an even older write."""
        if self.tombs.get(table, 0) <= self.max_tombstones:
            return []
        content = self.s.store[table]
        tombs = sorted(
            ((rec.stamp_of(e), kj) for kj, e in content.items() if e["r"] is None),
        )
        excess = len(tombs) - self.max_tombstones
        ops = []
        for _stamp, kj in tombs[:excess]:
            del content[kj]
            ops.append(("del", rec.key_from_json(kj), None))
        self.tombs[table] = len(tombs) - len(ops)
        return ops

    def on_dirty(self, sender: str, m: dict[str, Any], now: float) -> list[MnesiaEffect]:
        """A replica's write (a dirty write, or a forward of any write) reaches us."""
        table = m["table"]
        if table not in self.s.store:
            return []
        entries = [e for e in m["entries"] if entry_pair_ok(e)]
        to = str_list(m["to"]) or []
        return self.apply_entries(table, entries, to, forward=not m["fwd"])

    # ---- shipping contents (copies, merges, repairs)

    def chunks(self, content: dict[str, Any]) -> list[tuple[list[list[Any]], bool]]:
        """`content` as `[key_json, entry]` lists of about chunk_bytes each; the bool says
        which is the last."""
        chunks: list[tuple[list[list[Any]], bool]] = []
        cur: list[list[Any]] = []
        size = 0
        for kj, entry in content.items():
            n = len(kj) + len(encode(entry)) + 8
            if cur and size + n > self.chunk_bytes:
                chunks.append((cur, False))
                cur, size = [], 0
            cur.append([kj, entry])
            size += n
        chunks.append((cur, True))
        return chunks
