"""Participant: one replica's half of a transaction (tx.py has the whole flow).

It grants locks (wait-die, locks.py) and serves the read that comes with one, takes the
write locks a `prepare` carries and then votes on it (no if it lost the transaction's locks,
a lock died or the replica set misses a replica it knows to be active), and on `commit`
writes its disc copies, with the commit's stamp, before its `ack`, applies and releases. What a prepared participant does when it loses its coordinator is termination.py.

Parallel commit (a prepare with `pc`, see coordinator.py): the yes vote goes after a prepare
record (the ops, the replica sets, the coordinator and a proposed stamp) in the `_prepared`
disc log, and carries the proposal; the commit is then applied with lazy appends (the prepare
record already holds it) and the record replaced by a committed marker once those are on disc.
An abort deletes the record before anything that follows. A node that restarts with prepare
records takes them back as in doubt (termination.py resolves them from the participants).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from typing import Any

from mnesia_like import records as rec
from mnesia_like import schema as sch
from mnesia_like.effects import DiscCommit, MnesiaEffect
from mnesia_like.locks import LockManager
from mnesia_like.schema_changes import SchemaChanges
from mnesia_like.state import NodeState
from mnesia_like.tx import (
    MAX_PREPARED,
    PREPARED,
    SCHEMA,
    Bounded,
    PartTx,
    age_ok,
    stamp_ok,
)
from mnesia_like.writes import Writes
from monitors.effects import CancelTimer, Log


class Participant:
    """The transactions this node takes part in (see the module docstring).

    `outcomes` is the node's record of how transactions ended (shared with the
    coordinator): a late lock or commit of an ended transaction is answered from it."""

    def __init__(
        self, state: NodeState, writes: Writes, schema: SchemaChanges, outcomes: Bounded
    ) -> None:
        self.s = state
        self.writes = writes
        self.schema = schema
        self.outcomes = outcomes
        self.locks = LockManager()
        self.txs: dict[str, PartTx] = {}
        self.dead: Bounded = Bounded()  # tids released here (late locks refused)
        self._markers: deque[str] = deque()  # committed markers in the _prepared log, oldest first
        self._restore(state.disc_data.pop(PREPARED, {}))

    def _restore(self, records: dict[str, Any]) -> None:
        """Prepare records of an earlier life: committed markers become outcomes, prepared
        ones transactions in doubt (termination.py asks about them once the node starts),
        holding their write locks as an in-doubt Mnesia transaction does."""
        doubt: list[tuple[str, dict[str, Any]]] = []
        for kj, entry in records.items():
            tid = rec.key_from_json(kj)
            body = entry.get("r") if isinstance(entry, dict) else None
            if not isinstance(tid, str) or not isinstance(body, dict):
                continue
            if body.get("d") == "committed":
                self.outcomes.put(tid, "committed")
                if stamp_ok(body.get("st")):
                    self.s.stamps.put(tid, body["st"])
                self._markers.append(tid)
            elif isinstance(body.get("ops"), list) and isinstance(body.get("parts"), dict):
                doubt.append((tid, body))
        for tid, body in doubt:
            part = PartTx(str(body.get("c")), [0, "", 0], prepared=True, parallel=True)
            part.ops = [op for op in body["ops"] if isinstance(op, list) and len(op) == 3]
            part.parts = {t: ns for t, ns in body["parts"].items() if isinstance(ns, list)}
            part.proposal = body.get("p") if stamp_ok(body.get("p")) else [0, self.s.node]
            self.txs[tid] = part
            for table, kj, _entry in part.ops:
                self.locks.request(tid, (0, "", 0), table, kj, "write")

    def restored(self) -> list[str]:
        """The transactions taken back in doubt from the disc (not yet asked about)."""
        return [t for t, p in self.txs.items() if p.parallel and p.doubt_since is None]

    # ---- locks

    def on_lock(self, sender: str, m: dict[str, Any], now: float) -> list[MnesiaEffect]:
        s = self.s
        tid, table = m["tid"], m["table"]
        if m["mode"] not in ("read", "write") or not isinstance(m["age"], list):
            return [Log.warning("bad lock request dropped", node=sender, tid=tid)]
        if tid in self.outcomes or tid in self.dead:
            return [self._lock_r(sender, m, "gone")]
        if sender not in s.running and sender != s.node:
            return [self._lock_r(sender, m, "not_running")]  # split from us, or gone
        if table != SCHEMA and (table not in s.tables or table not in s.store):
            return [self._lock_r(sender, m, "not_here")]
        want = m["want"]
        if want is not None and table not in s.loaded:
            return [self._lock_r(sender, m, "not_loaded")]
        part = self.txs.get(tid)
        if part is None:
            part = self.txs[tid] = PartTx(sender, m["age"])
        if part.prepared:
            return [self._lock_r(sender, m, "gone")]
        age = tuple(m["age"]) if age_ok(m["age"]) else (0, "", 0)
        ans = self.locks.request(tid, age, table, m["key"], m["mode"])
        if ans == "wait":
            part.waiting = (m["seq"], want, table, m["key"])
            return []
        if ans == "die":
            return [self._lock_r(sender, m, "die")]
        return [self._granted(sender, tid, m["seq"], want, table, m["key"])]

    def _lock_r(self, to: str, m: dict[str, Any], ans: str) -> MnesiaEffect:
        return self.s.send(to, "lock_r", tid=m["tid"], seq=m["seq"], ans=ans, value=None)

    def _granted(  # noqa: PLR0917 - the lock request's fields
        self, to: str, tid: str, seq: int, want: Any, table: str, key: str | None
    ) -> MnesiaEffect:
        value: Any = None
        if isinstance(want, dict) and table in self.s.loaded:
            op = want.get("op")
            content = self.s.store.get(table, {})
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
        return self.s.send(to, "lock_r", tid=tid, seq=seq, ans="granted", value=value)

    def _wake(self, granted: list[Any]) -> list[MnesiaEffect]:
        out: list[MnesiaEffect] = []
        for g in granted:
            part = self.txs.get(g.tid)
            if part is not None and part.lazy is not None:
                out += self._take_locks(g.tid, part)  # a prepare waiting for its locks
                continue
            if part is None or part.waiting is None:
                continue
            seq, want, table, key = part.waiting
            part.waiting = None
            out.append(self._granted(part.coord, g.tid, seq, want, table, key))
        return out

    def release(self, tid: str, outcome: str | None) -> list[MnesiaEffect]:
        """Forget `tid` here, release its locks (waking who waits), record its outcome. An
        aborted parallel prepare loses its record first: from then on this node vetoes it,
        also after a restart (no record: it answers "aborted")."""
        part = self.txs.pop(tid, None)
        self.dead.put(tid, True)
        if outcome is not None:
            self.outcomes.put(tid, outcome)
        out: list[MnesiaEffect] = []
        if part is not None and part.parallel and outcome == "aborted":
            out.append(DiscCommit(PREPARED, 0, (("del", tid, None),)))
        return [*out, CancelTimer(f"outcome:{tid}"), *self._wake(self.locks.release(tid))]

    def on_release(self, sender: str, m: dict[str, Any], now: float) -> list[MnesiaEffect]:
        part = self.txs.get(m["tid"])
        if part is not None and part.coord != sender:
            return []
        if part is not None and part.prepared:
            return []  # only commit or abort ends a prepared transaction
        return self.release(m["tid"], None)

    # ---- two-phase commit

    def on_prepare(self, sender: str, m: dict[str, Any], now: float) -> list[MnesiaEffect]:
        """Vote on a prepare. Its `locks` (writes buffered without a lock round) are taken
        first, as a lock round would take them: granted, queued (the vote waits until they
        are granted: wait-die, an older transaction only waits for younger ones) or "die"
        (a no vote: the transaction restarts). A `fresh` prepare may be the first this node
        hears of the transaction."""
        tid = m["tid"]
        part = self.txs.get(tid)
        locks = m.get("locks")
        if locks is not None and not (
            isinstance(locks, list)
            and all(
                isinstance(x, list) and len(x) == 2 and all(isinstance(y, str) for y in x)
                for x in locks
            )
            and isinstance(m.get("age"), list)
        ):
            return [self._vote(sender, tid, False, "bad prepare locks")]
        if (
            part is None
            and locks
            and m.get("fresh") is True
            and tid not in self.dead
            and tid not in self.outcomes
            and (sender in self.s.running or sender == self.s.node)
        ):
            part = self.txs[tid] = PartTx(sender, m["age"])
        if part is None or part.coord != sender or tid in self.dead:
            return [self._vote(sender, tid, False, "it holds no locks of the transaction")]
        if part.prepared or part.lazy is not None:
            return []  # a duplicate
        part.lazy = (m, [list(x) for x in locks or []])
        return self._take_locks(tid, part)

    def _take_locks(self, tid: str, part: PartTx) -> list[MnesiaEffect]:
        """Take the prepare's write locks one by one; vote once all are ours."""
        assert part.lazy is not None
        m, todo = part.lazy
        age = tuple(part.age) if age_ok(part.age) else (0, "", 0)
        while todo:
            table, key = todo[0]
            ans = self.locks.request(tid, age, table, key, "write")
            if ans == "wait":
                return []  # _wake goes on when it is granted
            todo.pop(0)
            if ans == "die":
                part.lazy = None
                return [
                    self._vote(part.coord, tid, False, "lock conflict with an older transaction")
                ]
        part.lazy = None
        return self._vote_on(part.coord, m, part)

    def _vote_on(self, sender: str, m: dict[str, Any], part: PartTx) -> list[MnesiaEffect]:
        s = self.s
        tid = m["tid"]
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
            if table != SCHEMA and table not in s.store:
                return [self._vote(sender, tid, False, f"{table!r} is not active here")]
            mine = s.running_all() if table == SCHEMA else s.write_view(table)
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
        if m.get("pc") is True and SCHEMA not in parts:
            # Parallel commit: the prepare record is on disc before the vote leaves (the
            # shell holds the vote behind its fsync), with a proposed stamp newer than every
            # entry here (the commit's stamp is the newest proposal: see coordinator.py).
            part.parallel = True
            s.clock += 1
            part.proposal = [s.clock, s.node]
            body = {"c": sender, "ops": ops, "parts": parts, "p": part.proposal}
            record = DiscCommit(PREPARED, 0, (("put", tid, {"r": body, "s": part.proposal}),))
            return [record, self._vote(sender, tid, True, "", part.proposal)]
        return [self._vote(sender, tid, True, "")]

    def _vote(
        self, to: str, tid: str, yes: bool, why: str, proposal: list[Any] | None = None
    ) -> MnesiaEffect:
        active = {} if yes else self.s.active_map()
        if proposal is not None:
            return self.s.send(to, "vote", tid=tid, yes=yes, why=why, active=active, p=proposal)
        return self.s.send(to, "vote", tid=tid, yes=yes, why=why, active=active)

    def on_commit(self, sender: str, m: dict[str, Any], now: float) -> list[MnesiaEffect]:
        tid = m["tid"]
        part = self.txs.get(tid)
        if part is None or not part.prepared:
            if self.outcomes.get(tid) == "committed":
                return [self.s.send(sender, "ack", tid=tid)]
            return [Log.warning("commit for a transaction we did not prepare", tid=tid)]
        part.stamp = m.get("stamp")
        # the ack of a parallel commit waits for no fsync: the lazy table appends are
        # covered by the prepare record already on disc
        return [*self.apply_commit(tid, part), self.s.send(sender, "ack", tid=tid)]

    def apply_commit(self, tid: str, part: PartTx) -> list[MnesiaEffect]:
        """Write a prepared transaction here: disc first (DiscCommit), then memory. Its
        entries get the stamp of the decision (`part.stamp`; without one, from a decision
        logged by an older version, the prepare's)."""
        out: list[MnesiaEffect] = []
        by_table: dict[str, list[list[Any]]] = {}
        stamp = part.stamp if stamp_ok(part.stamp) else None
        if stamp is not None:
            self.s.stamps.put(tid, stamp)
        for table, kj, entry in part.ops:
            # with the decision's stamp, a copy: the prepare's entry may be shared
            final = entry if stamp is None else {**entry, "s": stamp}
            by_table.setdefault(table, []).append([kj, final])
        for table, entries in sorted(by_table.items()):
            if table == SCHEMA:
                for kj, entry in entries:
                    out += self.schema.apply(rec.key_from_json(kj), entry)
            else:
                out += self.writes.apply_entries(table, entries, targets=part.parts.get(table, []))
        if part.parallel:
            # The prepare records hold these writes already: the appends wait for no fsync,
            # and the record becomes a committed marker once they are on disc.
            out = [
                dataclasses.replace(e, lazy=True) if isinstance(e, DiscCommit) else e for e in out
            ]
            out.append(self._marker(tid, stamp))
        out += self.release(tid, "committed")
        return out

    def _marker(self, tid: str, stamp: list[Any] | None) -> DiscCommit:
        ops: list[tuple[str, Any, Any]] = [
            ("put", tid, {"r": {"d": "committed", "st": stamp}, "s": stamp or [0, ""]})
        ]
        self._markers.append(tid)
        while len(self._markers) > MAX_PREPARED:
            ops.append(("del", self._markers.popleft(), None))
        return DiscCommit(PREPARED, 0, tuple(ops), after=True)

    def on_abort(self, sender: str, m: dict[str, Any], now: float) -> list[MnesiaEffect]:
        part = self.txs.get(m["tid"])
        if part is not None and part.coord != sender:
            return []
        return self.release(m["tid"], "aborted")

    def drop_all(self) -> list[MnesiaEffect]:
        """Forget every transaction here (this node reloads all its tables: autoheal)."""
        out: list[MnesiaEffect] = []
        for tid, part in list(self.txs.items()):
            if part.parallel and part.prepared:
                # its prepare record decides with the others': it stays, and is resolved
                # (and applied over the reloaded tables, by stamp) as in doubt
                continue
            # not "aborted": another participant asking us must not conclude from our reload
            out += self.release(tid, "forgotten")
        return out


def _schema_def_ok(d: Any) -> bool:
    return d is None or sch.def_ok(d)
