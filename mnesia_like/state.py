"""NodeState: what every part of MnesiaCore reads, and the queries over it.

MnesiaCore is a facade over collaborating parts (core.py has the map). The parts share one
picture of this node's store: the schema, who runs with us, which replica has which table
loaded, the contents of the tables this node holds, and the Lamport clock. That picture lives
here, in one object, and every part gets it; each part keeps its own protocol state (a
transaction, a table copy in flight, a pending config change) to itself.

The derived views (`write_view`, `read_sources`) and the persisted schema state (`persist`)
are here too, because they are functions of this shared picture alone.
"""

from __future__ import annotations

import json
from typing import Any

from mnesia_like import records as rec
from mnesia_like import schema as sch
from mnesia_like.effects import MnesiaEffect, MnesiaEvent, PersistSchema
from mnesia_like.messages import VERSION, str_list
from mnesia_like.tx import Bounded
from monitors.effects import Send

NAME = "mnesia"  # the registered name of the core on every node
encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def entry_pair_ok(pair: Any) -> bool:
    """A `[key_json, entry]` pair of a copy, merge, sync or dirty message is well formed."""
    return (
        isinstance(pair, list)
        and len(pair) == 2
        and isinstance(pair[0], str)
        and rec.entry_ok(pair[1])
    )


class NodeState:
    """The shared picture of one node's store (see the module docstring)."""

    def __init__(
        self,
        node: str,
        incarnation: int,
        *,
        saved: dict[str, Any],
        disc: dict[str, dict[str, Any]],
        disc_tids: dict[str, int],
        extra_db_nodes: set[str],
    ) -> None:
        self.node = node
        self.incarnation = incarnation
        self.extra_db_nodes = extra_db_nodes
        self.db_nodes: set[str] = {node, *(str_list(saved.get("db_nodes")) or [])}
        self.tables: dict[str, dict[str, Any]] = {
            n: d for n, d in (saved.get("tables") or {}).items() if sch.def_ok(d)
        }
        # per table, the disc copies that were active when this node last saw it (Mnesia's
        # nodes-running-at-shutdown): the loading rules read it at start
        self.saved_active: dict[str, list[str]] = {
            t: ns for t, ns in (saved.get("active") or {}).items() if str_list(ns) is not None
        }
        # the peers this node saw go down while both ran (the mnesia monitor, persisted)
        self.marks: set[str] = set(str_list(saved.get("marks")) or [])
        self.clock: int = int(saved.get("clock") or 0)
        # disc copies read by the shell at start; a table moves to `store` when it loads
        self.disc_data: dict[str, dict[str, Any]] = {
            t: dict(entries) for t, entries in disc.items()
        }
        self._disc_tid: dict[str, int] = dict(disc_tids)
        for entries in self.disc_data.values():
            for e in entries.values():
                if rec.entry_ok(e) and e["s"][0] > self.clock:
                    self.clock = e["s"][0]
        self.store: dict[str, dict[str, Any]] = {}  # loaded or loading tables
        # tid -> the stamp a committed transaction was given at its decision (for late
        # outcome questions: an in-doubt participant applies the commit with it)
        self.stamps: Bounded = Bounded()
        self.loaded: set[str] = set()
        self.connected: set[str] = set()  # dist connections (nodeup/nodedown)
        self.running: set[str] = set()  # peers whose mnesia is connected to ours
        self.peer_loaded: dict[str, set[str]] = {}
        self.peer_loading: dict[str, set[str]] = {}
        self.inconsistent: dict[str, int] = {}  # peer -> incarnation not merged with (split)
        self.heal_side: set[str] = set()  # autoheal: nodes to join with a heal hello
        self.now = 0.0
        self._rid = 0
        self._persisted: Any = None

    # ---- queries

    def running_all(self) -> set[str]:
        return self.running | {self.node}

    def write_view(self, table: str) -> set[str]:
        """Replicas of `table` that take writes: loaded or loading, and running."""
        d = self.tables.get(table)
        if d is None:
            return set()
        nodes = sch.copies(d)
        out = {self.node} if table in self.store and self.node in nodes else set()
        for n in self.running:
            if n in nodes and (
                table in self.peer_loaded.get(n, ()) or table in self.peer_loading.get(n, ())
            ):
                out.add(n)
        return out

    def read_sources(self, table: str) -> list[str]:
        """Replicas that serve reads of `table`, this node first."""
        out = [self.node] if table in self.loaded else []
        d = self.tables.get(table)
        if d is None:
            return out
        nodes = sch.copies(d)
        out += sorted(
            n for n in self.running if n in nodes and table in self.peer_loaded.get(n, ())
        )
        return out

    def active_map(self) -> dict[str, list[str]]:
        return {t: sorted(self.write_view(t)) for t in sorted(self.tables)}

    def is_disc(self, table: str) -> bool:
        d = self.tables.get(table)
        return d is not None and self.node in d["disc"]

    def size(self, table: str) -> int | None:
        if table not in self.loaded:
            return None
        return sum(1 for e in self.store[table].values() if e["r"] is not None)

    def records(self, table: str) -> dict[str, Any]:
        """Live records of a loaded table by key_json (tests and the simulator)."""
        return {k: e["r"] for k, e in self.store.get(table, {}).items() if e["r"] is not None}

    # ---- changes every part makes

    def next_disc_tid(self, table: str) -> int:
        tid = self._disc_tid.get(table, 0) + 1
        self._disc_tid[table] = tid
        return tid

    def next_rid(self) -> int:
        """A request id for a table copy or a remote read (one sequence for both)."""
        self._rid += 1
        return self._rid

    def peer_tables(self, peer: str, m: dict[str, Any]) -> None:
        """Take `peer`'s loaded and loading tables from its hello or check: both messages
        carry the whole lists, so they replace what we knew (a shrunk list is news too)."""
        self.peer_loaded[peer] = set(str_list(m["loaded"]) or [])
        self.peer_loading[peer] = set(str_list(m["loading"]) or [])

    def learn_active(self, active: Any) -> None:
        """A no vote told us of replicas we did not know were active: write to them too."""
        if not isinstance(active, dict):
            return
        for table, nodes in active.items():
            for n in str_list(nodes) or []:
                if (
                    n in self.running
                    and table in self.tables
                    and table not in self.peer_loaded.get(n, ())
                ):
                    self.peer_loading.setdefault(n, set()).add(table)

    # ---- effects

    def send(self, node: str, t: str, **fields: Any) -> Send:
        """A mnesia message of type `t` to the core on `node`, stamped with our clock."""
        return Send(node, NAME, {"v": VERSION, "t": t, "l": self.clock, **fields})

    def event(self, kind: str, node: str, detail: Any = None) -> MnesiaEvent:
        return MnesiaEvent(kind, node, detail)

    def persist(self) -> list[MnesiaEffect]:
        """PersistSchema when the persisted part of the picture changed since the last."""
        active = {}
        for t, d in self.tables.items():
            if t in self.loaded:
                active[t] = sorted(self.write_view(t) & set(d["disc"]))
            elif t in self.saved_active:
                active[t] = self.saved_active[t]
        state = {
            "db_nodes": sorted(self.db_nodes),
            "tables": self.tables,
            "active": active,
            "marks": sorted(self.marks),
        }
        key = encode(state)
        if key == self._persisted:
            return []
        self._persisted = key
        self.saved_active.update(active)
        return [PersistSchema({**json.loads(key), "clock": self.clock})]

    def forget_persisted(self) -> None:
        """The next `persist` writes even if nothing changed (a clean stop)."""
        self._persisted = None
