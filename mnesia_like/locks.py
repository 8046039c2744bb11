"""The lock manager of one replica: read/write locks per record and per table, wait-die.

Mnesia takes a transaction's locks on every active replica of the record's table, and resolves
a deadlock by restarting a transaction. It uses *wait-die* (Rosenkrantz et al.): a transaction
may only wait for a *younger* one; a transaction that would wait for an older one dies and is
restarted, keeping its original age so that it eventually becomes the oldest and gets through.
Waits therefore always go from older to younger, so no wait cycle (deadlock) can form, also not
across replicas: the ages are global (Lamport time, node, sequence).

Resources are `(table, key_json)` and `(table, None)` (the whole table; match and select take
a table read lock). Read locks share; a write lock excludes everything else of other
transactions; a table lock conflicts with every key lock of the table. Queued requests block
later conflicting ones (first come, first served), and count as conflicts for the wait-die test.

Pure: no threads, no time. `request` answers "granted", "wait" or "die"; `release` returns the
waiters that got their lock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Age = tuple[Any, ...]  # smaller is older
Mode = Literal["read", "write"]
Answer = Literal["granted", "wait", "die"]


@dataclass
class _Waiter:
    tid: str
    age: Age
    table: str
    key: str | None
    mode: Mode


@dataclass
class _Table:
    # (key or None) -> {tid: mode}
    held: dict[str | None, dict[str, Mode]] = field(default_factory=dict)
    waiting: list[_Waiter] = field(default_factory=list)


@dataclass(frozen=True)
class Granted:
    """A queued request that has now got its lock."""

    tid: str
    table: str
    key: str | None
    mode: Mode


def _conflict(a: Mode, b: Mode) -> bool:
    return a == "write" or b == "write"


def _overlap(k1: str | None, k2: str | None) -> bool:
    return k1 is None or k2 is None or k1 == k2


class LockManager:
    """Locks of one node. Every transaction is named by its tid and carries its age."""

    def __init__(self) -> None:
        self._tables: dict[str, _Table] = {}
        self._ages: dict[str, Age] = {}
        self._by_tid: dict[str, set[tuple[str, str | None]]] = {}

    # ------------------------------------------------------------------ queries

    def holds(self, tid: str) -> bool:
        """Whether `tid` holds or waits for anything here."""
        return tid in self._by_tid

    def waiting(self, tid: str) -> bool:
        return any(w.tid == tid for t in self._tables.values() for w in t.waiting)

    def held_by(self, tid: str) -> list[tuple[str, str | None, Mode]]:
        out = []
        for table, key in sorted(self._by_tid.get(tid, ()), key=repr):
            mode = self._tables[table].held.get(key, {}).get(tid)
            if mode is not None:
                out.append((table, key, mode))
        return out

    def tids(self) -> list[str]:
        return sorted(self._by_tid)

    # ------------------------------------------------------------------ requests

    def _conflicts(
        self, tab: _Table, tid: str, key: str | None, mode: Mode, before: int | None = None
    ) -> list[str]:
        """Other tids whose held locks or earlier queued requests conflict with the request."""
        out: list[str] = []
        if key is None:
            holders = [h for hs in tab.held.values() for h in hs.items()]
        else:
            holders = list(tab.held.get(key, {}).items()) + list(tab.held.get(None, {}).items())
        for other, held_mode in holders:
            if other != tid and _conflict(mode, held_mode):
                out.append(other)
        queue = tab.waiting if before is None else tab.waiting[:before]
        for w in queue:
            if w.tid != tid and _overlap(w.key, key) and _conflict(mode, w.mode):
                out.append(w.tid)
        return out

    def request(self, tid: str, age: Age, table: str, key: str | None, mode: Mode) -> Answer:
        """Ask for a lock. "wait" queues the request (see `release`); "die" leaves no trace
        of this request (the transaction's earlier locks stay until it is released)."""
        tab = self._tables.setdefault(table, _Table())
        current = tab.held.get(key, {}).get(tid)
        if current in ("write", mode):
            return "granted"  # already held (a write covers a read)
        conflicts = self._conflicts(tab, tid, key, mode)
        if not conflicts:
            self._grant(tab, tid, age, table, key, mode)
            return "granted"
        if all(age < self._ages.get(other, age) for other in conflicts):
            self._ages[tid] = age
            self._by_tid.setdefault(tid, set())
            tab.waiting.append(_Waiter(tid, age, table, key, mode))
            return "wait"
        return "die"

    def _grant(  # noqa: PLR0917 - the lock's coordinates
        self, tab: _Table, tid: str, age: Age, table: str, key: str | None, mode: Mode
    ) -> None:
        held = tab.held.setdefault(key, {})
        if held.get(tid) != "write":
            held[tid] = mode
        self._ages[tid] = age
        self._by_tid.setdefault(tid, set()).add((table, key))

    def release(self, tid: str) -> list[Granted]:
        """Drop every lock and queued request of `tid`; return the requests granted now."""
        touched = self._by_tid.pop(tid, None)
        self._ages.pop(tid, None)
        if touched is None:
            return []
        tables = {table for table, _ in touched}
        for table, key in touched:
            tab = self._tables[table]
            held = tab.held.get(key)
            if held is not None:
                held.pop(tid, None)
                if not held:
                    del tab.held[key]
        for table, tab in self._tables.items():
            if any(w.tid == tid for w in tab.waiting):
                tab.waiting = [w for w in tab.waiting if w.tid != tid]
                tables.add(table)
        granted: list[Granted] = []
        for table in sorted(tables):
            granted += self._wake(table)
        for table in tables:
            left = self._tables.get(table)
            if left is not None and not left.held and not left.waiting:
                del self._tables[table]
        return granted

    def _wake(self, table: str) -> list[Granted]:
        tab = self._tables.get(table)
        if tab is None:
            return []
        granted: list[Granted] = []
        i = 0
        while i < len(tab.waiting):
            w = tab.waiting[i]
            if self._conflicts(tab, w.tid, w.key, w.mode, before=i):
                i += 1
                continue
            del tab.waiting[i]
            self._grant(tab, w.tid, w.age, w.table, w.key, w.mode)
            granted.append(Granted(w.tid, w.table, w.key, w.mode))
        return granted

    def drop_table(self, table: str) -> list[str]:
        """Forget a deleted table's locks; return the tids that held or waited for some."""
        tab = self._tables.pop(table, None)
        if tab is None:
            return []
        tids = {t for hs in tab.held.values() for t in hs} | {w.tid for w in tab.waiting}
        for tid in tids:
            res = self._by_tid.get(tid)
            if res is not None:
                res -= {r for r in res if r[0] == table}
        return sorted(tids)
