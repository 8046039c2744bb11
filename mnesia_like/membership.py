"""Membership: which peers' mnesia runs with ours, the schema they share, and the monitor.

- `running` is the peers whose core exchanged a `hello` with ours on the current connection
  and whose schema merged with ours (Mnesia's running_db_nodes minus this node). A hello
  carries the schema, what the peer has loaded, and whether it saw us go down.
- The mnesia monitor: `marks` are the peers this node saw go down while both ran (persisted;
  only peers known to count us as running, `confirmed`). A reconnect where each side marked
  the other is `inconsistent_database`; what follows is the merge mode's (healing.py).
- Views can disagree after crossing messages (we count a peer as running, it does not count
  us): every check_interval each node tells its running peers what it has loaded (`check`),
  and a peer that does not count it running says so (`not_running`).
- Mnesia relies on someone to reconnect (RabbitMQ's node monitor pings down nodes every
  second): while a db node is not connected, it is tried again every reconnect_interval.
- `change_config("extra_db_nodes", ...)` joins this node to others, as Mnesia's does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mnesia_like import records as rec
from mnesia_like import schema as sch
from mnesia_like.dirty import DirtyOps
from mnesia_like.effects import MnesiaEffect, Reply
from mnesia_like.errors import BadArgument, SchemaConflict
from mnesia_like.loading import Loader
from mnesia_like.messages import str_list
from mnesia_like.schema_changes import SchemaChanges
from mnesia_like.state import NodeState
from mnesia_like.waiters import Waiters
from mnesia_like.writes import Writes
from monitors.effects import CancelTimer, Connect, Log, Send, SetTimer

# What a node sends only to the peers it counts as running: from a running peer, each tells
# that it counts us as running too (`confirmed`).
TO_RUNNING = frozenset({"up", "check", "loaded", "loading"})

# what membership hands on when a reconnect finds each side marked the other:
# (peer, its incarnation, our side as it judges us, its side, its hello) -> effects
Inconsistent = Callable[[str, int, list[str], list[str], dict[str, Any]], list[MnesiaEffect]]


class Membership:
    """Hellos, running peers, the schema merge and the mnesia monitor (see the module
    docstring). `on_inconsistent` decides what an inconsistent_database leads to."""

    def __init__(  # noqa: PLR0917 - the parts it drives
        self,
        state: NodeState,
        writes: Writes,
        loader: Loader,
        waiters: Waiters,
        schema: SchemaChanges,
        dirty: DirtyOps,
        on_inconsistent: Inconsistent,
        *,
        merge: str,
        reconnect_interval: float | None,
        check_interval: float,
        config_timeout: float,
    ) -> None:
        self.s = state
        self.writes = writes
        self.loader = loader
        self.waiters = waiters
        self.schema = schema
        self.dirty = dirty
        self.on_inconsistent = on_inconsistent
        self.merge = merge
        # None: leave reconnecting to the node monitor
        self.reconnect_interval = reconnect_interval
        self.check_interval = check_interval
        self.config_timeout = config_timeout
        self._pinging = False
        # running peers known to count us as running too: a reply hello, a hello listing us
        # or a TO_RUNNING message came from them since they joined `running`. Only their
        # loss is a down mark: a peer whose hello we took but which went before it took ours
        # never ran with us (the liveness race, docs/mnesia_like.md)
        self.confirmed: set[str] = set()
        self._peer_inc: dict[str, int] = {}
        self._hello_sent: dict[str, list[str]] = {}
        self._config_reqs: dict[int, dict[str, Any]] = {}

    def nodeup(self, node: str) -> list[MnesiaEffect]:
        s = self.s
        s.connected.add(node)
        if node in s.db_nodes or node in s.extra_db_nodes or self.wanted(node):
            return [self.hello(node, reply=False)]
        return []

    def nodedown(self, node: str) -> None:
        self.s.connected.discard(node)
        self._hello_sent.pop(node, None)

    def forget_hellos(self) -> None:
        """Every hello is to be sent anew (this node leaves its side: autoheal)."""
        self.confirmed.clear()
        self._hello_sent.clear()

    def note(self, sender: str, msg: dict[str, Any]) -> None:
        """After a message was handled: does it tell that `sender` counts us as running?"""
        if sender in self.s.running and (
            msg["t"] in TO_RUNNING
            or (msg["t"] == "hello" and (msg["reply"] or self.s.node in msg["running"]))
        ):
            # it took our hello (its reply), or sent this as one of its running peers
            self.confirmed.add(sender)

    def check_tick(self) -> list[MnesiaEffect]:
        """Every check_interval: tell the running peers what we have loaded (and the
        digests anti-entropy compares)."""
        s = self.s
        loaded = sorted(s.loaded)
        loading = sorted(t for t in s.store if t not in s.loaded)
        sums = {t: self.writes.sums[t] for t in loaded if t in self.writes.sums}
        return [
            *(
                s.send(n, "check", loaded=loaded, loading=loading, sums=sums)
                for n in sorted(s.running)
            ),
            SetTimer("check", self.check_interval),
        ]

    def on_up(self, sender: str, m: dict[str, Any], now: float) -> list[MnesiaEffect]:
        """The peer took us in as running (`note` records it in `confirmed`). Not
        answered with `not_running` when we do not count it: its hello follows or is there."""
        return []

    def wanted(self, node: str) -> bool:
        return any(node in c["nodes"] for c in self._config_reqs.values())

    def arm_ping(self) -> list[MnesiaEffect]:
        if self.reconnect_interval is None or self._pinging:
            return []
        if not (self.s.db_nodes | self.s.extra_db_nodes) - {self.s.node} - self.s.connected:
            return []
        self._pinging = True
        return [SetTimer("ping", self.reconnect_interval)]

    def ping(self) -> list[MnesiaEffect]:
        """Every reconnect_interval while a db node is not connected: try it again."""
        self._pinging = False
        down = sorted((self.s.db_nodes | self.s.extra_db_nodes) - {self.s.node} - self.s.connected)
        return [*(Connect(n) for n in down), *self.arm_ping()]

    def peer_gone(self, node: str, why: str) -> list[MnesiaEffect]:
        """`node`'s mnesia is no longer connected to ours (nodedown, or it left)."""
        s = self.s
        out: list[MnesiaEffect] = []
        was_running = node in s.running
        confirmed = node in self.confirmed
        s.running.discard(node)
        self.confirmed.discard(node)
        s.peer_loaded.pop(node, None)
        s.peer_loading.pop(node, None)
        if was_running:
            if confirmed:
                s.marks.add(node)
            out += [
                Log.warning("mnesia down", node=node, why=why),
                s.event("mnesia_down", node),
            ]
        out += self.loader.peer_gone(node)
        out += self.dirty.peer_gone(node)
        out += self.loader.try_loads()
        return out

    def change_config(self, req: int, key: str, value: Any) -> list[MnesiaEffect]:
        if key != "extra_db_nodes":
            raise BadArgument(f"change_config: only 'extra_db_nodes' can change, not {key!r}")
        nodes = str_list(list(value)) if isinstance(value, list | tuple) else None
        if nodes is None or not all("@" in n for n in nodes):
            raise BadArgument("change_config('extra_db_nodes', ...) takes a list of node names")
        nodes = sorted(set(nodes) - {self.s.node})
        self.s.extra_db_nodes |= set(nodes)
        pending = {n for n in nodes if n not in self.s.running}
        # a node we stay split from is forced back in: Mnesia's way out of a partition
        for n in pending:
            self.s.inconsistent.pop(n, None)
        self._config_reqs[req] = {"nodes": set(pending), "conflicts": set()}
        out: list[MnesiaEffect] = []
        for n in sorted(pending):
            if n in self.s.connected:
                out.append(self.hello(n, reply=False))
            else:
                out.append(Connect(n))
        if not pending:
            return out + self.config_done(req)
        return [*out, SetTimer(f"config:{req}", self.config_timeout)]

    def _config_progress(self) -> list[MnesiaEffect]:
        out: list[MnesiaEffect] = []
        for req, c in list(self._config_reqs.items()):
            c["nodes"] -= self.s.running
            if not (c["nodes"] - c["conflicts"]):
                out += self.config_done(req)
        return out

    def config_done(self, req: int, timed_out: bool = False) -> list[MnesiaEffect]:
        c = self._config_reqs.pop(req, None)
        if c is None:
            return []
        out: list[MnesiaEffect] = [CancelTimer(f"config:{req}")]
        if c["conflicts"]:
            conflict = c["conflicts_detail"]
            return [*out, Reply(req, error=SchemaConflict(conflict[0], conflict[1]))]
        return [*out, Reply(req, sorted(self.s.running & self.s.extra_db_nodes))]

    def hello(self, peer: str, reply: bool, mark: bool | None = None) -> Send:
        running = sorted(self.s.running_all())
        if peer in self.s.heal_side:
            self.s.inconsistent.pop(peer, None)  # we join its side: its answer is welcome
        if not reply:
            self._hello_sent[peer] = running
        disc_max = {}
        for t, entries in self.s.disc_data.items():
            if t not in self.s.store and t in self.s.tables:
                disc_max[t] = max(
                    (list(rec.stamp_of(e)) for e in entries.values()), default=[0, ""]
                )
        return self.s.send(
            peer,
            "hello",
            reply=reply,
            inc=self.s.incarnation,
            db_nodes=sorted(self.s.db_nodes),
            tables=self.s.tables,
            running=running,
            loaded=sorted(self.s.loaded),
            loading=sorted(t for t in self.s.store if t not in self.s.loaded),
            mark=peer in self.s.marks if mark is None else mark,
            starting=not self.loader.startup_done,
            heal=peer in self.s.heal_side,
            disc_max=disc_max,
        )

    def on_hello(self, sender: str, m: dict[str, Any], now: float) -> list[MnesiaEffect]:
        if sender == self.s.node:
            return []
        self.s.connected.add(sender)
        out: list[MnesiaEffect] = []
        db_nodes = str_list(m["db_nodes"])
        running = str_list(m["running"])
        if db_nodes is None or running is None:
            return [Log.warning("bad hello dropped", node=sender)]
        my_mark = sender in self.s.marks
        # the running list the peer judges us by: our earlier hello on this connection, if any
        my_side = self._hello_sent.get(sender) or sorted(self.s.running_all())
        reply = None if m["reply"] else self.hello(sender, reply=True, mark=my_mark)
        # ---- schema
        merged, changed, conflicts = sch.merge_tables(self.s.tables, m["tables"])
        if conflicts:
            for c in self._config_reqs.values():
                if sender in c["nodes"]:
                    c["conflicts"].add(sender)
                    c["conflicts_detail"] = (sender, conflicts)
            out += [
                Log.error(
                    "schema conflict: not merging with this node",
                    node=sender,
                    tables=conflicts,
                ),
                self.s.event("schema_conflict", sender, conflicts),
            ]
            if reply is not None:
                out.append(reply)
            return out + self._config_progress()
        # ---- the mnesia monitor: did each side see the other go down?
        inc = m["inc"]
        if m["heal"] or sender in self.s.heal_side:
            # it joins us after reloading, or we join it: whatever either side saw is over
            self.s.marks.discard(sender)
            self.s.inconsistent.pop(sender, None)
        elif my_mark and m["mark"]:
            self.s.marks.discard(sender)
            kind = (
                "starting_partitioned_network"
                if m["starting"] or not self.loader.startup_done
                else "running_partitioned_network"
            )
            out += [
                Log.warning(
                    "inconsistent database: we and the node each saw the other down",
                    node=sender,
                    kind=kind,
                ),
                self.s.event("inconsistent_database", sender, kind),
            ]
            if reply is not None:
                out.append(reply)
                reply = None
            out += self.s.persist()
            return out + self.on_inconsistent(sender, inc, my_side, running, m)
        else:
            self.s.marks.discard(sender)
            if self.s.inconsistent.get(sender, inc) == inc and sender in self.s.inconsistent:
                # still the split incarnation: stay apart until someone heals. The peer
                # must learn that we stay apart, or it counts us as running while we do not
                # count it, and the two views never meet (check -> not_running -> hello, in
                # a loop). Under autoheal we are the winner: ask it again to reload (our
                # first heal_req can have been lost with the connection it went on); under
                # none, answer with our mark so that it finds us inconsistent too.
                if self.merge == "autoheal":
                    if reply is not None:
                        out.append(reply)
                    out.append(self.s.send(sender, "heal_req"))
                elif not m["reply"]:
                    out.append(self.hello(sender, reply=True, mark=True))
                return out + self.s.persist()
            self.s.inconsistent.pop(sender, None)
        if reply is not None:
            out.append(reply)
        out += self.merge_schema(db_nodes, merged, changed, sender)
        out += self.peer_up(sender, m)
        return out

    def merge_schema(
        self, db_nodes: list[str], merged: dict[str, Any], changed: list[str], sender: str
    ) -> list[MnesiaEffect]:
        out: list[MnesiaEffect] = []
        learnt = {*db_nodes, sender} - self.s.db_nodes
        self.s.db_nodes |= learnt
        for n in sorted(learnt - self.s.running - {self.s.node, sender}):
            # the schema's other nodes: connect to them too, as Mnesia does after a merge
            out.append(self.hello(n, reply=False) if n in self.s.connected else Connect(n))
        for name in changed:
            entry = {"r": merged[name], "s": [0, ""]}
            out += self.schema.apply(name, entry)
        return out

    def peer_up(self, sender: str, m: dict[str, Any]) -> list[MnesiaEffect]:
        out: list[MnesiaEffect] = []
        new = sender not in self.s.running
        self.s.running.add(sender)
        self._peer_inc[sender] = m["inc"]
        self.s.peer_tables(sender, m)
        dm = {}
        for t, stamp in (m.get("disc_max") or {}).items():
            if isinstance(stamp, list) and len(stamp) == 2 and isinstance(stamp[0], int):
                dm[t] = (stamp[0], str(stamp[1]))
        self.loader.peer_disc(sender, dm)
        if new:
            out += [Log.info("mnesia up", node=sender), self.s.event("mnesia_up", sender)]
            # tell it that we count it as running: its hello to us may have gone before our
            # store was there, and then nothing else would until our first check
            out.append(self.s.send(sender, "up"))
        if sender in self.s.heal_side:
            self.s.heal_side.discard(sender)
            # join the rest of the winner's side, and let our old side find us inconsistent
            for n in sorted(self.s.connected - self.s.running - {sender}):
                if n in (str_list(m["running"]) or []):
                    self.s.heal_side.add(n)
                    out.append(self.hello(n, reply=False))
            for n in sorted(self.s.connected - self.s.running - self.s.heal_side - {sender}):
                if n in self.s.db_nodes:
                    out.append(self.hello(n, reply=False))
        if not self.loader.startup_done and self.s.db_nodes - {self.s.node} <= self.s.running:
            out += self.loader.startup_over()
        out += self.loader.try_loads()
        out += self.waiters.check()
        out += self._config_progress()
        out += self.s.persist()
        return out

    def on_loaded(self, sender: str, m: dict[str, Any], now: float) -> list[MnesiaEffect]:
        tables = set(str_list(m["tables"]) or [])
        self.s.peer_loaded.setdefault(sender, set()).update(tables)
        self.s.peer_loading.setdefault(sender, set()).difference_update(tables)
        return self.loader.try_loads() + self.waiters.check() + self.s.persist()

    def on_loading(self, sender: str, m: dict[str, Any], now: float) -> list[MnesiaEffect]:
        self.s.peer_loading.setdefault(sender, set()).update(str_list(m["tables"]) or [])
        return self.s.persist()

    def on_unloaded(self, sender: str, m: dict[str, Any], now: float) -> list[MnesiaEffect]:
        tables = set(str_list(m["tables"]) or [])
        self.s.peer_loaded.get(sender, set()).difference_update(tables)
        self.s.peer_loading.get(sender, set()).difference_update(tables)
        return self.s.persist()
