"""DirtyOps: the dirty operations of the API, without locks or transactions.

A dirty write is stamped here and applied to every active replica (this node's first, so
that its disc copy has it before the answer); the other replicas get it asynchronously. A
dirty read is served by this node when it has the table loaded, else by a running replica
that has (a remote read, asked again of another replica if that one goes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mnesia_like import records as rec
from mnesia_like.effects import MnesiaEffect, Reply
from mnesia_like.errors import BadArgument, MnesiaError, NoSuchTable, TablesNotLoaded
from mnesia_like.state import NodeState
from mnesia_like.writes import Writes


class DirtyOps:
    """dirty_read / write / delete / match / select (see the module docstring)."""

    def __init__(
        self, state: NodeState, writes: Writes, why_not_loaded: Callable[[str], str]
    ) -> None:
        self.s = state
        self.writes = writes
        self.why_not_loaded = why_not_loaded
        self._rreads: dict[int, tuple[int, str, str, str, Any]] = {}

    def _table_def(self, table: Any) -> dict[str, Any]:
        d = self.s.tables.get(table) if isinstance(table, str) else None
        if d is None:
            raise NoSuchTable(str(table), self.s.node)
        return d

    # ---- writes

    def dirty_write(self, req: int, table: Any, record: Any) -> list[MnesiaEffect]:
        d = self._table_def(table)
        kj, full = rec.check_record(table, d["attributes"], d["key"], record)
        return self._dirty_put(req, table, kj, full)

    def dirty_delete(self, req: int, table: Any, key: Any) -> list[MnesiaEffect]:
        self._table_def(table)
        return self._dirty_put(req, table, rec.check_key(table, key), None)

    def _dirty_put(self, req: int, table: str, kj: str, value: Any) -> list[MnesiaEffect]:
        s = self.s
        targets = s.write_view(table)
        if not targets:
            raise TablesNotLoaded([table], "no active replica")
        s.clock += 1
        entry = {"r": value, "s": [s.clock, s.node]}
        to = sorted(targets)
        out: list[MnesiaEffect] = []
        if s.node in targets:
            out += self.writes.apply_entries(table, [[kj, entry]], to)
        for n in to:
            if n != s.node:
                out.append(s.send(n, "dirty", table=table, entries=[[kj, entry]], to=to, fwd=False))
        return [*out, Reply(req, None)]

    # ---- reads

    def dirty_read(self, req: int, table: Any, key: Any) -> list[MnesiaEffect]:
        self._table_def(table)
        return self._read_op(req, table, "read", rec.check_key(table, key))

    def dirty_match(self, req: int, table: Any, pattern: Any) -> list[MnesiaEffect]:
        d = self._table_def(table)
        return self._read_op(
            req, table, "match", rec.check_pattern(table, d["attributes"], pattern)
        )

    def dirty_select(self, req: int, table: Any, spec: Any) -> list[MnesiaEffect]:
        d = self._table_def(table)
        return self._read_op(req, table, "select", rec.check_select(table, d["attributes"], spec))

    def _read_op(self, req: int, table: str, op: str, arg: Any) -> list[MnesiaEffect]:
        if table in self.s.loaded:
            return [Reply(req, self._local_read(table, op, arg))]
        return self._remote_read(req, table, op, arg)

    def _local_read(self, table: str, op: str, arg: Any) -> Any:
        content = self.s.store[table]
        if op == "read":
            entry = content.get(arg)
            return None if entry is None else entry["r"]
        rows = (e["r"] for e in content.values() if e["r"] is not None)
        if op == "match":
            return [r for r in rows if rec.matches(r, arg)]
        return rec.select(rows, arg)

    def _remote_read(self, req: int, table: str, op: str, arg: Any) -> list[MnesiaEffect]:
        s = self.s
        sources = [n for n in s.read_sources(table) if n != s.node]
        if not sources:
            return [Reply(req, error=TablesNotLoaded([table], self.why_not_loaded(table)))]
        rid = s.next_rid()
        self._rreads[rid] = (req, sources[0], table, op, arg)
        return [s.send(sources[0], "rread", rid=rid, table=table, op=op, arg=arg)]

    def peer_gone(self, node: str) -> list[MnesiaEffect]:
        """Remote reads `node` was serving are asked of another replica (or fail)."""
        out: list[MnesiaEffect] = []
        for rid, (req, target, table, op, arg) in list(self._rreads.items()):
            if target == node:
                del self._rreads[rid]
                out += self._remote_read(req, table, op, arg)
        return out

    def on_rread(self, sender: str, m: dict[str, Any], now: float) -> list[MnesiaEffect]:
        s = self.s
        table, op = m["table"], m["op"]
        if (
            table not in s.loaded
            or op not in ("read", "match", "select")
            or sender not in s.running
        ):
            return [s.send(sender, "rread_r", rid=m["rid"], ok=False, result=None)]
        d = s.tables[table]
        arg = m["arg"]
        try:
            if op == "read":
                if not isinstance(arg, str):
                    raise BadArgument("bad key")
            elif op == "match":
                arg = rec.check_pattern(table, d["attributes"], arg)
            else:
                arg = rec.check_select(table, d["attributes"], arg)
        except MnesiaError:
            return [s.send(sender, "rread_r", rid=m["rid"], ok=False, result=None)]
        result = self._local_read(table, op, arg)
        return [s.send(sender, "rread_r", rid=m["rid"], ok=True, result=result)]

    def on_rread_r(self, sender: str, m: dict[str, Any], now: float) -> list[MnesiaEffect]:
        pending = self._rreads.pop(m["rid"], None)
        if pending is None:
            return []
        req, _target, table, _op, _arg = pending
        if not m["ok"]:
            return [Reply(req, error=TablesNotLoaded([table], f"{sender} could not serve it"))]
        return [Reply(req, m["result"])]
