"""SchemaChanges: a committed schema change (create, delete, copies changed), applied here.

Schema changes reach a node two ways: as the one operation of a schema transaction
(the participant applies it at commit), and as the newer table definition a peer's hello
brings (membership merges the two schemas). Both end here.
"""

from __future__ import annotations

from typing import Any

from mnesia_like import schema as sch
from mnesia_like.effects import DropTable, MnesiaEffect, ReplaceTable
from mnesia_like.loading import Loader
from mnesia_like.state import NodeState
from mnesia_like.waiters import Waiters
from mnesia_like.writes import Writes
from monitors.effects import Log


class SchemaChanges:
    """Applies table definitions to this node's picture (see the module docstring)."""

    def __init__(self, state: NodeState, writes: Writes, loader: Loader, waiters: Waiters) -> None:
        self.s = state
        self.writes = writes
        self.loader = loader
        self.waiters = waiters

    def apply(self, name: str, entry: Any) -> list[MnesiaEffect]:
        """Apply the schema entry of table `name` (its record None: the table is deleted)."""
        s = self.s
        new = entry["r"] if isinstance(entry, dict) else None
        old = s.tables.get(name)
        out: list[MnesiaEffect] = []
        if new is None:
            if old is None:
                return []
            del s.tables[name]
            s.saved_active.pop(name, None)
            out += self.loader.unload(name, old)
            out += [Log.info("table deleted", table=name)]
            for peer in s.peer_loaded.values():
                peer.discard(name)
            for peer in s.peer_loading.values():
                peer.discard(name)
            return out + self.waiters.check() + s.persist()
        s.tables[name] = new
        for n in sch.copies(new) - {s.node}:
            if old is None and n in s.running:
                s.peer_loaded.setdefault(n, set()).add(name)  # created loaded everywhere
        for n in list(s.peer_loaded):
            if n not in sch.copies(new):
                s.peer_loaded[n].discard(name)
                s.peer_loading.get(n, set()).discard(name)
        was = sch.storage(old, s.node) if old else None
        now_ = sch.storage(new, s.node)
        if now_ and not was:
            if old is None:
                self.writes.open_empty(name)
                self.writes.index(name)
                s.loaded.add(name)
                if now_ == "disc_copies":
                    s.disc_data.pop(name, None)
                    out.append(ReplaceTable(name, s.next_disc_tid(name), {}))
                out += [
                    Log.info("table created", table=name),
                    s.event("table_loaded", s.node, name),
                ]
            else:
                out += self.loader.try_load(name)
        elif was and not now_:
            out += self.loader.unload(name, old)
        elif was != now_ and name in s.loaded:
            if now_ == "disc_copies":
                out.append(ReplaceTable(name, s.next_disc_tid(name), dict(s.store[name])))
            else:
                out.append(DropTable(name))
        return out + self.waiters.check() + s.persist()
