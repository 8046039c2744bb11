"""Waiters: `wait_for_tables` calls, answered when every named table has a replica to read.

Whatever can make a table readable (a load, a peer's `loaded`, a schema change) calls
`check`; a waiter that times out is told why each missing table is not loaded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mnesia_like.effects import MnesiaEffect, Reply
from mnesia_like.errors import BadArgument, NoSuchTable, TablesNotLoaded
from mnesia_like.messages import str_list
from mnesia_like.state import NodeState
from monitors.effects import CancelTimer, SetTimer


class Waiters:
    """Pending wait_for_tables requests (see the module docstring)."""

    def __init__(self, state: NodeState) -> None:
        self.s = state
        self._waiters: dict[int, list[str]] = {}  # wait_for_tables req -> tables

    def available(self, table: str) -> bool:
        return bool(self.s.read_sources(table))

    def wait_for_tables(self, req: int, tables: Any, timeout: float = 30.0) -> list[MnesiaEffect]:
        names = str_list(list(tables)) if isinstance(tables, list | tuple) else None
        if names is None:
            raise BadArgument("wait_for_tables takes a list of table names")
        for t in names:
            if t not in self.s.tables:
                raise NoSuchTable(t, self.s.node)
        missing = [t for t in names if not self.available(t)]
        if not missing:
            return [Reply(req, None)]
        self._waiters[req] = names
        return [SetTimer(f"wait:{req}", float(timeout))]

    def check(self) -> list[MnesiaEffect]:
        """Answer every waiter whose tables are all readable now (or one was deleted)."""
        out: list[MnesiaEffect] = []
        for req, names in list(self._waiters.items()):
            gone = [t for t in names if t not in self.s.tables]
            if gone:
                del self._waiters[req]
                out += [CancelTimer(f"wait:{req}"), Reply(req, error=NoSuchTable(gone[0]))]
            elif all(self.available(t) for t in names):
                del self._waiters[req]
                out += [CancelTimer(f"wait:{req}"), Reply(req, None)]
        return out

    def timeout(self, req: int, why_not_loaded: Callable[[str], str]) -> list[MnesiaEffect]:
        names = self._waiters.pop(req, None)
        if names is None:
            return []
        missing = [t for t in names if not self.available(t)]
        why = "; ".join(why_not_loaded(t) for t in missing)
        return [Reply(req, error=TablesNotLoaded(missing, why))]
