"""Loader: when and from where this node loads each table it holds a copy of, and unloads it.

Mnesia's rules, at start and whenever the picture changes:
- copy from a running replica that has the table loaded;
- otherwise a disc copy loads from local disc only if no other disc copy was active when
  this node last saw the table (the persisted `active` map, Mnesia's
  nodes-running-at-shutdown), or with force_load; else it waits, naming whom it waits for.
  If all of those are up and none has it loaded (they went down together), the one with the
  newest stamp loads first;
- a ram copy with no disc copy anywhere starts empty when no other replica is loading it;
- after autoheal, a table this node dropped loads only by copying from the winner's side.

A replica that is copying a table is active for writes (it gets every write, applied by
stamp) from the moment its source took the request; only loaded replicas serve reads.
"""

from __future__ import annotations

from typing import Any

from mnesia_like import records as rec
from mnesia_like import schema as sch
from mnesia_like.effects import DropTable, MnesiaEffect, ReplaceTable
from mnesia_like.state import NodeState, entry_pair_ok
from mnesia_like.waiters import Waiters
from mnesia_like.writes import Writes
from monitors.effects import CancelTimer, Log, SetTimer


class Loader:
    """Loading and unloading this node's tables (see the module docstring)."""

    def __init__(
        self,
        state: NodeState,
        writes: Writes,
        waiters: Waiters,
        *,
        force_load: bool,
        load_timeout: float,
    ) -> None:
        self.s = state
        self.writes = writes
        self.waiters = waiters
        self.force_load = force_load
        self.load_timeout = load_timeout
        self.startup_done = False
        self._loading: dict[str, tuple[str, int]] = {}  # table -> (source, rid)
        self._wait_logged: set[str] = set()
        # tables this node dropped to reload them from another side (autoheal): they load
        # only by copying from a running replica that has them, never from local disc (that
        # copy is the losing side's, and its content was consumed by the first load) or empty
        self._must_copy: set[str] = set()
        # per running peer, the newest stamp of each table it holds on disc but has not loaded
        # (its hello tells): who loads first when the disc copies went down together
        self._peer_disc_max: dict[str, dict[str, tuple[int, str]]] = {}

    # ---- what the peers tell

    def peer_disc(self, peer: str, disc_max: dict[str, tuple[int, str]]) -> None:
        self._peer_disc_max[peer] = disc_max

    def peer_gone(self, node: str) -> list[MnesiaEffect]:
        """`node`'s mnesia left ours: a copy from it is lost (tried again elsewhere by the
        next try_loads)."""
        self._peer_disc_max.pop(node, None)
        out: list[MnesiaEffect] = []
        for table, (src, _rid) in list(self._loading.items()):
            if src == node:
                self._loading.pop(table)
                self.s.store.pop(table, None)
                out.append(Log.warning("table copy lost its source", table=table, source=node))
        return out

    # ---- deciding

    def startup_over(self) -> list[MnesiaEffect]:
        if self.startup_done:
            return []
        self.startup_done = True
        return [CancelTimer("startup"), *self.try_loads()]

    def _wait_set(self, table: str) -> set[str]:
        d = self.s.tables[table]
        return set(self.s.saved_active.get(table, [])) & set(d["disc"]) - {self.s.node}

    def try_loads(self) -> list[MnesiaEffect]:
        out: list[MnesiaEffect] = []
        for table, d in sorted(self.s.tables.items()):
            if self.s.node in sch.copies(d) and table not in self.s.store:
                out += self.try_load(table)
        return out

    def try_load(self, table: str) -> list[MnesiaEffect]:
        s = self.s
        d = s.tables.get(table)
        if d is None or table in s.store or s.node not in sch.copies(d):
            return []
        if s.heal_side and not s.running:
            return []  # reloading: only from the winner's side
        sources = [n for n in s.read_sources(table) if n != s.node]
        if sources:
            return self._start_copy(table, sources[0])
        if not self.startup_done or s.heal_side:
            return []
        others = sch.copies(d) - {s.node}
        if table in self._must_copy and not (
            others <= s.running
            and all(
                table not in s.peer_loaded.get(n, ()) and table not in s.peer_loading.get(n, ())
                for n in others
            )
        ):
            # reloading after autoheal: wait for a replica of the winning side to have it;
            # only if every replica is back and none has it (each of them reloading, in a
            # cascade of heals) do the rules below pick one to load from its disc
            return self._waiting(table, sorted(others - s.running) or sorted(others))
        if self.force_load:
            return self._load_local(table, "force_load")
        if s.node in d["disc"]:
            wait = self._wait_set(table)
            if not wait:
                return self._load_local(table, "we were the last active disc copy")
            if all(
                n in s.running
                and table not in s.peer_loaded.get(n, ())
                and table not in s.peer_loading.get(n, ())
                for n in wait
            ):
                return self._maybe_first(table, d)
            return self._waiting(table, sorted(wait - s.running))
        # a ram copy
        if not d["disc"]:
            others = sch.copies(d) - {s.node}
            if not (others & s.running) or all(
                table not in s.peer_loading.get(n, ()) for n in others & s.running
            ):
                return self._load_empty(table)
            return []
        return self._waiting(table, sorted(set(d["disc"]) - s.running) or sorted(d["disc"]))

    def _maybe_first(self, table: str, d: dict[str, Any]) -> list[MnesiaEffect]:
        """Every disc copy we wait for is up and none has the table: they went down together.
        The copy with the newest stamp loads from its disc; the others copy from it."""
        s = self.s
        mine = max((rec.stamp_of(e) for e in s.disc_data.get(table, {}).values()), default=(0, ""))
        best = (mine, s.node)
        for n in s.running:
            if n in d["disc"] and table in self._peer_disc_max.get(n, {}):
                cand = (self._peer_disc_max[n][table], n)
                best = max(best, cand)
        if best[1] == s.node:
            return self._load_local(table, "the copies went down together; ours is newest")
        return self._waiting(table, [best[1]])

    def _waiting(self, table: str, nodes: list[str]) -> list[MnesiaEffect]:
        if table in self._wait_logged:
            return []
        self._wait_logged.add(table)
        return [
            Log.warning(
                "waiting for a node to load the table from (it was active when we stopped); "
                "force_load overrides",
                table=table,
                waiting_for=nodes,
            ),
            SetTimer(f"load_wait:{table}", self.load_timeout),
        ]

    def load_wait_timeout(self, table: str) -> list[MnesiaEffect]:
        if table not in self.s.tables or table in self.s.loaded or table in self._loading:
            return []
        return [
            Log.error(
                "table still not loaded; the nodes it waits for are not back. Start them, or "
                "set force_load to load this node's copy (newer writes elsewhere would be lost)",
                table=table,
                why=self.why_not_loaded(table),
                waited=self.load_timeout,
            ),
            self.s.event("load_timeout", self.s.node, table),
        ]

    def why_not_loaded(self, table: str) -> str:
        s = self.s
        d = s.tables.get(table)
        if d is None:
            return f"{table}: deleted"
        if table in self._loading:
            return f"{table}: copying from {self._loading[table][0]}"
        if s.node in d["disc"]:
            wait = self._wait_set(table) - s.running
            if wait:
                return f"{table}: waiting for {sorted(wait)} (they were active when we stopped)"
        down = sorted(sch.copies(d) - s.running_all())
        return f"{table}: no active replica (copies down: {down})"

    # ---- loading

    def _load_local(self, table: str, why: str) -> list[MnesiaEffect]:
        self.writes.open(table, self.s.disc_data.pop(table, {}))
        return self.loaded(table, f"from local disc: {why}")

    def _load_empty(self, table: str) -> list[MnesiaEffect]:
        self.writes.open_empty(table)
        return self.loaded(table, "empty: no other replica is active")

    def loaded(self, table: str, how: str) -> list[MnesiaEffect]:
        """`table`'s content in `store` is complete: it serves reads from now on."""
        s = self.s
        s.loaded.add(table)
        self._must_copy.discard(table)
        self.writes.index(table)
        self._wait_logged.discard(table)
        out: list[MnesiaEffect] = [
            CancelTimer(f"load_wait:{table}"),
            Log.info("table loaded", table=table, how=how),
            s.event("table_loaded", s.node, table),
        ]
        for n in sorted(s.running):
            out.append(s.send(n, "loaded", tables=[table]))
        return out + self.waiters.check() + s.persist()

    def _start_copy(self, table: str, source: str) -> list[MnesiaEffect]:
        s = self.s
        rid = s.next_rid()
        self._loading[table] = (source, rid)
        self.writes.open_empty(table)  # our stale copy is replaced; writes from now on apply
        out: list[MnesiaEffect] = [Log.info("copying table", table=table, source=source)]
        for n in sorted(s.running):
            out.append(s.send(n, "loading", tables=[table]))
        out.append(s.send(source, "copy_req", table=table, rid=rid))
        return out

    def on_copy_req(self, sender: str, m: dict[str, Any], now: float) -> list[MnesiaEffect]:
        s = self.s
        table, rid = m["table"], m["rid"]
        if table not in s.loaded or sender not in s.running:
            return [s.send(sender, "copy_nak", table=table, rid=rid)]
        # from this instant the requester is active for writes here: what we apply after the
        # snapshot is forwarded to it (apply-by-stamp makes the order irrelevant)
        s.peer_loading.setdefault(sender, set()).add(table)
        out: list[MnesiaEffect] = []
        for chunk, last in self.writes.chunks(s.store[table]):
            out.append(s.send(sender, "copy_chunk", table=table, rid=rid, entries=chunk, last=last))
        return out + s.persist()

    def on_copy_chunk(self, sender: str, m: dict[str, Any], now: float) -> list[MnesiaEffect]:
        s = self.s
        table = m["table"]
        if self._loading.get(table) != (sender, m["rid"]):
            return []
        entries = [e for e in m["entries"] if entry_pair_ok(e)]
        content = s.store[table]
        for kj, entry in entries:
            if rec.newer(entry, content.get(kj)):
                content[kj] = entry
        if not m["last"]:
            return []
        del self._loading[table]
        s.disc_data.pop(table, None)
        self.writes.count_tombs(table)
        out: list[MnesiaEffect] = []
        if s.is_disc(table):
            out.append(ReplaceTable(table, s.next_disc_tid(table), dict(content)))
        return out + self.loaded(table, f"copied from {sender}")

    def on_copy_nak(self, sender: str, m: dict[str, Any], now: float) -> list[MnesiaEffect]:
        table = m["table"]
        if self._loading.get(table) != (sender, m["rid"]):
            return []
        del self._loading[table]
        self.s.store.pop(table, None)
        self.s.peer_loaded.get(sender, set()).discard(table)
        return self.try_load(table)

    # ---- unloading

    def unload(self, name: str, old: dict[str, Any] | None) -> list[MnesiaEffect]:
        """This node holds no copy of `name` any more (deleted, or its copy moved away)."""
        s = self.s
        s.store.pop(name, None)
        self.writes.unindex(name)
        s.loaded.discard(name)
        self._loading.pop(name, None)
        s.disc_data.pop(name, None)
        return [DropTable(name)] if old is not None and s.node in old["disc"] else []

    def unload_all(self) -> None:
        """Autoheal's loser drops every table to copy it back from the winner's side; what
        its disc holds stays as the last resort if no replica is left to copy from. What
        the peers told is forgotten: none of them runs with us any more."""
        s = self.s
        self._peer_disc_max.clear()
        self._must_copy |= {t for t, d in s.tables.items() if s.node in sch.copies(d)}
        for table in list(s.store):
            content = s.store.pop(table)
            if s.is_disc(table) and table in s.loaded:
                s.disc_data[table] = content
        s.loaded.clear()
        self.writes.unindex()
        self._loading.clear()
