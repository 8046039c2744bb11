"""Transactions: the coordinator and participant halves of MnesiaCore (a mixin).

Flow (docs/mnesia_like.md has the picture):

- Every operation of a transaction takes its lock on *every* active replica of the table
  (replicas that hold the table loaded or are loading it), through `lock` messages, including
  to this node itself: one code path for local and remote replicas. A read also fetches the
  value from one replica (this node's when it has the table loaded). Writes are buffered.
- A read with lock="write" (Mnesia's wread) takes the record's write lock; a later write or
  delete of a record whose write lock the transaction holds on every active replica is
  buffered without a lock round.
- Deadlocks: wait-die (locks.py). A "die" answer restarts the transaction; it keeps its age
  (a caller that chose the tid names the attempt before, `prev`, to keep its age).
- Commit: two-phase. `prepare` carries each participant's ops (stamped with one Lamport stamp
  for the whole transaction) and the replica set per table. A participant votes no if it lost
  the transaction's locks (it restarted, or saw the coordinator go) or if the replica set
  misses a replica it knows to be active (a node loading the table since): the coordinator
  restarts the transaction. After all yes votes the coordinator records "committed" (in its
  decision log too, unless it is the only participant: then nobody can be in doubt) and sends
  `commit`; each participant writes its disc copies (DiscCommit) *before* its `ack`, applies,
  releases. The user is answered once every participant acked or went down.
- A participant that goes down before the decision aborts the transaction (restart).
- A prepared participant that loses the coordinator asks the others (`outcome_q`):
  "committed" -> commit, "aborted" -> abort. Otherwise it waits for the coordinator (blocking,
  as 2PC and Mnesia do): a coordinator that was only cut off or frozen may have decided and
  applied its own part, and answers when it is back; one that restarted answers "unknown",
  which proves nothing was decided that could still surface: abort. It asks again every
  `outcome_retry` s, and gives up with a presumed abort and a warning after
  `outcome_timeout` s.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mnesia_like import records as rec
from mnesia_like.effects import DiscCommit, Reply
from mnesia_like.errors import (
    BadArgument,
    MnesiaError,
    NoSuchTable,
    Restart,
    TablesNotLoaded,
)
from mnesia_like.locks import LockManager
from monitors.effects import CancelTimer, Effect, Log, SetTimer

if TYPE_CHECKING:
    from mnesia_like.core import MnesiaCore

SCHEMA = "schema"  # the pseudo-table of schema operations: replicated on every running db node
DECISIONS = "_decisions"  # the disc log of commit decisions this node took as coordinator
MAX_REMEMBERED = 20000  # outcomes and dead tids kept for late questions (bounded)
MAX_DECISIONS = 10000  # decisions kept on disc (older ones are pruned)


@dataclass
class _Op:
    kind: str  # read | write | delete | match | select | schema
    table: str
    key: str | None
    req: int | None
    awaiting: set[str]
    source: str | None = None
    value: Any = None
    record: Any = None
    arg: Any = None
    mode: str = "read"
    targets: frozenset[str] = frozenset()  # the replicas asked for the lock


@dataclass
class CoordTx:
    tid: str
    age: list[Any]
    writes: dict[tuple[str, str], Any] = field(default_factory=dict)  # (table, kj) -> rec|None
    nodes: set[str] = field(default_factory=set)
    write_nodes: dict[str, set[str]] = field(default_factory=dict)
    # (table, key_json) -> the replicas on which this transaction holds the record's write
    # lock (granted to a wread, write or delete): a later write or delete of it needs no
    # lock round while that set still covers every active replica
    wlocked: dict[tuple[str, str], frozenset[str]] = field(default_factory=dict)
    seq: int = 0
    op: _Op | None = None
    phase: str = "active"  # active | preparing | committing
    pending: set[str] = field(default_factory=set)  # votes, then acks
    req: int | None = None  # the commit request
    stamp: list[Any] | None = None
    schema_reply: Any = None


@dataclass
class PartTx:
    coord: str
    age: list[Any]
    prepared: bool = False
    ops: list[Any] = field(default_factory=list)
    parts: dict[str, list[str]] = field(default_factory=dict)
    waiting: tuple[int, Any, str, str | None] | None = None  # (seq, want, table, key)
    doubt_since: float | None = None
    answers: dict[str, str] = field(default_factory=dict)


class _Bounded(OrderedDict):
    def put(self, key: str, value: Any) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > MAX_REMEMBERED:
            self.popitem(last=False)


class TxMixin:
    """The transaction half of MnesiaCore (see the module docstring)."""

    def _tx_init(self: MnesiaCore) -> None:
        self.locks = LockManager()
        self._coord: dict[str, CoordTx] = {}
        self._part: dict[str, PartTx] = {}
        self._outcomes: _Bounded = _Bounded()  # tid -> committed | aborted
        self._doomed: _Bounded = _Bounded()  # coordinator: tid -> why it must restart
        self._dead: _Bounded = _Bounded()  # participant: tids released here (late locks refused)
        self._ages: _Bounded = _Bounded()  # coordinator: caller-chosen tid -> its age
        self._tx_seq = 0
        self._decisions: deque[str] = deque()
        # decisions of an earlier life of this node (the coordinator's decision log)
        for kj, _entry in sorted(
            self._disc_data.pop(DECISIONS, {}).items(),
            key=lambda item: rec.stamp_of(item[1]) if rec.entry_ok(item[1]) else (0, ""),
        ):
            tid = rec.key_from_json(kj)
            if isinstance(tid, str):
                self._outcomes.put(tid, "committed")
                self._decisions.append(tid)

    # ================================================================== coordinator: API

    def _tx_begin(
        self: MnesiaCore, req: int, age: Any = None, tid: Any = None, prev: Any = None
    ) -> list[Effect]:
        """A new transaction: its tid and age (kept across restarts: wait-die's fairness).

        The caller may choose the `tid` (a globally unique string, e.g. a uuid), so that it
        need not wait for this answer before its first operation; its restart then names the
        tid of the attempt before (`prev`) to keep that one's age."""
        self._tx_seq += 1
        chosen = tid is not None
        if not chosen:
            tid = f"{self.node}#{self.incarnation}#{self._tx_seq}"
        elif not (isinstance(tid, str) and 0 < len(tid) <= 200) or (
            tid in self._coord or tid in self._outcomes or tid in self._doomed
        ):
            return [Reply(req, error=BadArgument(f"tx_begin: {tid!r} is not a new tid"))]
        elif age is None and isinstance(prev, str):
            age = self._ages.get(prev)
        if not (isinstance(age, list) and len(age) == 3):
            age = [self.clock, self.node, self._tx_seq]
        if chosen:
            self._ages.put(tid, list(age))
        self._coord[tid] = CoordTx(tid, list(age))
        return [Reply(req, {"tid": tid, "age": list(age)})]

    def _tx_get(self: MnesiaCore, req: int, tid: Any) -> tuple[CoordTx | None, list[Effect]]:
        tx = self._coord.get(tid) if isinstance(tid, str) else None
        if tx is None:
            why = self._doomed.get(tid, "unknown transaction (restarted or already ended)")
            return None, [Reply(req, error=Restart(why))]
        if tx.op is not None or tx.phase != "active":
            return None, [Reply(req, error=BadArgument(f"transaction {tid} is busy"))]
        return tx, []

    def _tx_op(
        self: MnesiaCore,
        req: int,
        tid: Any,
        kind: str,
        table: Any,
        *,
        key: Any = None,
        record: Any = None,
        arg: Any = None,
        lock: Any = "read",
    ) -> list[Effect]:
        tx, out = self._tx_get(req, tid)
        if tx is None:
            return out
        try:
            if lock not in ("read", "write") or (lock == "write" and kind != "read"):
                raise BadArgument(f"lock must be 'read' or 'write' (for a read), not {lock!r}")
            d = self.tables.get(table) if isinstance(table, str) else None
            if d is None:
                raise NoSuchTable(str(table), self.node)
            kj = None
            if kind == "write":
                kj, record = rec.check_record(table, d["attributes"], d["key"], record)
            elif kind in ("read", "delete"):
                kj = rec.check_key(table, key)
            elif kind == "match":
                arg = rec.check_pattern(table, d["attributes"], arg)
            elif kind == "select":
                arg = rec.check_select(table, d["attributes"], arg)
        except MnesiaError as exc:
            return [Reply(req, error=exc)]
        if kind == "read" and (table, kj) in tx.writes:
            return [Reply(req, tx.writes[(table, kj)])]  # our write lock covers the read
        targets = self._write_view(table)
        if kind in ("write", "delete") and targets:
            locked = tx.wlocked.get((table, kj or ""))
            if locked is not None and targets <= locked:
                # The write lock is ours on every active replica already (a wread took it):
                # buffer without a lock round. Had a replica dropped it since (it reloaded),
                # that replica votes no at prepare and the transaction restarts.
                tx.writes[(table, kj or "")] = None if kind == "delete" else record
                tx.write_nodes.setdefault(table, set()).update(locked)
                return [Reply(req, None)]
        source = None
        if kind in ("read", "match", "select"):
            readable = self._read_sources(table)
            source = readable[0] if readable else None
            if source is None or source not in targets:
                return self._tx_fail(tx, req, TablesNotLoaded([table], "no active replica"))
        if not targets:
            return self._tx_fail(tx, req, TablesNotLoaded([table], "no active replica"))
        mode = "write" if kind in ("write", "delete") or lock == "write" else "read"
        lock_key = kj if kind in ("read", "write", "delete") else None
        tx.seq += 1
        tx.op = _Op(
            kind,
            table,
            kj,
            req,
            set(targets),
            source,
            record=record,
            arg=arg,
            mode=mode,
            targets=frozenset(targets),
        )
        tx.nodes |= targets
        if mode == "write":
            tx.write_nodes.setdefault(table, set()).update(targets)
        for n in sorted(targets):
            want: Any = None
            if n == source:
                want = {"op": kind, "arg": arg} if kind in ("match", "select") else {"op": kind}
            out.append(
                self._send(
                    n,
                    "lock",
                    tid=tx.tid,
                    age=tx.age,
                    seq=tx.seq,
                    table=table,
                    key=lock_key,
                    mode=mode,
                    want=want,
                )
            )
        return out

    def _tx_schema(self: MnesiaCore, req: int, name: str, new_def: Any, reply: Any) -> list[Effect]:
        """A schema operation as a one-operation transaction on every running db node."""
        effects = self._tx_begin(req=-1)
        tid = effects[0].value["tid"]
        tx = self._coord[tid]
        targets = self._running_all()
        tx.seq += 1
        tx.op = _Op("schema", SCHEMA, rec.key_json(name), req, set(targets), record=new_def)
        tx.nodes |= targets
        tx.write_nodes[SCHEMA] = set(targets)
        tx.schema_reply = reply
        out: list[Effect] = []
        for n in sorted(targets):
            out.append(
                self._send(
                    n,
                    "lock",
                    tid=tid,
                    age=tx.age,
                    seq=tx.seq,
                    table=SCHEMA,
                    key=rec.key_json(name),
                    mode="write",
                    want=None,
                )
            )
        return out

    def _tx_commit(self: MnesiaCore, req: int, tid: Any) -> list[Effect]:
        tx, out = self._tx_get(req, tid)
        if tx is None:
            return out
        return self._commit(tx, req)

    def _tx_abort(self: MnesiaCore, req: int, tid: Any) -> list[Effect]:
        tx = self._coord.get(tid) if isinstance(tid, str) else None
        if tx is None:
            return [Reply(req, None)]
        return [*self._end_tx(tx, None), Reply(req, None)]

    # ================================================================== coordinator: protocol

    def _tx_fail(self: MnesiaCore, tx: CoordTx, req: int | None, error: Exception) -> list[Effect]:
        out = self._end_tx(tx, None)
        if req is not None and req >= 0:
            out.append(Reply(req, error=error))
        return out

    def _end_tx(self: MnesiaCore, tx: CoordTx, restart: str | None) -> list[Effect]:
        """Forget `tx` here and release (or abort) it on every node it touched. With a
        `restart` reason, the pending request (if any) gets Restart."""
        self._coord.pop(tx.tid, None)
        out: list[Effect] = []
        kind = "abort" if tx.phase == "preparing" else "release"
        if tx.phase == "preparing":
            self._outcomes.put(tx.tid, "aborted")
        for n in sorted(tx.nodes):
            if n == self.node or n in self.connected:
                out.append(self._send(n, kind, tid=tx.tid))
        if restart is not None:
            self._doomed.put(tx.tid, restart)
            req = tx.op.req if tx.op is not None else tx.req
            if req is not None and req >= 0:
                out.append(Reply(req, error=Restart(restart)))
        return out

    def _commit(self: MnesiaCore, tx: CoordTx, req: int | None) -> list[Effect]:
        if not tx.writes:
            self._coord.pop(tx.tid, None)
            out = [self._send(n, "release", tid=tx.tid) for n in sorted(tx.nodes)]
            if req is not None and req >= 0:
                out.append(Reply(req, {"stamp": None}))
            return out
        self.clock += 1
        stamp = [self.clock, self.node]
        tx.stamp = stamp
        tx.req = req
        ops: dict[str, list[Any]] = {}
        for (table, kj), value in tx.writes.items():
            entry = {"r": value, "s": stamp}
            for n in tx.write_nodes.get(table, ()):
                ops.setdefault(n, []).append([table, kj, entry])
        parts = {t: sorted(ns) for t, ns in tx.write_nodes.items()}
        tx.phase = "preparing"
        tx.pending = set(ops)
        out: list[Effect] = []
        for n in sorted(tx.nodes - set(ops)):
            out.append(self._send(n, "release", tid=tx.tid))
        tx.nodes = set(ops)
        for n in sorted(ops):
            out.append(self._send(n, "prepare", tid=tx.tid, ops=ops[n], parts=parts))
        return out

    def _on_lock_r(self: MnesiaCore, sender: str, m: dict[str, Any], now: float) -> list[Effect]:
        tx = self._coord.get(m["tid"])
        if tx is None or tx.op is None or m["seq"] != tx.seq or sender not in tx.op.awaiting:
            if m["ans"] == "granted" and tx is None:
                return [self._send(sender, "release", tid=m["tid"])]  # a lock nobody wants
            return []
        op = tx.op
        if m["ans"] == "die":
            return self._end_tx(tx, f"lock conflict with an older transaction on {sender}")
        if m["ans"] != "granted":
            return self._end_tx(tx, f"{sender} cannot serve {op.table!r} ({m['ans']})")
        op.awaiting.discard(sender)
        if sender == op.source:
            op.value = m["value"]
        if op.awaiting:
            return []
        return self._op_done(tx, op)

    def _op_done(self: MnesiaCore, tx: CoordTx, op: _Op) -> list[Effect]:
        tx.op = None
        if op.mode == "write" and op.kind != "schema":
            tx.wlocked[(op.table, op.key or "")] = op.targets
        if op.kind == "schema":
            tx.writes[(SCHEMA, op.key or "")] = op.record
            return self._commit(tx, op.req)
        if op.kind == "write":
            tx.writes[(op.table, op.key or "")] = op.record
            return [Reply(op.req or 0, None)]
        if op.kind == "delete":
            tx.writes[(op.table, op.key or "")] = None
            return [Reply(op.req or 0, None)]
        if op.kind == "read":
            value = op.value.get("r") if isinstance(op.value, dict) else None
            return [Reply(op.req or 0, value)]
        # match / select: the source's records, overlaid with our own buffered writes
        d = self.tables.get(op.table)
        found = op.value if isinstance(op.value, list) else []
        if d is None:
            return self._end_tx(tx, f"table {op.table!r} was deleted")
        key_attr = d["key"]
        by_key = {rec.key_json(r.get(key_attr)): r for r in found if isinstance(r, dict)}
        for (table, kj), value in tx.writes.items():
            if table != op.table:
                continue
            if value is None:
                by_key.pop(kj, None)
            else:
                by_key[kj] = value
        rows = list(by_key.values())
        if op.kind == "match":
            result = [r for r in rows if rec.matches(r, op.arg)]
        else:
            result = rec.select(rows, op.arg)
        return [Reply(op.req or 0, result)]

    def _on_vote(self: MnesiaCore, sender: str, m: dict[str, Any], now: float) -> list[Effect]:
        tx = self._coord.get(m["tid"])
        if tx is None or tx.phase != "preparing" or sender not in tx.pending:
            return []
        if not m["yes"]:
            self._learn_active(sender, m["active"])
            return self._end_tx(tx, f"{sender} voted no: {m['why']}")
        tx.pending.discard(sender)
        if tx.pending:
            return []
        # The decision. Recorded first, in memory and on disc (Mnesia's decision log), so
        # that outcome questions get it from now on, also after this node restarts: a
        # participant in doubt must never conclude "aborted" from our restart when we may
        # have applied the commit here and answered the user.
        # When this node is the only participant, nobody can ever be in doubt about the
        # transaction (only participants ask for outcomes), and its own commit record is the
        # decision: no decision log, and so no fsync of it on the commit's critical path.
        tx.phase = "committing"
        self._outcomes.put(tx.tid, "committed")
        tx.pending = set(tx.nodes)
        out: list[Effect] = [] if tx.nodes == {self.node} else [self._log_decision(tx.tid)]
        return out + [self._send(n, "commit", tid=tx.tid) for n in sorted(tx.nodes)]

    def _log_decision(self: MnesiaCore, tid: str) -> Effect:
        ops: list[tuple[str, Any, Any]] = [
            ("put", tid, {"r": {"d": "committed"}, "s": [self.clock, ""]})
        ]
        self._decisions.append(tid)
        while len(self._decisions) > MAX_DECISIONS:
            ops.append(("del", self._decisions.popleft(), None))
        return DiscCommit(DECISIONS, self._next_disc_tid(DECISIONS), tuple(ops))

    def _on_ack(self: MnesiaCore, sender: str, m: dict[str, Any], now: float) -> list[Effect]:
        tx = self._coord.get(m["tid"])
        if tx is None or tx.phase != "committing":
            return []
        tx.pending.discard(sender)
        return self._maybe_committed(tx)

    def _maybe_committed(self: MnesiaCore, tx: CoordTx) -> list[Effect]:
        if tx.pending:
            return []
        self._coord.pop(tx.tid, None)
        if tx.req is None or tx.req < 0:
            return []
        if tx.schema_reply is not None:
            return [Reply(tx.req, tx.schema_reply)]
        return [Reply(tx.req, {"stamp": tx.stamp})]

    def _tx_nodedown(self: MnesiaCore, node: str) -> list[Effect]:
        out: list[Effect] = []
        for tx in list(self._coord.values()):
            if tx.phase == "committing":
                if node in tx.pending:
                    tx.pending.discard(node)  # it is no longer an active replica
                    out += self._maybe_committed(tx)
            elif node in tx.nodes or (tx.op is not None and node in tx.op.awaiting):
                tx.nodes.discard(node)
                out += self._end_tx(tx, f"participant {node} went down")
        for tid, part in list(self._part.items()):
            if part.coord != node:
                # A participant we lose may be alive and hold the commit: no conclusion; it
                # answers when it is back (a restarted one answers "unknown").
                continue
            if not part.prepared:
                out += self._part_release(tid, "aborted")
            elif part.doubt_since is None:
                part.doubt_since = self._now
                out += [
                    Log.warning(
                        "transaction in doubt: its coordinator went down after we voted yes; "
                        "asking the other participants",
                        tid=tid,
                        coordinator=node,
                    )
                ]
                out += self._ask_outcome(tid, part)
        return out

    # ================================================================== participant

    def _on_lock(self: MnesiaCore, sender: str, m: dict[str, Any], now: float) -> list[Effect]:
        tid, table = m["tid"], m["table"]
        if m["mode"] not in ("read", "write") or not isinstance(m["age"], list):
            return [Log.warning("bad lock request dropped", node=sender, tid=tid)]
        if tid in self._outcomes or tid in self._dead:
            return [self._lock_r(sender, m, "gone")]
        if sender not in self.running and sender != self.node:
            return [self._lock_r(sender, m, "not_running")]  # split from us, or gone
        if table != SCHEMA and (table not in self.tables or table not in self.store):
            return [self._lock_r(sender, m, "not_here")]
        want = m["want"]
        if want is not None and table not in self.loaded:
            return [self._lock_r(sender, m, "not_loaded")]
        part = self._part.get(tid)
        if part is None:
            part = self._part[tid] = PartTx(sender, m["age"])
        if part.prepared:
            return [self._lock_r(sender, m, "gone")]
        age = tuple(m["age"]) if _age_ok(m["age"]) else (0, "", 0)
        ans = self.locks.request(tid, age, table, m["key"], m["mode"])
        if ans == "wait":
            part.waiting = (m["seq"], want, table, m["key"])
            return []
        if ans == "die":
            return [self._lock_r(sender, m, "die")]
        return [self._granted(sender, tid, m["seq"], want, table, m["key"])]

    def _lock_r(self: MnesiaCore, to: str, m: dict[str, Any], ans: str) -> Effect:
        return self._send(to, "lock_r", tid=m["tid"], seq=m["seq"], ans=ans, value=None)

    def _granted(  # noqa: PLR0917 - the lock request's fields
        self: MnesiaCore, to: str, tid: str, seq: int, want: Any, table: str, key: str | None
    ) -> Effect:
        value: Any = None
        if isinstance(want, dict) and table in self.loaded:
            op = want.get("op")
            content = self.store.get(table, {})
            if op == "read" and key is not None:
                value = content.get(key)
            elif op == "match" and isinstance(want.get("arg"), dict):
                value = [
                    e["r"]
                    for e in content.values()
                    if e["r"] is not None and rec.matches(e["r"], want["arg"])
                ]
            elif op == "select" and isinstance(want.get("arg"), dict):
                spec = {"where": want["arg"].get("where", []), "fields": None, "limit": None}
                try:
                    value = rec.select((e["r"] for e in content.values() if e["r"]), spec)
                except (TypeError, ValueError, KeyError):
                    value = []
        return self._send(to, "lock_r", tid=tid, seq=seq, ans="granted", value=value)

    def _wake(self: MnesiaCore, granted: list[Any]) -> list[Effect]:
        out: list[Effect] = []
        for g in granted:
            part = self._part.get(g.tid)
            if part is None or part.waiting is None:
                continue
            seq, want, table, key = part.waiting
            part.waiting = None
            out.append(self._granted(part.coord, g.tid, seq, want, table, key))
        return out

    def _part_release(self: MnesiaCore, tid: str, outcome: str | None) -> list[Effect]:
        self._part.pop(tid, None)
        self._dead.put(tid, True)
        if outcome is not None:
            self._outcomes.put(tid, outcome)
        return [CancelTimer(f"outcome:{tid}"), *self._wake(self.locks.release(tid))]

    def _on_release(self: MnesiaCore, sender: str, m: dict[str, Any], now: float) -> list[Effect]:
        part = self._part.get(m["tid"])
        if part is not None and part.coord != sender:
            return []
        if part is not None and part.prepared:
            return []  # only commit or abort ends a prepared transaction
        return self._part_release(m["tid"], None)

    def _on_prepare(self: MnesiaCore, sender: str, m: dict[str, Any], now: float) -> list[Effect]:
        tid = m["tid"]
        part = self._part.get(tid)
        if part is None or part.coord != sender or tid in self._dead:
            return [self._vote(sender, tid, False, "it holds no locks of the transaction")]
        parts: dict[str, list[str]] = {}
        for table, nodes in m["parts"].items():
            if not isinstance(nodes, list):
                return [self._vote(sender, tid, False, "bad prepare")]
            parts[table] = nodes
        ops = []
        for op in m["ops"]:
            if not (
                isinstance(op, list)
                and len(op) == 3
                and isinstance(op[0], str)
                and isinstance(op[1], str)
            ):
                return [self._vote(sender, tid, False, "bad prepare op")]
            if op[0] == SCHEMA:
                if op[2] is not None and not (
                    isinstance(op[2], dict) and _schema_def_ok(op[2].get("r"))
                ):
                    return [self._vote(sender, tid, False, "bad schema op")]
            elif not rec.entry_ok(op[2]):
                return [self._vote(sender, tid, False, "bad entry")]
            ops.append(op)
        for table in {op[0] for op in ops}:
            if table != SCHEMA and table not in self.store:
                return [self._vote(sender, tid, False, f"{table!r} is not active here")]
            mine = self._running_all() if table == SCHEMA else self._write_view(table)
            missing = mine - set(parts.get(table, ()))
            if missing:
                return [
                    self._vote(
                        sender,
                        tid,
                        False,
                        f"replica set of {table!r} misses active {sorted(missing)}",
                    )
                ]
        part.prepared = True
        part.ops = ops
        part.parts = parts
        return [self._vote(sender, tid, True, "")]

    def _vote(self: MnesiaCore, to: str, tid: str, yes: bool, why: str) -> Effect:
        active = {} if yes else self._active_map()
        return self._send(to, "vote", tid=tid, yes=yes, why=why, active=active)

    def _on_commit(self: MnesiaCore, sender: str, m: dict[str, Any], now: float) -> list[Effect]:
        tid = m["tid"]
        part = self._part.get(tid)
        if part is None or not part.prepared:
            if self._outcomes.get(tid) == "committed":
                return [self._send(sender, "ack", tid=tid)]
            return [Log.warning("commit for a transaction we did not prepare", tid=tid)]
        out = self._apply_commit(tid, part)
        return [*out, self._send(sender, "ack", tid=tid)]

    def _apply_commit(self: MnesiaCore, tid: str, part: PartTx) -> list[Effect]:
        """Write a prepared transaction here: disc first (DiscCommit), then memory."""
        out: list[Effect] = []
        by_table: dict[str, list[list[Any]]] = {}
        for table, kj, entry in part.ops:
            by_table.setdefault(table, []).append([kj, entry])
        for table, entries in sorted(by_table.items()):
            if table == SCHEMA:
                for kj, entry in entries:
                    out += self._apply_schema(rec.key_from_json(kj), entry)
            else:
                out += self._apply_entries(table, entries, targets=part.parts.get(table, []))
        out += self._part_release(tid, "committed")
        return out

    def _on_abort(self: MnesiaCore, sender: str, m: dict[str, Any], now: float) -> list[Effect]:
        part = self._part.get(m["tid"])
        if part is not None and part.coord != sender:
            return []
        return self._part_release(m["tid"], "aborted")

    # ================================================================== termination

    def _ask_outcome(self: MnesiaCore, tid: str, part: PartTx) -> list[Effect]:
        out: list[Effect] = [SetTimer(f"outcome:{tid}", self.outcome_retry)]
        for n in sorted(self._others_of(part) | {part.coord}):
            if n in self.connected and part.answers.get(n) not in ("doubt", "unknown"):
                out.append(self._send(n, "outcome_q", tid=tid))
        return out

    def _others_of(self: MnesiaCore, part: PartTx) -> set[str]:
        nodes = {n for ns in part.parts.values() for n in ns}
        return nodes - {self.node, part.coord}

    def _on_outcome_q(self: MnesiaCore, sender: str, m: dict[str, Any], now: float) -> list[Effect]:
        tid = m["tid"]
        state = self._outcomes.get(tid)
        if state == "forgotten":
            state = "unknown"
        if state is None:
            part = self._part.get(tid)
            if part is None:
                state = "aborted" if tid in self._dead else "unknown"
            elif not part.prepared:
                # We never voted, so no commit was decided; vote no from now on.
                return [
                    *self._part_release(tid, "aborted"),
                    self._send(sender, "outcome_r", tid=tid, state="aborted"),
                ]
            elif part.doubt_since is not None:
                state = "doubt"  # we lost the coordinator too: no commit can reach us now
            else:
                state = "prepared"  # the coordinator may still tell us
        return [self._send(sender, "outcome_r", tid=tid, state=state)]

    def _on_outcome_r(self: MnesiaCore, sender: str, m: dict[str, Any], now: float) -> list[Effect]:
        tid = m["tid"]
        part = self._part.get(tid)
        if part is None or part.doubt_since is None:
            return []
        state = m["state"]
        if state == "committed":
            # The replica set of the prepare is stale: a replica of it may have reloaded its
            # tables since (an autoheal loser, the coordinator itself, drops its copy and
            # copies it back from one of us, who had not applied this yet). Forward to every
            # replica active now; apply-by-stamp makes a duplicate harmless.
            part.parts = {}
            return [
                Log.info("transaction in doubt resolved: committed", tid=tid, by=sender),
                *self._apply_commit(tid, part),
            ]
        if state == "aborted":
            return [
                Log.info("transaction in doubt resolved: aborted", tid=tid, by=sender),
                *self._part_release(tid, "aborted"),
            ]
        if state == "unknown" and sender == part.coord:
            state = "gone"  # the coordinator restarted: it can send nothing any more
        part.answers[sender] = state
        return self._maybe_resolve(tid, part)

    def _maybe_resolve(self: MnesiaCore, tid: str, part: PartTx) -> list[Effect]:
        # Only the coordinator's restart proves that no commit was decided that could still
        # surface: a coordinator that is merely cut off (or frozen) may have decided, and will
        # apply its own part and answer "committed" when it is back. So we wait for it.
        if part.answers.get(part.coord) == "gone":
            return [
                Log.info(
                    "transaction in doubt aborted: its coordinator restarted and none of us "
                    "got the commit",
                    tid=tid,
                ),
                *self._part_release(tid, "aborted"),
            ]
        return []

    def _outcome_timer(self: MnesiaCore, tid: str, now: float) -> list[Effect]:
        part = self._part.get(tid)
        if part is None or part.doubt_since is None:
            return []
        if now - part.doubt_since >= self.outcome_timeout:
            return [
                Log.warning(
                    "transaction in doubt for too long: presumed aborted (a participant that is "
                    "unreachable may have committed it)",
                    tid=tid,
                    waited=round(now - part.doubt_since, 3),
                ),
                *self._part_release(tid, "aborted"),
            ]
        # answers of nodes that may since have learnt something are asked again
        part.answers = {n: s for n, s in part.answers.items() if s in ("doubt", "unknown", "gone")}
        return self._ask_outcome(tid, part)

    def _tx_drop_all(self: MnesiaCore) -> list[Effect]:
        """Forget every transaction here (this node reloads all its tables: autoheal)."""
        out: list[Effect] = []
        for tx in list(self._coord.values()):
            if tx.phase == "committing":
                # decided: the participants commit it; we only stop waiting for their acks
                tx.pending.clear()
                out += self._maybe_committed(tx)
            else:
                out += self._end_tx(tx, "the node is reloading its tables")
        for tid in list(self._part):
            # not "aborted": another participant asking us must not conclude from our reload
            out += self._part_release(tid, "forgotten")
        return out


def _age_ok(age: list[Any]) -> bool:
    return (
        len(age) == 3
        and isinstance(age[0], int)
        and isinstance(age[1], str)
        and isinstance(age[2], int)
    )


def _schema_def_ok(d: Any) -> bool:
    from mnesia_like.schema import def_ok

    return d is None or def_ok(d)
