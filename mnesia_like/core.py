"""MnesiaCore: one node's replicated store (Mnesia) as a pure core.

Fed events with the current time (`start`, `nodeup`, `nodedown`, `receive`, `timer`, and the
local API's `request(req_id, op, args, now)`), it returns effects: the common ones
(monitors/effects.py) and its own (mnesia_like/effects.py): `Reply` to an API request,
`DiscCommit` / `ReplaceTable` / `DropTable` for disc copies, `PersistSchema`, `MnesiaEvent`.
It is registered under `MnesiaCore.NAME` on every node.

MnesiaCore is the one entry point; the protocols are collaborating parts, each in its own
module, that share one picture of the node (NodeState) and otherwise call each other only
through the methods named here. A part only calls parts above it in this list (the two
arrows that point up are callbacks this facade wires: membership hands an
inconsistent_database to healing, healing's reload ends every transaction):

    state.py           NodeState: schema, running peers, who has what loaded, contents, clock
    writes.py          Writes: apply stamped entries, forward, tombstones, anti-entropy digests
    waiters.py         Waiters: wait_for_tables
    loading.py         Loader: when and from where each table loads (Mnesia's rules); unload
    schema_changes.py  SchemaChanges: a committed table definition applied here
    dirty.py           DirtyOps: dirty reads and writes, remote reads
    participant.py     Participant: locks (wait-die), prepare/vote, commit, abort
    termination.py     Termination: a prepared participant that lost its coordinator
    coordinator.py     Coordinator: a transaction's operations, lock rounds, two-phase commit
    membership.py      Membership: hello, running peers, schema merge, the mnesia monitor
    healing.py         Healer: merge modes after inconsistent_database, anti-entropy
    admin.py           Admin: create_table, table_info, system_info, ... requests
    tx.py              the records and constants the transaction parts share

This module routes: each message type and API operation to the part that owns it, and the
few events that concern several parts (a peer lost, a reload) to each of them in order.
docs/mnesia_like.md is the guide to the behaviour.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mnesia_like.admin import SYSTEM_INFO_KEYS, Admin
from mnesia_like.coordinator import Coordinator
from mnesia_like.dirty import DirtyOps
from mnesia_like.effects import MnesiaEffect, Reply
from mnesia_like.errors import BadArgument, MnesiaError
from mnesia_like.healing import Healer, winner_side
from mnesia_like.loading import Loader
from mnesia_like.locks import LockManager
from mnesia_like.membership import Membership
from mnesia_like.messages import problem
from mnesia_like.participant import Participant
from mnesia_like.schema_changes import SchemaChanges
from mnesia_like.state import NAME, NodeState
from mnesia_like.termination import Termination
from mnesia_like.tx import Bounded
from mnesia_like.waiters import Waiters
from mnesia_like.writes import Writes
from monitors.effects import Connect, Log, SetTimer

__all__ = ["MERGE_MODES", "SYSTEM_INFO_KEYS", "MnesiaCore", "winner_side"]

MERGE_MODES = ("none", "autoheal", "lww")

Handler = Callable[[str, dict[str, Any], float], list[MnesiaEffect]]

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


class MnesiaCore:
    """One node's store. Every public method returns the effects to perform, in order."""

    NAME = NAME
    # the transaction parts, as classes: the simulator's checker subclasses them to watch
    # the protocol (tests/sim/mnesia.py)
    coordinator_class: type[Coordinator] = Coordinator
    participant_class: type[Participant] = Participant

    def __init__(
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
        parallel_commit: bool = True,
    ) -> None:
        if merge not in MERGE_MODES:
            raise BadArgument(f"merge must be one of {MERGE_MODES}, not {merge!r}")
        self.node = node
        self.incarnation = incarnation
        self.merge = merge
        self.startup_timeout = startup_timeout
        self.check_interval = check_interval
        self._started = False
        s = self.state = NodeState(
            node,
            incarnation,
            saved=saved or {},
            disc=disc or {},
            disc_tids=disc_tids or {},
            extra_db_nodes=set(extra_db_nodes) - {node},
        )
        self.writes = Writes(s, chunk_bytes=chunk_bytes, max_tombstones=max_tombstones)
        self.waiters = Waiters(s)
        self.loader = Loader(
            s, self.writes, self.waiters, force_load=force_load, load_timeout=load_timeout
        )
        self.schema = SchemaChanges(s, self.writes, self.loader, self.waiters)
        self.dirty = DirtyOps(s, self.writes, self.loader.why_not_loaded)
        outcomes = Bounded()  # tid -> committed | aborted | forgotten, for late questions
        self.participant = self.participant_class(s, self.writes, self.schema, outcomes)
        self.termination = Termination(
            s,
            self.participant,
            outcomes,
            outcome_retry=outcome_retry,
            outcome_timeout=outcome_timeout,
        )
        # parallel commit (coordinator.py): on by default, see docs/mnesia_like.md
        self.coordinator = self.coordinator_class(
            s, outcomes, self.participant, parallel=parallel_commit
        )
        self.membership = Membership(
            s,
            self.writes,
            self.loader,
            self.waiters,
            self.schema,
            self.dirty,
            self._inconsistent,
            merge=merge,
            reconnect_interval=reconnect_interval,
            check_interval=check_interval,
            config_timeout=config_timeout,
        )
        self.healer = Healer(
            s,
            self.writes,
            self.loader,
            self.waiters,
            self.membership,
            self.drop_transactions,
            merge=merge,
            anti_entropy=anti_entropy,
        )
        self.admin = Admin(s, self.loader, self.coordinator, self.healer, merge=merge)
        self._handlers: dict[str, Handler] = self._message_handlers()
        self._requests: dict[str, Callable[..., list[MnesiaEffect]]] = self._request_handlers()

    # ---- the shared picture, for the shell, the tests and the simulator

    @property
    def tables(self) -> dict[str, dict[str, Any]]:
        return self.state.tables

    @property
    def store(self) -> dict[str, dict[str, Any]]:
        return self.state.store

    @property
    def loaded(self) -> set[str]:
        return self.state.loaded

    @property
    def running(self) -> set[str]:
        return self.state.running

    @property
    def marks(self) -> set[str]:
        return self.state.marks

    @property
    def clock(self) -> int:
        return self.state.clock

    @property
    def locks(self) -> LockManager:
        return self.participant.locks

    def status(self) -> dict[str, Any]:
        """What the control API shows: running_db_nodes and per-table active copies."""
        return self.admin.status()

    def records(self, table: str) -> dict[str, Any]:
        """Live records of a loaded table by key_json (tests and the simulator)."""
        return self.state.records(table)

    # ---- events

    def start(self, now: float) -> list[MnesiaEffect]:
        """Boot: connect to the schema's nodes and extra_db_nodes, then load tables."""
        s = self.state
        s.now = now
        self._started = True
        out: list[MnesiaEffect] = [
            Log.info(
                "mnesia starting",
                db_nodes=sorted(s.db_nodes),
                extra_db_nodes=sorted(s.extra_db_nodes),
                merge=self.merge,
            )
        ]
        for n in sorted((s.db_nodes | s.extra_db_nodes) - {self.node}):
            out.append(Connect(n))
        out += s.persist()
        out += self.termination.restored(now)  # prepare records of an earlier life
        out += self.membership.arm_ping()
        out.append(SetTimer("check", self.check_interval))
        if s.db_nodes | s.extra_db_nodes == {self.node}:
            out += self.loader.startup_over()
        else:
            out.append(SetTimer("startup", self.startup_timeout))
        return out

    def nodeup(self, node: str, creation: Any, now: float) -> list[MnesiaEffect]:
        self.state.now = now
        return self.membership.nodeup(node)

    def nodedown(self, node: str, reason: Any, now: float) -> list[MnesiaEffect]:
        self.state.now = now
        self.membership.nodedown(node)
        out = self.membership.peer_gone(node, f"nodedown ({reason})")
        out += self._tx_nodedown(node)
        return out + self.state.persist() + self.membership.arm_ping()

    def receive(self, sender: str, msg: Any, now: float) -> list[MnesiaEffect]:
        s = self.state
        s.now = now
        bad = problem(msg)
        if bad:
            return [Log.warning("bad mnesia message dropped", node=sender, problem=bad)]
        s.clock = max(s.clock, msg["l"])
        handler = self._handlers[msg["t"]]
        if msg["t"] in _NEEDS_RUNNING and sender != self.node and sender not in s.running:
            # from a node whose mnesia is not connected to ours (split, gone): it counts us
            # as running, we do not; tell it, so that the two views meet again
            if sender in s.connected:
                return [s.send(sender, "not_running")]
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
        self.membership.note(sender, msg)
        return out

    def timer(self, key: str, now: float, data: Any = None) -> list[MnesiaEffect]:
        self.state.now = now
        name, _, arg = key.partition(":")
        if name == "startup":
            return self.loader.startup_over()
        if name == "ping":
            return self.membership.ping()
        if name == "check":
            return self.membership.check_tick()
        if name == "load_wait":
            return self.loader.load_wait_timeout(arg)
        if name == "wait":
            return self.waiters.timeout(int(arg), self.loader.why_not_loaded)
        if name == "config":
            return self.membership.config_done(int(arg), timed_out=True)
        if name == "outcome":
            return self.termination.outcome_timer(arg, now)
        return []

    def stop(self, now: float) -> list[MnesiaEffect]:
        """A clean stop: persist what this node saw last (the shell performs it)."""
        self.state.now = now
        self.state.forget_persisted()
        return self.state.persist()

    def request(self, req_id: int, op: str, args: dict[str, Any], now: float) -> list[MnesiaEffect]:
        """A local API call; the answer comes as Reply(req_id, ...) now or later."""
        self.state.now = now
        handler = self._requests.get(op)
        if handler is None:
            return [Reply(req_id, error=BadArgument(f"unknown operation {op!r}"))]
        try:
            return handler(req_id, **args)
        except MnesiaError as exc:
            return [Reply(req_id, error=exc)]
        except TypeError as exc:
            return [Reply(req_id, error=BadArgument(f"{op}: {exc}"))]

    # ---- what concerns several parts

    def _tx_nodedown(self, node: str) -> list[MnesiaEffect]:
        """`node` is gone for the transactions: those it took part in restart (the
        coordinator's), those it coordinated abort or go in doubt (termination)."""
        return self.coordinator.participant_down(node) + self.termination.coordinator_down(node)

    def drop_transactions(self) -> list[MnesiaEffect]:
        """Forget every transaction here (this node reloads all its tables: autoheal)."""
        return self.coordinator.drop_all() + self.participant.drop_all()

    def _inconsistent(
        self, peer: str, inc: int, my_side: list[str], their_side: list[str], m: dict[str, Any]
    ) -> list[MnesiaEffect]:
        return self.healer.inconsistent(peer, inc, my_side, their_side, m)

    def _on_leave(self, sender: str, m: dict[str, Any], now: float) -> list[MnesiaEffect]:
        """The peer is reloading its tables from another side (autoheal): it is gone for us
        as after a nodedown, and each side keeps a mark so that they find each other
        inconsistent when it comes back."""
        out = self.membership.peer_gone(sender, "it left to reload from another side")
        self.state.marks.add(sender)
        out += self._tx_nodedown(sender)
        return out + self.state.persist()

    def _on_not_running(self, sender: str, m: dict[str, Any], now: float) -> list[MnesiaEffect]:
        """The peer does not count us as running: drop it (with a mark, as after a nodedown,
        since writes may have missed either side) and greet it again."""
        if sender not in self.state.running:
            return []
        out = self.membership.peer_gone(sender, "it does not count us as running")
        out += self._tx_nodedown(sender)
        if sender in self.state.connected:
            out.append(self.membership.hello(sender, reply=False))
        return out + self.state.persist()

    # ---- routing

    def _message_handlers(self) -> dict[str, Handler]:
        """Message type -> the part's handler (every type messages.problem accepts)."""
        m, h, ld, d = self.membership, self.healer, self.loader, self.dirty
        p, c, t = self.participant, self.coordinator, self.termination
        return {
            "hello": m.on_hello,
            "leave": self._on_leave,
            "heal_req": h.on_heal_req,
            "check": h.on_check,
            "not_running": self._on_not_running,
            "up": m.on_up,
            "loaded": m.on_loaded,
            "loading": m.on_loading,
            "unloaded": m.on_unloaded,
            "copy_req": ld.on_copy_req,
            "copy_chunk": ld.on_copy_chunk,
            "copy_nak": ld.on_copy_nak,
            "merge_chunk": h.on_merge_chunk,
            "sync": h.on_sync,
            "dirty": self.writes.on_dirty,
            "rread": d.on_rread,
            "rread_r": d.on_rread_r,
            "lock": p.on_lock,
            "lock_r": c.on_lock_r,
            "release": p.on_release,
            "prepare": p.on_prepare,
            "vote": c.on_vote,
            "commit": p.on_commit,
            "abort": p.on_abort,
            "ack": c.on_ack,
            "outcome_q": t.on_outcome_q,
            "outcome_r": t.on_outcome_r,
        }

    def _request_handlers(self) -> dict[str, Callable[..., list[MnesiaEffect]]]:
        """API operation -> handler(req, **args)."""
        a, d, c = self.admin, self.dirty, self.coordinator
        return {
            "system_info": a.system_info,
            "change_config": self.membership.change_config,
            "create_table": a.create_table,
            "delete_table": a.delete_table,
            "add_table_copy": a.add_table_copy,
            "del_table_copy": a.del_table_copy,
            "table_info": a.table_info,
            "wait_for_tables": self.waiters.wait_for_tables,
            "reload_from": a.reload_from,
            "status": a.status_request,
            "dirty_read": d.dirty_read,
            "dirty_write": d.dirty_write,
            "dirty_delete": d.dirty_delete,
            "dirty_match": d.dirty_match,
            "dirty_select": d.dirty_select,
            "tx_begin": c.begin,
            "tx_read": lambda req, tid, table, key, lock="read": c.op(
                req, tid, "read", table, key=key, lock=lock
            ),
            "tx_write": lambda req, tid, table, record: c.op(
                req, tid, "write", table, record=record
            ),
            "tx_delete": lambda req, tid, table, key: c.op(req, tid, "delete", table, key=key),
            "tx_match": lambda req, tid, table, pattern: c.op(
                req, tid, "match", table, arg=pattern
            ),
            "tx_select": lambda req, tid, table, spec: c.op(req, tid, "select", table, arg=spec),
            "tx_commit": c.commit,
            "tx_abort": c.abort,
        }
