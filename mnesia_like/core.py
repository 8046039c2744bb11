"""MnesiaCore: one node's replicated store (Mnesia) as a pure core.

Fed events with the current time (`start`, `nodeup`, `nodedown`, `receive`, `timer`, and the
local API's `request(req_id, op, args, now)`), it returns effects: the common ones
(monitors/effects.py) and its own (mnesia_like/effects.py): `Reply` to an API request,
`DiscCommit` / `ReplaceTable` / `DropTable` for disc copies, `PersistSchema`, `MnesiaEvent`.
It is registered under `MnesiaCore.NAME` on every node. Transactions are in tx.py.

Decisions worth knowing before reading the code (docs/mnesia_like.md has the rest):
- `running` is the peers whose core exchanged a `hello` with ours on the current connection
  and whose schema merged with ours (Mnesia's running_db_nodes minus this node).
- A replica is *active* for writes when it has the table loaded or is loading it (a loading
  replica gets every write, applied by stamp); only loaded replicas serve reads.
- Every write carries a stamp (Lamport, node) and a replica keeps the newest entry per key.
  That makes copies, forwards and the lww merge order-independent. A node that applies a
  write forwards it to active replicas the writer did not know of (a table being copied).
- Loading at start (Mnesia's rules): copy from a running replica that has the table loaded;
  otherwise a disc copy loads from local disc only if no other disc copy was active when this
  node last saw the table (the persisted `active` map, Mnesia's nodes-running-at-shutdown),
  or with force_load; else it waits, naming whom it waits for. If all of those are up and
  none has it loaded (they went down together), the one with the newest stamp loads first.
- The mnesia monitor: `marks` are the peers this node saw go down while both ran (persisted;
  only peers known to count us as running, `_confirmed`). A reconnect where each side marked
  the other is `inconsistent_database`.
  Then `merge` decides: none (stay split, as Mnesia), autoheal (the losing side reloads
  from the winner), lww (exchange contents and keep the newest entry per key).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from mnesia_like import records as rec
from mnesia_like import schema as sch
from mnesia_like.effects import (
    DiscCommit,
    DropTable,
    MnesiaEvent,
    PersistSchema,
    ReplaceTable,
    Reply,
)
from mnesia_like.errors import (
    BadArgument,
    MnesiaError,
    NodeNotRunning,
    NoSuchTable,
    SchemaConflict,
    TableExists,
    TablesNotLoaded,
    UnknownNode,
)
from mnesia_like.messages import VERSION, problem, str_list
from mnesia_like.tx import TxMixin
from monitors.effects import CancelTimer, Connect, Effect, Log, Send, SetTimer

MERGE_MODES = ("none", "autoheal", "lww")
SYSTEM_INFO_KEYS = (
    "db_nodes",
    "extra_db_nodes",
    "running_db_nodes",
    "tables",
    "local_tables",
    "loaded_tables",
    "merge",
    "is_running",
    "inconsistent_nodes",
)
_encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def winner_side(a: list[str], b: list[str]) -> int:
    """Autoheal's rule without the node monitor: the larger side wins; on a tie, the side
    holding the lowest node name. Returns 0 if `a` wins, 1 if `b` does. Every node gets the
    same answer from the same two lists."""
    if len(set(a)) != len(set(b)):
        return 0 if len(set(a)) > len(set(b)) else 1
    return 0 if min(a) < min(b) else 1


class MnesiaCore(TxMixin):
    """One node's store. Every public method returns the effects to perform, in order."""

    NAME = "mnesia"

    def __init__(  # noqa: PLR0915 - one assignment per piece of state, documented in place
        self,
        node: str,
        incarnation: int,
        *,
        saved: dict[str, Any] | None = None,
        disc: dict[str, dict[str, Any]] | None = None,
        disc_tids: dict[str, int] | None = None,
        extra_db_nodes: list[str] | tuple[str, ...] = (),
        merge: str = "none",
        force_load: bool = False,
        startup_timeout: float = 2.0,
        load_timeout: float = 30.0,
        config_timeout: float = 5.0,
        outcome_retry: float = 1.0,
        outcome_timeout: float = 30.0,
        chunk_bytes: int = 256 * 1024,
        max_tombstones: int = 10000,
        reconnect_interval: float | None = 1.0,
        check_interval: float = 5.0,
        anti_entropy: bool = True,
    ) -> None:
        if merge not in MERGE_MODES:
            raise BadArgument(f"merge must be one of {MERGE_MODES}, not {merge!r}")
        self.node = node
        self.incarnation = incarnation
        self.merge = merge
        self.force_load = force_load
        self.startup_timeout = startup_timeout
        self.load_timeout = load_timeout
        self.config_timeout = config_timeout
        self.outcome_retry = outcome_retry
        self.outcome_timeout = outcome_timeout
        self.chunk_bytes = chunk_bytes
        self.max_tombstones = max_tombstones
        # Mnesia relies on someone to reconnect (RabbitMQ's node monitor pings down nodes every
        # second); without one a healed link stays unused. None: leave it to the node monitor.
        self.reconnect_interval = reconnect_interval
        # Views can disagree after crossing messages (we count a peer as running, it does not
        # count us): every check_interval each node tells its running peers what it has
        # loaded, and a peer that does not count it running says so (`not_running`).
        self.check_interval = check_interval
        self._pinging = False
        self.extra_db_nodes: set[str] = set(extra_db_nodes) - {node}
        saved = saved or {}
        self.db_nodes: set[str] = {node, *(str_list(saved.get("db_nodes")) or [])}
        self.tables: dict[str, dict[str, Any]] = {
            n: d for n, d in (saved.get("tables") or {}).items() if sch.def_ok(d)
        }
        self._saved_active: dict[str, list[str]] = {
            t: ns for t, ns in (saved.get("active") or {}).items() if str_list(ns) is not None
        }
        self.marks: set[str] = set(str_list(saved.get("marks")) or [])
        self.clock: int = int(saved.get("clock") or 0)
        # disc copies read by the shell at start; a table moves to `store` when it loads
        self._disc_data: dict[str, dict[str, Any]] = {
            t: dict(entries) for t, entries in (disc or {}).items()
        }
        self._disc_tid: dict[str, int] = dict(disc_tids or {})
        for entries in self._disc_data.values():
            for e in entries.values():
                if rec.entry_ok(e) and e["s"][0] > self.clock:
                    self.clock = e["s"][0]
        self.store: dict[str, dict[str, Any]] = {}  # loaded or loading tables
        self.loaded: set[str] = set()
        self.connected: set[str] = set()  # dist connections (nodeup/nodedown)
        self.running: set[str] = set()  # peers whose mnesia is connected to ours
        # running peers known to count us as running too: a reply hello, a hello listing us
        # or a `_TO_RUNNING` message came from them since they joined `running`. Only their
        # loss is a down mark: a peer whose hello we took but which went before it took ours
        # never ran with us (the liveness race, docs/mnesia_like.md)
        self._confirmed: set[str] = set()
        self.peer_loaded: dict[str, set[str]] = {}
        self.peer_loading: dict[str, set[str]] = {}
        self._peer_disc_max: dict[str, dict[str, tuple[int, str]]] = {}
        self._peer_inc: dict[str, int] = {}
        self._hello_sent: dict[str, list[str]] = {}
        self.inconsistent: dict[str, int] = {}  # peer -> incarnation not merged with (split)
        self._heal_side: set[str] = set()  # autoheal: nodes to join with a heal hello
        self._loading: dict[str, tuple[str, int]] = {}  # table -> (source, rid)
        self._rid = 0
        self._wait_logged: set[str] = set()
        self._startup_done = False
        self._started = False
        self._waiters: dict[int, list[str]] = {}  # wait_for_tables req -> tables
        self._config_reqs: dict[int, dict[str, Any]] = {}
        self._rreads: dict[int, tuple[int, str, str, str, Any]] = {}
        self._tombs: dict[str, int] = {}
        # anti-entropy: per loaded table, the digests of its buckets (records.table_sums),
        # kept up to date as entries apply; and per (peer, table) the digests compared at
        # the previous check, so that only a difference that outlived a check is repaired
        self._sums: dict[str, list[int]] = {}
        self._sync_seen: dict[tuple[str, str], tuple[list[int], list[int]]] = {}
        self._repairs = 0
        self.anti_entropy = anti_entropy  # off only in tests that need a bare protocol
        # tables this node dropped to reload them from another side (autoheal): they load
        # only by copying from a running replica that has them, never from local disc (that
        # copy is the losing side's, and its content was consumed by the first load) or empty
        self._must_copy: set[str] = set()
        self._merge_conflicts = 0
        self._persisted: Any = None
        self._now = 0.0
        self._tx_init()

    # ======================================================================= queries

    def _running_all(self) -> set[str]:
        return self.running | {self.node}

    def _write_view(self, table: str) -> set[str]:
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

    def _read_sources(self, table: str) -> list[str]:
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

    def _active_map(self) -> dict[str, list[str]]:
        return {t: sorted(self._write_view(t)) for t in sorted(self.tables)}

    def status(self) -> dict[str, Any]:
        """What the control API shows: running_db_nodes and per-table active copies."""
        tables = {}
        for name, d in sorted(self.tables.items()):
            tables[name] = {
                "all": sorted(sch.copies(d)),
                "active": sorted(set(self._read_sources(name))),
                "disc_copies": list(d["disc"]),
                "ram_copies": list(d["ram"]),
                "loaded_here": name in self.loaded,
                "size": self._size(name),
            }
        return {
            "node": self.node,
            "db_nodes": sorted(self.db_nodes),
            "running_db_nodes": sorted(self._running_all()),
            "extra_db_nodes": sorted(self.extra_db_nodes),
            "merge": self.merge,
            "inconsistent_nodes": sorted(self.inconsistent),
            "tables": tables,
        }

    def _size(self, table: str) -> int | None:
        if table not in self.loaded:
            return None
        return sum(1 for e in self.store[table].values() if e["r"] is not None)

    def records(self, table: str) -> dict[str, Any]:
        """Live records of a loaded table by key_json (tests and the simulator)."""
        return {k: e["r"] for k, e in self.store.get(table, {}).items() if e["r"] is not None}

    # ======================================================================= helpers

    def _send(self, node: str, t: str, **fields: Any) -> Send:
        return Send(node, self.NAME, {"v": VERSION, "t": t, "l": self.clock, **fields})

    def _event(self, kind: str, node: str, detail: Any = None) -> MnesiaEvent:
        return MnesiaEvent(kind, node, detail)

    def _persist(self) -> list[Effect]:
        active = {}
        for t, d in self.tables.items():
            if t in self.loaded:
                active[t] = sorted(self._write_view(t) & set(d["disc"]))
            elif t in self._saved_active:
                active[t] = self._saved_active[t]
        state = {
            "db_nodes": sorted(self.db_nodes),
            "tables": self.tables,
            "active": active,
            "marks": sorted(self.marks),
        }
        key = _encode(state)
        if key == self._persisted:
            return []
        self._persisted = key
        self._saved_active.update(active)
        return [PersistSchema({**json.loads(key), "clock": self.clock})]

    def _is_disc(self, table: str) -> bool:
        d = self.tables.get(table)
        return d is not None and self.node in d["disc"]

    def _next_disc_tid(self, table: str) -> int:
        tid = self._disc_tid.get(table, 0) + 1
        self._disc_tid[table] = tid
        return tid

    # ======================================================================= events

    def start(self, now: float) -> list[Effect]:
        """Boot: connect to the schema's nodes and extra_db_nodes, then load tables."""
        self._now = now
        self._started = True
        out: list[Effect] = [
            Log.info(
                "mnesia starting",
                db_nodes=sorted(self.db_nodes),
                extra_db_nodes=sorted(self.extra_db_nodes),
                merge=self.merge,
            )
        ]
        for n in sorted((self.db_nodes | self.extra_db_nodes) - {self.node}):
            out.append(Connect(n))
        out += self._persist()
        out += self._arm_ping()
        out.append(SetTimer("check", self.check_interval))
        if self.db_nodes | self.extra_db_nodes == {self.node}:
            out += self._startup_over()
        else:
            out.append(SetTimer("startup", self.startup_timeout))
        return out

    def nodeup(self, node: str, creation: Any, now: float) -> list[Effect]:
        self._now = now
        self.connected.add(node)
        if node in self.db_nodes or node in self.extra_db_nodes or self._wanted(node):
            return [self._hello(node, reply=False)]
        return []

    def _wanted(self, node: str) -> bool:
        return any(node in c["nodes"] for c in self._config_reqs.values())

    def nodedown(self, node: str, reason: Any, now: float) -> list[Effect]:
        self._now = now
        self.connected.discard(node)
        self._hello_sent.pop(node, None)
        out = self._peer_gone(node, f"nodedown ({reason})")
        out += self._tx_nodedown(node)
        return out + self._persist() + self._arm_ping()

    def _arm_ping(self) -> list[Effect]:
        if self.reconnect_interval is None or self._pinging:
            return []
        if not (self.db_nodes | self.extra_db_nodes) - {self.node} - self.connected:
            return []
        self._pinging = True
        return [SetTimer("ping", self.reconnect_interval)]

    def _ping(self) -> list[Effect]:
        """Every reconnect_interval while a db node is not connected: try it again."""
        self._pinging = False
        down = sorted((self.db_nodes | self.extra_db_nodes) - {self.node} - self.connected)
        return [*(Connect(n) for n in down), *self._arm_ping()]

    def _peer_gone(self, node: str, why: str) -> list[Effect]:
        """`node`'s mnesia is no longer connected to ours (nodedown, or it left)."""
        out: list[Effect] = []
        was_running = node in self.running
        confirmed = node in self._confirmed
        self.running.discard(node)
        self._confirmed.discard(node)
        self.peer_loaded.pop(node, None)
        self.peer_loading.pop(node, None)
        self._peer_disc_max.pop(node, None)
        if was_running:
            if confirmed:
                self.marks.add(node)
            out += [
                Log.warning("mnesia down", node=node, why=why),
                self._event("mnesia_down", node),
            ]
        for table, (src, _rid) in list(self._loading.items()):
            if src == node:
                self._loading.pop(table)
                self.store.pop(table, None)
                out.append(Log.warning("table copy lost its source", table=table, source=node))
        for rid, (req, target, table, op, arg) in list(self._rreads.items()):
            if target == node:
                del self._rreads[rid]
                out += self._remote_read(req, table, op, arg)
        out += self._try_loads()
        return out

    def receive(self, sender: str, msg: Any, now: float) -> list[Effect]:
        self._now = now
        bad = problem(msg)
        if bad:
            return [Log.warning("bad mnesia message dropped", node=sender, problem=bad)]
        self.clock = max(self.clock, msg["l"])
        handler = getattr(self, _HANDLERS[msg["t"]])
        if msg["t"] in _NEEDS_RUNNING and sender != self.node and sender not in self.running:
            # from a node whose mnesia is not connected to ours (split, gone): it counts us
            # as running, we do not; tell it, so that the two views meet again
            if sender in self.connected:
                return [self._send(sender, "not_running")]
            return []
        try:
            out = handler(sender, msg, now)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            # Malformed content below the checked top level: drop it, keep running.
            return [
                Log.warning(
                    "malformed mnesia message dropped",
                    node=sender,
                    type=msg["t"],
                    error=f"{type(exc).__name__}: {exc}",
                )
            ]
        if sender in self.running and (
            msg["t"] in _TO_RUNNING
            or (msg["t"] == "hello" and (msg["reply"] or self.node in msg["running"]))
        ):
            # it took our hello (its reply), or sent this as one of its running peers
            self._confirmed.add(sender)
        return out

    def timer(self, key: str, now: float, data: Any = None) -> list[Effect]:
        self._now = now
        name, _, arg = key.partition(":")
        if name == "startup":
            return self._startup_over()
        if name == "ping":
            return self._ping()
        if name == "check":
            loaded = sorted(self.loaded)
            loading = sorted(t for t in self.store if t not in self.loaded)
            sums = {t: self._sums[t] for t in loaded if t in self._sums}
            return [
                *(
                    self._send(n, "check", loaded=loaded, loading=loading, sums=sums)
                    for n in sorted(self.running)
                ),
                SetTimer("check", self.check_interval),
            ]
        if name == "load_wait":
            return self._load_wait_timeout(arg)
        if name == "wait":
            return self._wait_timeout(int(arg))
        if name == "config":
            return self._config_done(int(arg), timed_out=True)
        if name == "outcome":
            return self._outcome_timer(arg, now)
        return []

    def stop(self, now: float) -> list[Effect]:
        """A clean stop: persist what this node saw last (the shell performs it)."""
        self._now = now
        self._persisted = None
        return self._persist()

    # ======================================================================= API requests

    def request(self, req_id: int, op: str, args: dict[str, Any], now: float) -> list[Effect]:
        """A local API call; the answer comes as Reply(req_id, ...) now or later."""
        self._now = now
        handler = _REQUESTS.get(op)
        if handler is None:
            return [Reply(req_id, error=BadArgument(f"unknown operation {op!r}"))]
        try:
            return handler(self, req_id, **args)
        except MnesiaError as exc:
            return [Reply(req_id, error=exc)]
        except TypeError as exc:
            return [Reply(req_id, error=BadArgument(f"{op}: {exc}"))]

    def _system_info(self, req: int, key: str = "all") -> list[Effect]:
        info = {
            "db_nodes": sorted(self.db_nodes),
            "extra_db_nodes": sorted(self.extra_db_nodes),
            "running_db_nodes": sorted(self._running_all()),
            "tables": sorted(self.tables),
            "local_tables": sorted(t for t, d in self.tables.items() if self.node in sch.copies(d)),
            "loaded_tables": sorted(self.loaded),
            "merge": self.merge,
            "is_running": "yes" if self._startup_done else "starting",
            "inconsistent_nodes": sorted(self.inconsistent),
        }
        if key == "all":
            return [Reply(req, info)]
        if key not in info:
            raise BadArgument(f"system_info: unknown key {key!r}; known: {SYSTEM_INFO_KEYS}")
        return [Reply(req, info[key])]

    def _change_config(self, req: int, key: str, value: Any) -> list[Effect]:
        if key != "extra_db_nodes":
            raise BadArgument(f"change_config: only 'extra_db_nodes' can change, not {key!r}")
        nodes = str_list(list(value)) if isinstance(value, list | tuple) else None
        if nodes is None or not all("@" in n for n in nodes):
            raise BadArgument("change_config('extra_db_nodes', ...) takes a list of node names")
        nodes = sorted(set(nodes) - {self.node})
        self.extra_db_nodes |= set(nodes)
        pending = {n for n in nodes if n not in self.running}
        # a node we stay split from is forced back in: Mnesia's way out of a partition
        for n in pending:
            self.inconsistent.pop(n, None)
        self._config_reqs[req] = {"nodes": set(pending), "conflicts": set()}
        out: list[Effect] = []
        for n in sorted(pending):
            if n in self.connected:
                out.append(self._hello(n, reply=False))
            else:
                out.append(Connect(n))
        if not pending:
            return out + self._config_done(req)
        return [*out, SetTimer(f"config:{req}", self.config_timeout)]

    def _config_progress(self) -> list[Effect]:
        out: list[Effect] = []
        for req, c in list(self._config_reqs.items()):
            c["nodes"] -= self.running
            if not (c["nodes"] - c["conflicts"]):
                out += self._config_done(req)
        return out

    def _config_done(self, req: int, timed_out: bool = False) -> list[Effect]:
        c = self._config_reqs.pop(req, None)
        if c is None:
            return []
        out: list[Effect] = [CancelTimer(f"config:{req}")]
        if c["conflicts"]:
            conflict = c["conflicts_detail"]
            return [*out, Reply(req, error=SchemaConflict(conflict[0], conflict[1]))]
        return [*out, Reply(req, sorted(self.running & self.extra_db_nodes))]

    def _create_table(
        self,
        req: int,
        name: Any,
        *,
        attributes: Any = ("key", "value"),
        key: Any = None,
        ram_copies: Any = None,
        disc_copies: Any = None,
    ) -> list[Effect]:
        if ram_copies is None and disc_copies is None:
            ram_copies = [self.node]
        attrs, key_attr, ram, disc = rec.check_table_def(
            name, attributes, key, ram_copies, disc_copies
        )
        if name in self.tables:
            raise TableExists(name)
        self._check_nodes(ram + disc, f"copies of {name!r}")
        self.clock += 1
        d = sch.make_def(attrs, key_attr, ram, disc, [self.clock, self.node])
        return self._tx_schema(req, name, d, reply=None)

    def _check_nodes(self, nodes: list[str], what: str) -> None:
        for n in nodes:
            if n not in self.db_nodes:
                raise UnknownNode(n, self.db_nodes, what)
            if n not in self._running_all():
                raise NodeNotRunning(n, what)

    def _delete_table(self, req: int, name: Any) -> list[Effect]:
        if name not in self.tables:
            raise NoSuchTable(str(name), self.node)
        return self._tx_schema(req, name, None, reply=None)

    def _add_table_copy(
        self, req: int, table: Any, node: Any, type: str = "ram_copies"
    ) -> list[Effect]:
        d = self.tables.get(table) if isinstance(table, str) else None
        if d is None:
            raise NoSuchTable(str(table), self.node)
        if type not in ("ram_copies", "disc_copies"):
            raise BadArgument(f"add_table_copy: type must be ram_copies or disc_copies: {type!r}")
        if not isinstance(node, str):
            raise BadArgument(f"add_table_copy: node must be a node name, not {node!r}")
        self._check_nodes([node], f"a copy of {table!r}")
        if node in sch.copies(d):
            raise BadArgument(f"add_table_copy: {node} already has a copy of {table!r}")
        new = json.loads(_encode(d))
        new["ram" if type == "ram_copies" else "disc"] = sorted(
            {*new["ram" if type == "ram_copies" else "disc"], node}
        )
        new["version"] += 1
        return self._tx_schema(req, table, new, reply=None)

    def _del_table_copy(self, req: int, table: Any, node: Any) -> list[Effect]:
        d = self.tables.get(table) if isinstance(table, str) else None
        if d is None:
            raise NoSuchTable(str(table), self.node)
        if node not in sch.copies(d):
            raise BadArgument(f"del_table_copy: {node} has no copy of {table!r}")
        if sch.copies(d) == {node}:
            raise BadArgument(
                f"del_table_copy: {node} holds the last copy of {table!r}; use delete_table"
            )
        new = json.loads(_encode(d))
        new["ram"] = [n for n in new["ram"] if n != node]
        new["disc"] = [n for n in new["disc"] if n != node]
        new["version"] += 1
        return self._tx_schema(req, table, new, reply=None)

    def _table_info(self, req: int, table: Any, key: str | None = None) -> list[Effect]:
        d = self.tables.get(table) if isinstance(table, str) else None
        if d is None:
            raise NoSuchTable(str(table), self.node)
        info = {
            "attributes": list(d["attributes"]),
            "key": d["key"],
            "ram_copies": list(d["ram"]),
            "disc_copies": list(d["disc"]),
            "all_nodes": sorted(sch.copies(d)),
            "active_replicas": sorted(set(self._read_sources(table))),
            "where_to_write": sorted(self._write_view(table)),
            "storage_type": sch.storage(d, self.node) or "remote",
            "size": self._size(table),
            "loaded": table in self.loaded,
        }
        if key is None:
            return [Reply(req, info)]
        if key not in info:
            raise BadArgument(f"table_info: unknown key {key!r}; known: {sorted(info)}")
        return [Reply(req, info[key])]

    def _wait_for_tables(self, req: int, tables: Any, timeout: float = 30.0) -> list[Effect]:
        names = str_list(list(tables)) if isinstance(tables, list | tuple) else None
        if names is None:
            raise BadArgument("wait_for_tables takes a list of table names")
        for t in names:
            if t not in self.tables:
                raise NoSuchTable(t, self.node)
        missing = [t for t in names if not self._available(t)]
        if not missing:
            return [Reply(req, None)]
        self._waiters[req] = names
        return [SetTimer(f"wait:{req}", float(timeout))]

    def _available(self, table: str) -> bool:
        return bool(self._read_sources(table))

    def _check_waiters(self) -> list[Effect]:
        out: list[Effect] = []
        for req, names in list(self._waiters.items()):
            gone = [t for t in names if t not in self.tables]
            if gone:
                del self._waiters[req]
                out += [CancelTimer(f"wait:{req}"), Reply(req, error=NoSuchTable(gone[0]))]
            elif all(self._available(t) for t in names):
                del self._waiters[req]
                out += [CancelTimer(f"wait:{req}"), Reply(req, None)]
        return out

    def _wait_timeout(self, req: int) -> list[Effect]:
        names = self._waiters.pop(req, None)
        if names is None:
            return []
        missing = [t for t in names if not self._available(t)]
        why = "; ".join(self._why_not_loaded(t) for t in missing)
        return [Reply(req, error=TablesNotLoaded(missing, why))]

    def _why_not_loaded(self, table: str) -> str:
        d = self.tables.get(table)
        if d is None:
            return f"{table}: deleted"
        if table in self._loading:
            return f"{table}: copying from {self._loading[table][0]}"
        if self.node in d["disc"]:
            wait = self._wait_set(table) - self.running
            if wait:
                return f"{table}: waiting for {sorted(wait)} (they were active when we stopped)"
        down = sorted(sch.copies(d) - self._running_all())
        return f"{table}: no active replica (copies down: {down})"

    def _reload_from(self, req: int, node: Any) -> list[Effect]:
        if not isinstance(node, str) or node not in self.db_nodes or node == self.node:
            raise BadArgument(f"reload_from: {node!r} is not another db node")
        return [*self._reload(node, "requested"), Reply(req, None)]

    def _status(self, req: int) -> list[Effect]:
        return [Reply(req, self.status())]

    # ---- dirty operations

    def _table_def(self, table: Any) -> dict[str, Any]:
        d = self.tables.get(table) if isinstance(table, str) else None
        if d is None:
            raise NoSuchTable(str(table), self.node)
        return d

    def _dirty_write(self, req: int, table: Any, record: Any) -> list[Effect]:
        d = self._table_def(table)
        kj, full = rec.check_record(table, d["attributes"], d["key"], record)
        return self._dirty_put(req, table, kj, full)

    def _dirty_delete(self, req: int, table: Any, key: Any) -> list[Effect]:
        self._table_def(table)
        return self._dirty_put(req, table, rec.check_key(table, key), None)

    def _dirty_put(self, req: int, table: str, kj: str, value: Any) -> list[Effect]:
        targets = self._write_view(table)
        if not targets:
            raise TablesNotLoaded([table], "no active replica")
        self.clock += 1
        entry = {"r": value, "s": [self.clock, self.node]}
        to = sorted(targets)
        out: list[Effect] = []
        if self.node in targets:
            out += self._apply_entries(table, [[kj, entry]], to)
        for n in to:
            if n != self.node:
                out.append(
                    self._send(n, "dirty", table=table, entries=[[kj, entry]], to=to, fwd=False)
                )
        return [*out, Reply(req, None)]

    def _dirty_read(self, req: int, table: Any, key: Any) -> list[Effect]:
        self._table_def(table)
        return self._read_op(req, table, "read", rec.check_key(table, key))

    def _dirty_match(self, req: int, table: Any, pattern: Any) -> list[Effect]:
        d = self._table_def(table)
        return self._read_op(
            req, table, "match", rec.check_pattern(table, d["attributes"], pattern)
        )

    def _dirty_select(self, req: int, table: Any, spec: Any) -> list[Effect]:
        d = self._table_def(table)
        return self._read_op(req, table, "select", rec.check_select(table, d["attributes"], spec))

    def _read_op(self, req: int, table: str, op: str, arg: Any) -> list[Effect]:
        if table in self.loaded:
            return [Reply(req, self._local_read(table, op, arg))]
        return self._remote_read(req, table, op, arg)

    def _local_read(self, table: str, op: str, arg: Any) -> Any:
        content = self.store[table]
        if op == "read":
            entry = content.get(arg)
            return None if entry is None else entry["r"]
        rows = (e["r"] for e in content.values() if e["r"] is not None)
        if op == "match":
            return [r for r in rows if rec.matches(r, arg)]
        return rec.select(rows, arg)

    def _remote_read(self, req: int, table: str, op: str, arg: Any) -> list[Effect]:
        sources = [n for n in self._read_sources(table) if n != self.node]
        if not sources:
            return [Reply(req, error=TablesNotLoaded([table], self._why_not_loaded(table)))]
        self._rid += 1
        self._rreads[self._rid] = (req, sources[0], table, op, arg)
        return [self._send(sources[0], "rread", rid=self._rid, table=table, op=op, arg=arg)]

    def _on_rread(self, sender: str, m: dict[str, Any], now: float) -> list[Effect]:
        table, op = m["table"], m["op"]
        if (
            table not in self.loaded
            or op not in ("read", "match", "select")
            or sender not in self.running
        ):
            return [self._send(sender, "rread_r", rid=m["rid"], ok=False, result=None)]
        d = self.tables[table]
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
            return [self._send(sender, "rread_r", rid=m["rid"], ok=False, result=None)]
        result = self._local_read(table, op, arg)
        return [self._send(sender, "rread_r", rid=m["rid"], ok=True, result=result)]

    def _on_rread_r(self, sender: str, m: dict[str, Any], now: float) -> list[Effect]:
        pending = self._rreads.pop(m["rid"], None)
        if pending is None:
            return []
        req, _target, table, _op, _arg = pending
        if not m["ok"]:
            return [Reply(req, error=TablesNotLoaded([table], f"{sender} could not serve it"))]
        return [Reply(req, m["result"])]

    def _on_dirty(self, sender: str, m: dict[str, Any], now: float) -> list[Effect]:
        table = m["table"]
        if table not in self.store:
            return []
        entries = [e for e in m["entries"] if _entry_pair_ok(e)]
        to = str_list(m["to"]) or []
        return self._apply_entries(table, entries, to, forward=not m["fwd"])

    # ======================================================================= applying writes

    def _apply_entries(
        self, table: str, entries: list[list[Any]], targets: list[str], forward: bool = True
    ) -> list[Effect]:
        """Keep the newer of each incoming entry and ours; disc first, then memory; then
        forward to active replicas the writer did not reach."""
        content = self.store.get(table)
        if content is None:
            return []
        out: list[Effect] = []
        applied: list[list[Any]] = []
        for kj, entry in entries:
            if rec.newer(entry, content.get(kj)):
                applied.append([kj, entry])
        if not applied:
            return []
        disc_ops: list[tuple[str, Any, Any]] = []
        sums = self._sums.get(table) if table in self.loaded else None
        for kj, entry in applied:
            old = content.get(kj)
            content[kj] = entry
            if sums is not None:
                sums[rec.bucket_of(kj)] ^= rec.entry_hash(kj, old) ^ rec.entry_hash(kj, entry)
            if entry["r"] is None and (old is None or old["r"] is not None):
                self._tombs[table] = self._tombs.get(table, 0) + 1
            elif entry["r"] is not None and old is not None and old["r"] is None:
                self._tombs[table] = self._tombs.get(table, 0) - 1
            disc_ops.append(("put", rec.key_from_json(kj), entry))
        disc_ops += self._prune_tombstones(table)
        if self._is_disc(table):
            out.append(DiscCommit(table, self._next_disc_tid(table), tuple(disc_ops)))
        if forward:
            extra = self._write_view(table) - set(targets) - {self.node}
            for n in sorted(extra):
                out.append(
                    self._send(
                        n,
                        "dirty",
                        table=table,
                        entries=applied,
                        to=sorted({*targets, *extra}),
                        fwd=True,
                    )
                )
        return out

    def _prune_tombstones(self, table: str) -> list[tuple[str, Any, Any]]:
        """Tombstone retention: at most max_tombstones per table; the oldest go first.
        A delete older than the retained ones can be undone by an lww merge or a late
        forward of an even older write."""
        if self._tombs.get(table, 0) <= self.max_tombstones:
            return []
        content = self.store[table]
        tombs = sorted(
            ((rec.stamp_of(e), kj) for kj, e in content.items() if e["r"] is None),
        )
        excess = len(tombs) - self.max_tombstones
        ops = []
        for _stamp, kj in tombs[:excess]:
            del content[kj]
            ops.append(("del", rec.key_from_json(kj), None))
        self._tombs[table] = len(tombs) - len(ops)
        return ops

    def _count_tombs(self, table: str) -> None:
        self._tombs[table] = sum(1 for e in self.store[table].values() if e["r"] is None)

    # ======================================================================= schema

    def _apply_schema(self, name: str, entry: Any) -> list[Effect]:
        """A committed schema change (create, delete, copies changed), applied here."""
        new = entry["r"] if isinstance(entry, dict) else None
        old = self.tables.get(name)
        out: list[Effect] = []
        if new is None:
            if old is None:
                return []
            del self.tables[name]
            self._saved_active.pop(name, None)
            out += self._drop_local(name, old)
            out += [Log.info("table deleted", table=name)]
            for peer in self.peer_loaded.values():
                peer.discard(name)
            for peer in self.peer_loading.values():
                peer.discard(name)
            return out + self._check_waiters() + self._persist()
        self.tables[name] = new
        for n in sch.copies(new) - {self.node}:
            if old is None and n in self.running:
                self.peer_loaded.setdefault(n, set()).add(name)  # created loaded everywhere
        for n in list(self.peer_loaded):
            if n not in sch.copies(new):
                self.peer_loaded[n].discard(name)
                self.peer_loading.get(n, set()).discard(name)
        was = sch.storage(old, self.node) if old else None
        now_ = sch.storage(new, self.node)
        if now_ and not was:
            if old is None:
                self.store[name] = {}
                self._tombs[name] = 0
                self._sums[name] = [0] * rec.SYNC_BUCKETS
                self.loaded.add(name)
                if now_ == "disc_copies":
                    self._disc_data.pop(name, None)
                    out.append(ReplaceTable(name, self._next_disc_tid(name), {}))
                out += [
                    Log.info("table created", table=name),
                    self._event("table_loaded", self.node, name),
                ]
            else:
                out += self._try_load(name)
        elif was and not now_:
            out += self._drop_local(name, old)
        elif was != now_ and name in self.loaded:
            if now_ == "disc_copies":
                out.append(ReplaceTable(name, self._next_disc_tid(name), dict(self.store[name])))
            else:
                out.append(DropTable(name))
        return out + self._check_waiters() + self._persist()

    def _drop_local(self, name: str, old: dict[str, Any] | None) -> list[Effect]:
        out: list[Effect] = []
        had = name in self.store or name in self._disc_data
        self.store.pop(name, None)
        self._sums.pop(name, None)
        self.loaded.discard(name)
        self._loading.pop(name, None)
        self._disc_data.pop(name, None)
        if (old is not None and self.node in old["disc"] and had) or (
            old is not None and self.node in old["disc"]
        ):
            out.append(DropTable(name))
        return out

    # ======================================================================= hello and the monitor

    def _hello(self, peer: str, reply: bool, mark: bool | None = None) -> Send:
        running = sorted(self._running_all())
        if peer in self._heal_side:
            self.inconsistent.pop(peer, None)  # we join its side: its answer is welcome
        if not reply:
            self._hello_sent[peer] = running
        disc_max = {}
        for t, entries in self._disc_data.items():
            if t not in self.store and t in self.tables:
                disc_max[t] = max(
                    (list(rec.stamp_of(e)) for e in entries.values()), default=[0, ""]
                )
        return self._send(
            peer,
            "hello",
            reply=reply,
            inc=self.incarnation,
            db_nodes=sorted(self.db_nodes),
            tables=self.tables,
            running=running,
            loaded=sorted(self.loaded),
            loading=sorted(t for t in self.store if t not in self.loaded),
            mark=peer in self.marks if mark is None else mark,
            starting=not self._startup_done,
            heal=peer in self._heal_side,
            disc_max=disc_max,
        )

    def _on_hello(self, sender: str, m: dict[str, Any], now: float) -> list[Effect]:
        if sender == self.node:
            return []
        self.connected.add(sender)
        out: list[Effect] = []
        db_nodes = str_list(m["db_nodes"])
        running = str_list(m["running"])
        if db_nodes is None or running is None:
            return [Log.warning("bad hello dropped", node=sender)]
        my_mark = sender in self.marks
        # the running list the peer judges us by: our earlier hello on this connection, if any
        my_side = self._hello_sent.get(sender) or sorted(self._running_all())
        reply = None if m["reply"] else self._hello(sender, reply=True, mark=my_mark)
        # ---- schema
        merged, changed, conflicts = sch.merge_tables(self.tables, m["tables"])
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
                self._event("schema_conflict", sender, conflicts),
            ]
            if reply is not None:
                out.append(reply)
            return out + self._config_progress()
        # ---- the mnesia monitor: did each side see the other go down?
        inc = m["inc"]
        if m["heal"] or sender in self._heal_side:
            # it joins us after reloading, or we join it: whatever either side saw is over
            self.marks.discard(sender)
            self.inconsistent.pop(sender, None)
        elif my_mark and m["mark"]:
            self.marks.discard(sender)
            kind = (
                "starting_partitioned_network"
                if m["starting"] or not self._startup_done
                else "running_partitioned_network"
            )
            out += [
                Log.warning(
                    "inconsistent database: we and the node each saw the other down",
                    node=sender,
                    kind=kind,
                ),
                self._event("inconsistent_database", sender, kind),
            ]
            if reply is not None:
                out.append(reply)
                reply = None
            out += self._persist()
            return out + self._inconsistent(sender, inc, my_side, running, m)
        else:
            self.marks.discard(sender)
            if self.inconsistent.get(sender, inc) == inc and sender in self.inconsistent:
                # still the split incarnation: stay apart until someone heals. The peer
                # must learn that we stay apart, or it counts us as running while we do not
                # count it, and the two views never meet (check -> not_running -> hello, in
                # a loop). Under autoheal we are the winner: ask it again to reload (our
                # first heal_req can have been lost with the connection it went on); under
                # none, answer with our mark so that it finds us inconsistent too.
                if self.merge == "autoheal":
                    if reply is not None:
                        out.append(reply)
                    out.append(self._send(sender, "heal_req"))
                elif not m["reply"]:
                    out.append(self._hello(sender, reply=True, mark=True))
                return out + self._persist()
            self.inconsistent.pop(sender, None)
        if reply is not None:
            out.append(reply)
        out += self._merge_schema(db_nodes, merged, changed, sender)
        out += self._peer_up(sender, m)
        return out

    def _merge_schema(
        self, db_nodes: list[str], merged: dict[str, Any], changed: list[str], sender: str
    ) -> list[Effect]:
        out: list[Effect] = []
        learnt = {*db_nodes, sender} - self.db_nodes
        self.db_nodes |= learnt
        for n in sorted(learnt - self.running - {self.node, sender}):
            # the schema's other nodes: connect to them too, as Mnesia does after a merge
            out.append(self._hello(n, reply=False) if n in self.connected else Connect(n))
        for name in changed:
            entry = {"r": merged[name], "s": [0, ""]}
            out += self._apply_schema(name, entry)
        return out

    def _peer_up(self, sender: str, m: dict[str, Any]) -> list[Effect]:
        out: list[Effect] = []
        new = sender not in self.running
        self.running.add(sender)
        self._peer_inc[sender] = m["inc"]
        self.peer_loaded[sender] = set(str_list(m["loaded"]) or [])
        self.peer_loading[sender] = set(str_list(m["loading"]) or [])
        dm = {}
        for t, s in (m.get("disc_max") or {}).items():
            if isinstance(s, list) and len(s) == 2 and isinstance(s[0], int):
                dm[t] = (s[0], str(s[1]))
        self._peer_disc_max[sender] = dm
        if new:
            out += [Log.info("mnesia up", node=sender), self._event("mnesia_up", sender)]
            # tell it that we count it as running: its hello to us may have gone before our
            # store was there, and then nothing else would until our first check
            out.append(self._send(sender, "up"))
        if sender in self._heal_side:
            self._heal_side.discard(sender)
            # join the rest of the winner's side, and let our old side find us inconsistent
            for n in sorted(self.connected - self.running - {sender}):
                if n in (str_list(m["running"]) or []):
                    self._heal_side.add(n)
                    out.append(self._hello(n, reply=False))
            for n in sorted(self.connected - self.running - self._heal_side - {sender}):
                if n in self.db_nodes:
                    out.append(self._hello(n, reply=False))
        if not self._startup_done and self.db_nodes - {self.node} <= self.running:
            out += self._startup_over()
        out += self._try_loads()
        out += self._check_waiters()
        out += self._config_progress()
        out += self._persist()
        return out

    def _on_leave(self, sender: str, m: dict[str, Any], now: float) -> list[Effect]:
        """The peer is reloading its tables from another side (autoheal): it is gone for us
        as after a nodedown, and each side keeps a mark so that they find each other
        inconsistent when it comes back."""
        out = self._peer_gone(sender, "it left to reload from another side")
        self.marks.add(sender)
        out += self._tx_nodedown(sender)
        return out + self._persist()

    def _on_loaded(self, sender: str, m: dict[str, Any], now: float) -> list[Effect]:
        tables = set(str_list(m["tables"]) or [])
        self.peer_loaded.setdefault(sender, set()).update(tables)
        self.peer_loading.setdefault(sender, set()).difference_update(tables)
        return self._try_loads() + self._check_waiters() + self._persist()

    def _on_loading(self, sender: str, m: dict[str, Any], now: float) -> list[Effect]:
        self.peer_loading.setdefault(sender, set()).update(str_list(m["tables"]) or [])
        return self._persist()

    def _on_unloaded(self, sender: str, m: dict[str, Any], now: float) -> list[Effect]:
        tables = set(str_list(m["tables"]) or [])
        self.peer_loaded.get(sender, set()).difference_update(tables)
        self.peer_loading.get(sender, set()).difference_update(tables)
        return self._persist()

    def _learn_active(self, sender: str, active: Any) -> None:
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

    # ======================================================================= healing

    def _inconsistent(
        self, peer: str, inc: int, my_side: list[str], their_side: list[str], m: dict[str, Any]
    ) -> list[Effect]:
        if self.merge == "none":
            self.inconsistent[peer] = inc
            return [Log.warning("staying split from the node (merge: none)", node=peer)]
        if self.merge == "autoheal":
            if winner_side(my_side, their_side) == 1:
                return self._reload(peer, "autoheal")
            # until it comes back with a heal hello; told, in case its view of us differs
            # (it may still count us as running after crossing messages of an earlier heal)
            self.inconsistent[peer] = inc
            return [
                Log.info("autoheal: we are on the winning side", node=peer),
                self._send(peer, "heal_req"),
            ]
        # lww: both keep running together and exchange contents
        out = self._send_merge(peer, m)
        db_nodes = str_list(m["db_nodes"]) or []
        merged, changed, _ = sch.merge_tables(self.tables, m["tables"])
        out += self._merge_schema(db_nodes, merged, changed, peer)
        out += self._peer_up(peer, m)
        out += [self._event("heal", self.node, f"lww merge with {peer}")]
        return out

    def _reload(self, winner: str, why: str) -> list[Effect]:
        """Discard this node's tables and reload them from `winner`'s side (autoheal loser)."""
        out: list[Effect] = [
            Log.warning("reloading every table from another node", winner=winner, why=why),
            self._event("heal", self.node, f"reload_from {winner}"),
        ]
        out += self._tx_drop_all()
        for peer in sorted(self.running):
            out.append(self._send(peer, "leave"))
            self.marks.add(peer)
            out.append(self._event("mnesia_down", peer))
        self.running.clear()
        self._confirmed.clear()
        self.peer_loaded.clear()
        self.peer_loading.clear()
        self._peer_disc_max.clear()
        self._hello_sent.clear()
        self.inconsistent.pop(winner, None)
        self.marks.discard(winner)
        self._must_copy |= {t for t, d in self.tables.items() if self.node in sch.copies(d)}
        for table in list(self.store):
            content = self.store.pop(table)
            if self._is_disc(table) and table in self.loaded:
                # what our disc holds: the last resort if no replica is left to copy from
                self._disc_data[table] = content
        self.loaded.clear()
        self._sums.clear()
        self._sync_seen.clear()
        self._loading.clear()
        self._heal_side = {winner}
        if winner in self.connected:
            out.append(self._hello(winner, reply=False))
        else:
            out.append(Connect(winner))
        return out + self._persist()

    def _on_check(self, sender: str, m: dict[str, Any], now: float) -> list[Effect]:
        self.peer_loaded[sender] = set(str_list(m["loaded"]) or [])
        self.peer_loading[sender] = set(str_list(m["loading"]) or [])
        out = self._try_loads() + self._check_waiters()
        sums = m.get("sums")
        if isinstance(sums, dict) and self.anti_entropy:
            out += self._compare_sums(sender, sums)
        return out

    # ---- anti-entropy

    def _compare_sums(self, sender: str, sums: dict[str, Any]) -> list[Effect]:
        """Anti-entropy: two running replicas of a loaded table whose bucket digests differ
        at two checks in a row, with neither side's digest of that bucket changed in between
        (so no write was in flight), hold different content. That happens when a write
        reached only part of a replica set that is not fully connected (a partial
        partition: nobody saw anybody down between the replicas that differ, so no
        inconsistent_database fires), when a node that loaded its own copy while cut off
        rejoins peers that saw it go down but that it did not see go down, or when
        autoheal reloads cross. Both sides then exchange the bucket's entries and keep the
        newest per key, as the lww merge does. The node with the smaller name starts it."""
        out: list[Effect] = []
        if self.node > sender:
            return out
        for table, theirs in sorted(sums.items()):
            mine = self._sums.get(table)
            if mine is None or table not in self.loaded or not rec.sums_ok(theirs):
                continue
            prev = self._sync_seen.get((sender, table))
            self._sync_seen[(sender, table)] = (list(theirs), list(mine))
            if prev is None:
                continue
            buckets = [
                b
                for b in range(rec.SYNC_BUCKETS)
                if theirs[b] != mine[b] and prev[0][b] == theirs[b] and prev[1][b] == mine[b]
            ]
            if buckets:
                self._repairs += 1
                out.append(
                    Log.warning(
                        "anti-entropy: a replica differs from ours; exchanging entries",
                        table=table,
                        node=sender,
                        buckets=len(buckets),
                    )
                )
                out += self._send_sync(sender, table, buckets, reply=True)
        return out

    def _send_sync(self, peer: str, table: str, buckets: list[int], reply: bool) -> list[Effect]:
        wanted = set(buckets)
        content = {kj: e for kj, e in self.store[table].items() if rec.bucket_of(kj) in wanted}
        out: list[Effect] = []
        for chunk, last in self._chunks(content):
            out.append(
                self._send(
                    peer,
                    "sync",
                    table=table,
                    buckets=sorted(wanted),
                    entries=chunk,
                    reply=reply and last,
                )
            )
        return out

    def _on_sync(self, sender: str, m: dict[str, Any], now: float) -> list[Effect]:
        table = m["table"]
        if table not in self.store:
            return []
        entries = [e for e in m["entries"] if _entry_pair_ok(e)]
        before = self._sums.get(table, [])[:]
        # every active replica is a target: a repair is not forwarded (each pair repairs)
        out = self._apply_entries(
            table, entries, sorted(self._write_view(table) | {sender}), forward=False
        )
        if self._sums.get(table, []) != before:
            out.append(Log.warning("anti-entropy: newer entries taken", table=table, node=sender))
        buckets = [b for b in m["buckets"] if isinstance(b, int) and 0 <= b < rec.SYNC_BUCKETS]
        if m["reply"] and table in self.loaded and buckets:
            out += self._send_sync(sender, table, buckets, reply=False)
        return out

    def _on_not_running(self, sender: str, m: dict[str, Any], now: float) -> list[Effect]:
        """The peer does not count us as running: drop it (with a mark, as after a nodedown,
        since writes may have missed either side) and greet it again."""
        if sender not in self.running:
            return []
        out = self._peer_gone(sender, "it does not count us as running")
        out += self._tx_nodedown(sender)
        if sender in self.connected:
            out.append(self._hello(sender, reply=False))
        return out + self._persist()

    def _on_up(self, sender: str, m: dict[str, Any], now: float) -> list[Effect]:
        """The peer took us in as running (receive() records it in `_confirmed`). Not
        answered with `not_running` when we do not count it: its hello follows or is there."""
        return []

    def _on_heal_req(self, sender: str, m: dict[str, Any], now: float) -> list[Effect]:
        """The winner of an inconsistency tells us we lost: reload from it (or, if we are
        already on our way to its side, ask to join again)."""
        if self.merge != "autoheal":
            return []
        if sender in self._heal_side:
            return [self._hello(sender, reply=False)]
        return self._reload(sender, "autoheal: the winning side asked")

    def _send_merge(self, peer: str, m: dict[str, Any]) -> list[Effect]:
        out: list[Effect] = []
        theirs = set(str_list(m["loaded"]) or [])
        for table in sorted(self.loaded & theirs):
            for chunk, last in self._chunks(self.store[table]):
                out.append(self._send(peer, "merge_chunk", table=table, entries=chunk, last=last))
        return out

    def _on_merge_chunk(self, sender: str, m: dict[str, Any], now: float) -> list[Effect]:
        table = m["table"]
        if table not in self.store:
            return []
        content = self.store[table]
        entries = [e for e in m["entries"] if _entry_pair_ok(e)]
        conflicts = []
        for kj, entry in entries:
            mine = content.get(kj)
            if mine is not None and mine["s"] != entry["s"] and mine["r"] != entry["r"]:
                conflicts.append(kj)
        out = self._apply_entries(table, entries, [self.node, sender])
        if conflicts:
            self._merge_conflicts += len(conflicts)
            out.append(
                Log.warning(
                    "lww merge: conflicting writes decided by (lamport, node), newest wins",
                    table=table,
                    node=sender,
                    conflicts=len(conflicts),
                    keys=conflicts[:5],
                )
            )
        return out

    # ======================================================================= loading

    def _startup_over(self) -> list[Effect]:
        if self._startup_done:
            return []
        self._startup_done = True
        return [CancelTimer("startup"), *self._try_loads()]

    def _wait_set(self, table: str) -> set[str]:
        d = self.tables[table]
        return set(self._saved_active.get(table, [])) & set(d["disc"]) - {self.node}

    def _try_loads(self) -> list[Effect]:
        out: list[Effect] = []
        for table, d in sorted(self.tables.items()):
            if self.node in sch.copies(d) and table not in self.store:
                out += self._try_load(table)
        return out

    def _try_load(self, table: str) -> list[Effect]:
        d = self.tables.get(table)
        if d is None or table in self.store or self.node not in sch.copies(d):
            return []
        if self._heal_side and not self.running:
            return []  # reloading: only from the winner's side
        sources = [n for n in self._read_sources(table) if n != self.node]
        if sources:
            return self._start_copy(table, sources[0])
        if not self._startup_done or self._heal_side:
            return []
        others = sch.copies(d) - {self.node}
        if table in self._must_copy and not (
            others <= self.running
            and all(
                table not in self.peer_loaded.get(n, ())
                and table not in self.peer_loading.get(n, ())
                for n in others
            )
        ):
            # reloading after autoheal: wait for a replica of the winning side to have it;
            # only if every replica is back and none has it (each of them reloading, in a
            # cascade of heals) do the rules below pick one to load from its disc
            return self._waiting(table, sorted(others - self.running) or sorted(others))
        if self.force_load:
            return self._load_local(table, "force_load")
        if self.node in d["disc"]:
            wait = self._wait_set(table)
            if not wait:
                return self._load_local(table, "we were the last active disc copy")
            if all(
                n in self.running
                and table not in self.peer_loaded.get(n, ())
                and table not in self.peer_loading.get(n, ())
                for n in wait
            ):
                return self._maybe_first(table, d)
            return self._waiting(table, sorted(wait - self.running))
        # a ram copy
        if not d["disc"]:
            others = sch.copies(d) - {self.node}
            if not (others & self.running) or all(
                table not in self.peer_loading.get(n, ()) for n in others & self.running
            ):
                return self._load_empty(table)
            return []
        return self._waiting(table, sorted(set(d["disc"]) - self.running) or sorted(d["disc"]))

    def _maybe_first(self, table: str, d: dict[str, Any]) -> list[Effect]:
        """Every disc copy we wait for is up and none has the table: they went down together.
        The copy with the newest stamp loads from its disc; the others copy from it."""
        mine = max(
            (rec.stamp_of(e) for e in self._disc_data.get(table, {}).values()), default=(0, "")
        )
        best = (mine, self.node)
        for n in self.running:
            if n in d["disc"] and table in self._peer_disc_max.get(n, {}):
                cand = (self._peer_disc_max[n][table], n)
                best = max(best, cand)
        if best[1] == self.node:
            return self._load_local(table, "the copies went down together; ours is newest")
        return self._waiting(table, [best[1]])

    def _waiting(self, table: str, nodes: list[str]) -> list[Effect]:
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

    def _load_wait_timeout(self, table: str) -> list[Effect]:
        if table not in self.tables or table in self.loaded or table in self._loading:
            return []
        return [
            Log.error(
                "table still not loaded; the nodes it waits for are not back. Start them, or "
                "set force_load to load this node's copy (newer writes elsewhere would be lost)",
                table=table,
                why=self._why_not_loaded(table),
                waited=self.load_timeout,
            ),
            self._event("load_timeout", self.node, table),
        ]

    def _load_local(self, table: str, why: str) -> list[Effect]:
        self.store[table] = self._disc_data.pop(table, {})
        self._count_tombs(table)
        return self._loaded(table, f"from local disc: {why}")

    def _load_empty(self, table: str) -> list[Effect]:
        self.store[table] = {}
        self._tombs[table] = 0
        return self._loaded(table, "empty: no other replica is active")

    def _loaded(self, table: str, how: str) -> list[Effect]:
        self.loaded.add(table)
        self._must_copy.discard(table)
        self._sums[table] = rec.table_sums(self.store[table])
        self._wait_logged.discard(table)
        out: list[Effect] = [
            CancelTimer(f"load_wait:{table}"),
            Log.info("table loaded", table=table, how=how),
            self._event("table_loaded", self.node, table),
        ]
        for n in sorted(self.running):
            out.append(self._send(n, "loaded", tables=[table]))
        return out + self._check_waiters() + self._persist()

    def _start_copy(self, table: str, source: str) -> list[Effect]:
        self._rid += 1
        self._loading[table] = (source, self._rid)
        self.store[table] = {}  # our stale copy is replaced; writes from now on apply
        self._tombs[table] = 0
        out: list[Effect] = [Log.info("copying table", table=table, source=source)]
        for n in sorted(self.running):
            out.append(self._send(n, "loading", tables=[table]))
        out.append(self._send(source, "copy_req", table=table, rid=self._rid))
        return out

    def _chunks(self, content: dict[str, Any]) -> list[tuple[list[list[Any]], bool]]:
        chunks: list[tuple[list[list[Any]], bool]] = []
        cur: list[list[Any]] = []
        size = 0
        for kj, entry in content.items():
            n = len(kj) + len(_encode(entry)) + 8
            if cur and size + n > self.chunk_bytes:
                chunks.append((cur, False))
                cur, size = [], 0
            cur.append([kj, entry])
            size += n
        chunks.append((cur, True))
        return chunks

    def _on_copy_req(self, sender: str, m: dict[str, Any], now: float) -> list[Effect]:
        table, rid = m["table"], m["rid"]
        if table not in self.loaded or sender not in self.running:
            return [self._send(sender, "copy_nak", table=table, rid=rid)]
        # from this instant the requester is active for writes here: what we apply after the
        # snapshot is forwarded to it (apply-by-stamp makes the order irrelevant)
        self.peer_loading.setdefault(sender, set()).add(table)
        out: list[Effect] = []
        for chunk, last in self._chunks(self.store[table]):
            out.append(
                self._send(sender, "copy_chunk", table=table, rid=rid, entries=chunk, last=last)
            )
        return out + self._persist()

    def _on_copy_chunk(self, sender: str, m: dict[str, Any], now: float) -> list[Effect]:
        table = m["table"]
        if self._loading.get(table) != (sender, m["rid"]):
            return []
        entries = [e for e in m["entries"] if _entry_pair_ok(e)]
        content = self.store[table]
        for kj, entry in entries:
            if rec.newer(entry, content.get(kj)):
                content[kj] = entry
        if not m["last"]:
            return []
        del self._loading[table]
        self._disc_data.pop(table, None)
        self._count_tombs(table)
        out: list[Effect] = []
        if self._is_disc(table):
            out.append(ReplaceTable(table, self._next_disc_tid(table), dict(content)))
        return out + self._loaded(table, f"copied from {sender}")

    def _on_copy_nak(self, sender: str, m: dict[str, Any], now: float) -> list[Effect]:
        table = m["table"]
        if self._loading.get(table) != (sender, m["rid"]):
            return []
        del self._loading[table]
        self.store.pop(table, None)
        self.peer_loaded.get(sender, set()).discard(table)
        return self._try_load(table)


