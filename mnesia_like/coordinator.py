"""Coordinator: the node that runs a transaction for its caller (tx.py has the whole flow).

A read takes its lock on every active replica of its table (and fetches the value from one);
writes are buffered without a lock round, their write locks taken by the prepare. The commit
is two-phase: `prepare` to every replica written, the stamp given and the decision recorded
(in the decision log too, unless this node is the only participant), `commit` with the
stamp, and the caller answered once every participant acked or went down. A lock conflict
("die"), a participant lost or a no vote restarts the transaction.

Parallel commit (`parallel=True`, the store's default; as CockroachDB's parallel commits and Paxos
Commit): when this node is itself a participant (and it is no schema operation), the
transaction is committed once every participant has a prepare record on disc. Each writes
its record before its yes vote, which carries a proposed stamp (its clock + 1); on the last
yes vote the transaction is committed, with the newest proposal as the stamp: the coordinator
sends `commit` with it and answers its caller once every participant acked (an ack waits for
no fsync): no decision log, and one fsync (the prepares', in parallel) on the commit's path. After a crash the outcome is recovered from the participants alone: all
prepared -> committed with the newest proposal; any participant without a record (it never
voted yes, or aborted) vetoes -> aborted (termination.py). So a restart answer to the caller
must never race a commit: on a lost participant our own part is aborted (its record deleted)
before the answer, and a participant that never heard of the transaction refuses it from
the first outcome question on.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from mnesia_like import records as rec
from mnesia_like.effects import DiscCommit, MnesiaEffect, Reply
from mnesia_like.errors import BadArgument, MnesiaError, NoSuchTable, Restart, TablesNotLoaded
from mnesia_like.participant import Participant
from mnesia_like.state import NodeState
from mnesia_like.tx import (
    DECISIONS,
    MAX_DECISIONS,
    SCHEMA,
    Bounded,
    CoordTx,
    Op,
    max_stamp,
    stamp_ok,
)


class Coordinator:
    """The transactions this node coordinates (see the module docstring).

    `outcomes` is the node's record of how transactions ended (shared with the participant):
    "committed" is written here at the decision, before any participant can ask."""

    def __init__(
        self,
        state: NodeState,
        outcomes: Bounded,
        participant: Participant | None = None,
        *,
        parallel: bool = False,
    ) -> None:
        self.s = state
        self.outcomes = outcomes
        self.participant = participant  # this node's: a parallel abort ends its part first
        self.parallel = parallel and participant is not None
        self.txs: dict[str, CoordTx] = {}
        self._doomed: Bounded = Bounded()  # tid -> why it must restart
        self._ages: Bounded = Bounded()  # caller-chosen tid -> its age
        self._tx_seq = 0
        self._decisions: deque[str] = deque()
        # decisions of an earlier life of this node (the coordinator's decision log)
        for kj, entry in sorted(
            state.disc_data.pop(DECISIONS, {}).items(),
            key=lambda item: rec.stamp_of(item[1]) if rec.entry_ok(item[1]) else (0, ""),
        ):
            tid = rec.key_from_json(kj)
            if isinstance(tid, str):
                self.outcomes.put(tid, "committed")
                self._decisions.append(tid)
                stamp = (entry.get("r") or {}).get("st") if isinstance(entry, dict) else None
                if stamp_ok(stamp):
                    state.stamps.put(tid, stamp)

    # ---- the API

    def begin(
        self, req: int, age: Any = None, tid: Any = None, prev: Any = None
    ) -> list[MnesiaEffect]:
        """A new transaction: its tid and age (kept across restarts: wait-die's fairness).

        The caller may choose the `tid` (a globally unique string, e.g. a uuid), so that it
        need not wait for this answer before its first operation; its restart then names the
        tid of the attempt before (`prev`) to keep that one's age."""
        self._tx_seq += 1
        chosen = tid is not None
        if not chosen:
            tid = f"{self.s.node}#{self.s.incarnation}#{self._tx_seq}"
        elif not (isinstance(tid, str) and 0 < len(tid) <= 200) or (
            tid in self.txs or tid in self.outcomes or tid in self._doomed
        ):
            return [Reply(req, error=BadArgument(f"tx_begin: {tid!r} is not a new tid"))]
        elif age is None and isinstance(prev, str):
            age = self._ages.get(prev)
        if not (isinstance(age, list) and len(age) == 3):
            age = [self.s.clock, self.s.node, self._tx_seq]
        if chosen:
            self._ages.put(tid, list(age))
        self.txs[tid] = CoordTx(tid, list(age))
        return [Reply(req, {"tid": tid, "age": list(age)})]

    def _get(self, req: int, tid: Any) -> tuple[CoordTx | None, list[MnesiaEffect]]:
        tx = self.txs.get(tid) if isinstance(tid, str) else None
        if tx is None:
            why = self._doomed.get(tid, "unknown transaction (restarted or already ended)")
            return None, [Reply(req, error=Restart(why))]
        if tx.op is not None or tx.phase != "active":
            return None, [Reply(req, error=BadArgument(f"transaction {tid} is busy"))]
        return tx, []

    def op(
        self,
        req: int,
        tid: Any,
        kind: str,
        table: Any,
        *,
        key: Any = None,
        record: Any = None,
        arg: Any = None,
        lock: Any = "read",
    ) -> list[MnesiaEffect]:
        tx, out = self._get(req, tid)
        if tx is None:
            return out
        try:
            if lock not in ("read", "write") or (lock == "write" and kind != "read"):
                raise BadArgument(f"lock must be 'read' or 'write' (for a read), not {lock!r}")
            d = self.s.tables.get(table) if isinstance(table, str) else None
            if d is None:
                raise NoSuchTable(str(table), self.s.node)
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
        if kind == "read" and kj is not None and (table, kj) in tx.writes:
            return [Reply(req, tx.writes[(table, kj)])]  # our write lock covers the read
        targets = self.s.write_view(table)
        if kind in ("write", "delete") and targets:
            locked = tx.wlocked.get((table, kj or ""))
            if locked is not None and targets <= locked:
                # The write lock is ours on every active replica already (a wread took it):
                # buffer without a lock round. Had a replica dropped it since (it reloaded),
                # that replica votes no at prepare and the transaction restarts.
                tx.writes[(table, kj or "")] = None if kind == "delete" else record
                tx.write_nodes.setdefault(table, set()).update(locked)
                return [Reply(req, None)]
            # No lock round: the prepare takes the write lock on every replica written
            # (waiting or dying there as a lock round would), and the commit's stamp is given
            # at the decision, once every participant holds its locks (see tx.py).
            tx.writes[(table, kj or "")] = None if kind == "delete" else record
            tx.lazy.setdefault((table, kj or ""), set()).update(targets)
            tx.write_nodes.setdefault(table, set()).update(targets)
            tx.nodes |= targets
            return [Reply(req, None)]
        source = None
        if kind in ("read", "match", "select"):
            readable = self.s.read_sources(table)
            source = readable[0] if readable else None
            if source is None or source not in targets:
                return self._fail(tx, req, TablesNotLoaded([table], "no active replica"))
        if not targets:
            return self._fail(tx, req, TablesNotLoaded([table], "no active replica"))
        mode = "write" if kind in ("write", "delete") or lock == "write" else "read"
        lock_key = kj if kind in ("read", "write", "delete") else None
        tx.seq += 1
        tx.op = Op(
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
        tx.lock_nodes |= targets
        if mode == "write":
            tx.write_nodes.setdefault(table, set()).update(targets)
        for n in sorted(targets):
            want: Any = None
            if n == source:
                want = {"op": kind, "arg": arg} if kind in ("match", "select") else {"op": kind}
            out.append(
                self.s.send(
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

    def schema_op(self, req: int, name: str, new_def: Any, reply: Any) -> list[MnesiaEffect]:
        """A schema operation as a one-operation transaction on every running db node."""
        effects = self.begin(req=-1)
        first = effects[0]
        assert isinstance(first, Reply)  # begin's only effect is its answer
        tid = first.value["tid"]
        tx = self.txs[tid]
        targets = self.s.running_all()
        tx.seq += 1
        tx.op = Op("schema", SCHEMA, rec.key_json(name), req, set(targets), record=new_def)
        tx.nodes |= targets
        tx.lock_nodes |= targets
        tx.write_nodes[SCHEMA] = set(targets)
        tx.schema_reply = reply
        out: list[MnesiaEffect] = []
        for n in sorted(targets):
            out.append(
                self.s.send(
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

    def commit(self, req: int, tid: Any) -> list[MnesiaEffect]:
        tx, out = self._get(req, tid)
        if tx is None:
            return out
        return self._prepare(tx, req)

    def abort(self, req: int, tid: Any) -> list[MnesiaEffect]:
        tx = self.txs.get(tid) if isinstance(tid, str) else None
        if tx is None:
            return [Reply(req, None)]
        return [*self.end_tx(tx, None), Reply(req, None)]

    # ---- the protocol

    def _fail(self, tx: CoordTx, req: int | None, error: Exception) -> list[MnesiaEffect]:
        out = self.end_tx(tx, None)
        if req is not None and req >= 0:
            out.append(Reply(req, error=error))
        return out

    def end_tx(self, tx: CoordTx, restart: str | None) -> list[MnesiaEffect]:
        """Forget `tx` here and release (or abort) it on every node it touched. With a
        `restart` reason, the pending request (if any) gets Restart."""
        self.txs.pop(tx.tid, None)
        out: list[MnesiaEffect] = []
        kind = "abort" if tx.phase == "preparing" else "release"
        if tx.phase == "preparing":
            self.outcomes.put(tx.tid, "aborted")
        nodes = sorted(tx.nodes)
        if tx.parallel and tx.phase == "preparing" and self.participant is not None:
            # Our own part first, in this event: its prepare record is deleted (or it will
            # vote no) before the caller hears "restart", so that no crash can leave every
            # participant prepared, which recovery would take for a commit (see above).
            part = self.participant.txs.get(tx.tid)
            if part is None or part.coord == self.s.node:
                out += self.participant.release(tx.tid, "aborted")
            nodes = [n for n in nodes if n != self.s.node]
        for n in nodes:
            if n == self.s.node or n in self.s.connected:
                out.append(self.s.send(n, kind, tid=tx.tid))
        if restart is not None:
            self._doomed.put(tx.tid, restart)
            req = tx.op.req if tx.op is not None else tx.req
            if req is not None and req >= 0:
                out.append(Reply(req, error=Restart(restart)))
        return out

    def _prepare(self, tx: CoordTx, req: int | None) -> list[MnesiaEffect]:
        if not tx.writes:
            self.txs.pop(tx.tid, None)
            released: list[MnesiaEffect] = [
                self.s.send(n, "release", tid=tx.tid) for n in sorted(tx.nodes)
            ]
            if req is not None and req >= 0:
                released.append(Reply(req, {"stamp": None}))
            return released
        # A provisional stamp: the entries need one to be checked; the commit carries the
        # final one, given at the decision.
        self.s.clock += 1
        stamp = [self.s.clock, self.s.node]
        tx.stamp = stamp
        tx.req = req
        ops: dict[str, list[Any]] = {}
        for (table, kj), value in tx.writes.items():
            entry = {"r": value, "s": stamp}
            for n in tx.write_nodes.get(table, ()):
                ops.setdefault(n, []).append([table, kj, entry])
        locks: dict[str, list[list[str]]] = {}
        for (table, kj), nodes in tx.lazy.items():
            for n in nodes:
                locks.setdefault(n, []).append([table, kj])
        parts = {t: sorted(ns) for t, ns in tx.write_nodes.items()}
        tx.parallel = self.parallel and self.s.node in ops and SCHEMA not in parts
        tx.phase = "preparing"
        tx.pending = set(ops)
        out: list[MnesiaEffect] = []
        for n in sorted(tx.nodes - set(ops)):
            out.append(self.s.send(n, "release", tid=tx.tid))
        tx.nodes = set(ops)
        for n in sorted(ops):
            extra: dict[str, Any] = {}
            if n in locks:
                # `fresh`: no lock round reached n, so n may not know the transaction yet
                extra = {"locks": locks[n], "age": tx.age, "fresh": n not in tx.lock_nodes}
            if tx.parallel:
                extra["pc"] = True
            out.append(self.s.send(n, "prepare", tid=tx.tid, ops=ops[n], parts=parts, **extra))
        return out

    def on_lock_r(self, sender: str, m: dict[str, Any], now: float) -> list[MnesiaEffect]:
        tx = self.txs.get(m["tid"])
        if tx is None or tx.op is None or m["seq"] != tx.seq or sender not in tx.op.awaiting:
            if m["ans"] == "granted" and tx is None:
                return [self.s.send(sender, "release", tid=m["tid"])]  # a lock nobody wants
            return []
        op = tx.op
        if m["ans"] == "die":
            return self.end_tx(tx, f"lock conflict with an older transaction on {sender}")
        if m["ans"] != "granted":
            return self.end_tx(tx, f"{sender} cannot serve {op.table!r} ({m['ans']})")
        op.awaiting.discard(sender)
        if sender == op.source:
            op.value = m["value"]
        if op.awaiting:
            return []
        return self._op_done(tx, op)

    def _op_done(self, tx: CoordTx, op: Op) -> list[MnesiaEffect]:
        tx.op = None
        if op.mode == "write" and op.kind != "schema":
            tx.wlocked[(op.table, op.key or "")] = op.targets
        if op.kind == "schema":
            tx.writes[(SCHEMA, op.key or "")] = op.record
            return self._prepare(tx, op.req)
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
        d = self.s.tables.get(op.table)
        found = op.value if isinstance(op.value, list) else []
        if d is None:
            return self.end_tx(tx, f"table {op.table!r} was deleted")
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

    def on_vote(self, sender: str, m: dict[str, Any], now: float) -> list[MnesiaEffect]:
        tx = self.txs.get(m["tid"])
        if tx is None or tx.phase != "preparing" or sender not in tx.pending:
            return []
        if not m["yes"]:
            self.s.learn_active(m["active"])
            return self.end_tx(tx, f"{sender} voted no: {m['why']}")
        if tx.parallel:
            if not stamp_ok(m.get("p")):
                return self.end_tx(tx, f"{sender} voted yes without a proposed stamp")
            tx.proposals[sender] = m["p"]
        tx.pending.discard(sender)
        if tx.pending:
            return []
        if tx.parallel:
            return self._parallel_commit(tx)
        # The decision. Recorded first, in memory and on disc (Mnesia's decision log), so
        # that outcome questions get it from now on, also after this node restarts: a
        # participant in doubt must never conclude "aborted" from our restart when we may
        # have applied the commit here and answered the user.
        # When this node is the only participant, nobody can ever be in doubt about the
        # transaction (only participants ask for outcomes), and its own commit record is the
        # decision: no decision log, and so no fsync of it on the commit's critical path.
        # The stamp is given now, when every participant holds the transaction's locks
        # and has told us its Lamport clock (with its vote): it is newer than every entry
        # of the records written, and than the stamp of any transaction that held their
        # locks before. A stamp given at the prepare could be older than that of a younger
        # transaction the prepare waited for, and newest-stamp-wins would then drop this
        # commit's writes.
        tx.phase = "committing"
        self.s.clock += 1
        tx.stamp = [self.s.clock, self.s.node]
        self.outcomes.put(tx.tid, "committed")
        self.s.stamps.put(tx.tid, tx.stamp)
        tx.pending = set(tx.nodes)
        out: list[MnesiaEffect] = (
            [] if tx.nodes == {self.s.node} else [self._log_decision(tx.tid, tx.stamp)]
        )
        return out + [
            self.s.send(n, "commit", tid=tx.tid, stamp=tx.stamp) for n in sorted(tx.nodes)
        ]

    def _parallel_commit(self, tx: CoordTx) -> list[MnesiaEffect]:
        """Every participant has its prepare record on disc: the transaction is committed.
        The commit goes out, to ourselves last (applying it here starts an fsync that the
        messages to the others must not wait for), and the caller is answered once every
        participant acked or went down, as in the classic commit: so when a transaction
        returns, every active replica shows its writes (dirty reads too). The acks wait for
        no fsync (the participants' table appends are lazy): no second fsync on the path."""
        tx.phase = "committing"
        tx.stamp = max_stamp(list(tx.proposals.values()))
        self.s.clock = max(self.s.clock, tx.stamp[0])
        self.outcomes.put(tx.tid, "committed")
        self.s.stamps.put(tx.tid, tx.stamp)
        self.decided(tx)
        tx.pending = set(tx.nodes)
        others = sorted(tx.nodes - {self.s.node})
        return [
            self.s.send(n, "commit", tid=tx.tid, stamp=tx.stamp, pc=True)
            for n in [*others, self.s.node]
        ]

    def decided(self, tx: CoordTx) -> None:
        """A parallel commit is decided: its stamp is given (a hook: the simulator's checker
        watches it)."""

    def _log_decision(self, tid: str, stamp: list[Any]) -> MnesiaEffect:
        ops: list[tuple[str, Any, Any]] = [
            ("put", tid, {"r": {"d": "committed", "st": stamp}, "s": [self.s.clock, ""]})
        ]
        self._decisions.append(tid)
        while len(self._decisions) > MAX_DECISIONS:
            ops.append(("del", self._decisions.popleft(), None))
        return DiscCommit(DECISIONS, self.s.next_disc_tid(DECISIONS), tuple(ops))

    def on_ack(self, sender: str, m: dict[str, Any], now: float) -> list[MnesiaEffect]:
        tx = self.txs.get(m["tid"])
        if tx is None or tx.phase != "committing":
            return []
        tx.pending.discard(sender)
        return self._maybe_committed(tx)

    def _maybe_committed(self, tx: CoordTx) -> list[MnesiaEffect]:
        if tx.pending:
            return []
        self.txs.pop(tx.tid, None)
        if tx.req is None or tx.req < 0:
            return []
        if tx.schema_reply is not None:
            return [Reply(tx.req, tx.schema_reply)]
        return [Reply(tx.req, {"stamp": tx.stamp})]

    def participant_down(self, node: str) -> list[MnesiaEffect]:
        """`node` is gone: a transaction it took part in restarts, unless decided."""
        out: list[MnesiaEffect] = []
        for tx in list(self.txs.values()):
            if tx.phase == "committing":
                if node in tx.pending:
                    tx.pending.discard(node)  # it is no longer an active replica
                    out += self._maybe_committed(tx)
            elif node in tx.nodes or (tx.op is not None and node in tx.op.awaiting):
                tx.nodes.discard(node)
                out += self.end_tx(tx, f"participant {node} went down")
        return out

    def drop_all(self) -> list[MnesiaEffect]:
        """Forget every transaction coordinated here (this node reloads its tables: autoheal)."""
        out: list[MnesiaEffect] = []
        for tx in list(self.txs.values()):
            if tx.phase == "committing":
                # decided: the participants commit it; we only stop waiting for their acks
                tx.pending.clear()
                out += self._maybe_committed(tx)
            else:
                out += self.end_tx(tx, "the node is reloading its tables")
        return out