def _entry_pair_ok(pair: Any) -> bool:
    return (
        isinstance(pair, list)
        and len(pair) == 2
        and isinstance(pair[0], str)
        and rec.entry_ok(pair[1])
    )


_HANDLERS: dict[str, str] = {  # message type -> method (looked up per call: subclassable)
    "hello": "_on_hello",
    "leave": "_on_leave",
    "heal_req": "_on_heal_req",
    "check": "_on_check",
    "not_running": "_on_not_running",
    "up": "_on_up",
    "loaded": "_on_loaded",
    "loading": "_on_loading",
    "unloaded": "_on_unloaded",
    "copy_req": "_on_copy_req",
    "copy_chunk": "_on_copy_chunk",
    "copy_nak": "_on_copy_nak",
    "merge_chunk": "_on_merge_chunk",
    "sync": "_on_sync",
    "dirty": "_on_dirty",
    "rread": "_on_rread",
    "rread_r": "_on_rread_r",
    "lock": "_on_lock",
    "lock_r": "_on_lock_r",
    "release": "_on_release",
    "prepare": "_on_prepare",
    "vote": "_on_vote",
    "commit": "_on_commit",
    "abort": "_on_abort",
    "ack": "_on_ack",
    "outcome_q": "_on_outcome_q",
    "outcome_r": "_on_outcome_r",
}

# What a node sends only to the peers it counts as running: from a running peer, each tells
# that it counts us as running too (`_confirmed`).
_TO_RUNNING = frozenset({"up", "check", "loaded", "loading"})

# Messages only a running peer (mnesia-connected) may send; others are dropped. Requests
# (lock, prepare, copy_req, rread) get a negative answer instead, and transaction answers and
# outcome questions pass: they must cross a reconnect to end a transaction.
_NEEDS_RUNNING = frozenset(
    {
        "loaded",
        "loading",
        "unloaded",
        "copy_chunk",
        "merge_chunk",
        "sync",
        "dirty",
        "rread_r",
        "check",
    }
)

_REQUESTS: dict[str, Callable[..., list[Effect]]] = {
    "system_info": MnesiaCore._system_info,
    "change_config": MnesiaCore._change_config,
    "create_table": MnesiaCore._create_table,
    "delete_table": MnesiaCore._delete_table,
    "add_table_copy": MnesiaCore._add_table_copy,
    "del_table_copy": MnesiaCore._del_table_copy,
    "table_info": MnesiaCore._table_info,
    "wait_for_tables": MnesiaCore._wait_for_tables,
    "reload_from": MnesiaCore._reload_from,
    "status": MnesiaCore._status,
    "dirty_read": MnesiaCore._dirty_read,
    "dirty_write": MnesiaCore._dirty_write,
    "dirty_delete": MnesiaCore._dirty_delete,
    "dirty_match": MnesiaCore._dirty_match,
    "dirty_select": MnesiaCore._dirty_select,
    "tx_begin": MnesiaCore._tx_begin,
    "tx_read": lambda self, req, tid, table, key, lock="read": self._tx_op(
        req, tid, "read", table, key=key, lock=lock
    ),
    "tx_write": lambda self, req, tid, table, record: self._tx_op(
        req, tid, "write", table, record=record
    ),
    "tx_delete": lambda self, req, tid, table, key: self._tx_op(req, tid, "delete", table, key=key),
    "tx_match": lambda self, req, tid, table, pattern: self._tx_op(
        req, tid, "match", table, arg=pattern
    ),
    "tx_select": lambda self, req, tid, table, spec: self._tx_op(
        req, tid, "select", table, arg=spec
    ),
    "tx_commit": MnesiaCore._tx_commit,
    "tx_abort": MnesiaCore._tx_abort,
}
