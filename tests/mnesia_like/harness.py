"""A small synchronous harness for MnesiaCore unit tests: several cores, FIFO links, timers.

Messages are delivered in order per (sender, receiver) with no latency; `run()` delivers until
nothing is left, then fires due timers (advancing a virtual clock) up to a limit. Links can be
cut (both sides get nodedown; queued messages between them are dropped) and healed (both get
nodeup). Each node has a disc: the schema (PersistSchema) and per table the entries written
by DiscCommit / ReplaceTable, which is all that survives `crash`.
"""

from __future__ import annotations

import itertools
import json
from collections import deque
from typing import Any

from mnesia_like.core import MnesiaCore
from mnesia_like.effects import (
    DiscCommit,
    DropTable,
    MnesiaEvent,
    PersistSchema,
    ReplaceTable,
    Reply,
)
from mnesia_like.errors import Restart
from mnesia_like.shell import LAZY_SYNC
from monitors.effects import CancelTimer, Connect, Disconnect, Log, Send, SetTimer


class Disc:
    def __init__(self) -> None:
        self.schema: dict[str, Any] | None = None
        self.tables: dict[str, dict[str, Any]] = {}
        self.tids: dict[str, int] = {}
        # Lazy and `after` appends (a parallel commit's table writes and its committed
        # marker) that no fsync covers yet: as in the shell's group commit, they reach the
        # disc as settle_lazy says (or at a clean stop, or `sync`), in order, and a crash
        # loses them. `unsynced_since`: when the oldest of them was appended.
        self.unsynced: list[DiscCommit] = []
        self.unsynced_since = 0.0


def settle_lazy(
    pending: list[DiscCommit], table: str, aged: bool
) -> tuple[list[DiscCommit], list[DiscCommit]]:
    """Which of the unsynced lazy and `after` appends `pending` (in order) the fsync of a
    synced append to `table` puts on disc, and which stay unsynced, as the shell's group
    commit does (Mnesia._defer_lazy): all of them once the oldest is `aged` (LAZY_SYNC);
    before that, only the lazy appends to that same log (one file: its fsync covers them).
    An `after` append (a committed marker) waits for every append before it, so it stays."""
    if aged:
        return pending, []
    return (
        [e for e in pending if e.table == table and not e.after],
        [e for e in pending if e.table != table or e.after],
    )


class Harness:
    def __init__(self, names: list[str], **options: Any) -> None:
        self.names = list(names)
        self.options = options
        self.node_options: dict[str, dict[str, Any]] = {n: {} for n in names}
        self.cores: dict[str, MnesiaCore] = {}
        self.discs = {n: Disc() for n in names}
        self.links: set[frozenset[str]] = set()  # connected pairs
        self.blocked: set[frozenset[str]] = set()
        self.queue: deque[tuple[str, str, dict[str, Any]]] = deque()
        self.timers: dict[tuple[str, str], tuple[float, Any]] = {}
        self.now = 0.0
        self.replies: dict[str, dict[int, Reply]] = {n: {} for n in names}
        self.events: list[tuple[str, MnesiaEvent]] = []
        self.logs: list[tuple[str, Log]] = []
        self.disc_commits = 0
        # crash a node in the middle of an event: called after each effect it performs, a
        # True answer crashes it there (the effects after it are never performed)
        self.crash_after: Any = None
        self._req = itertools.count(1)
        self._inc = itertools.count(1)

    # ---- lifecycle

    def boot(self, *names: str) -> None:
        for name in names:
            disc = self.discs[name]
            opts = {**self.options, **self.node_options[name]}
            self.cores[name] = MnesiaCore(
                name,
                next(self._inc),
                saved=json.loads(json.dumps(disc.schema)) if disc.schema else None,
                disc={t: dict(e) for t, e in disc.tables.items()},
                disc_tids=dict(disc.tids),
                **opts,
            )
        for name in names:
            self.perform(name, self.cores[name].start(self.now))
        self.run()

    def sync(self, *names: str) -> None:
        """The unsynced appends of `names` (all nodes if none) reach the disc: what the
        shell's maintenance timer does within LAZY_SYNC when no commit fsyncs before."""
        for name in names or self.names:
            disc = self.discs[name]
            pending, disc.unsynced = disc.unsynced, []
            for e in pending:
                self._write(disc, e)

    def crash(self, name: str) -> None:
        self.discs[name].unsynced.clear()  # never fsynced: gone with the process
        self.cores.pop(name, None)
        self.timers = {k: v for k, v in self.timers.items() if k[0] != name}
        for pair in [p for p in self.links if name in p]:
            self.links.discard(pair)
            (other,) = pair - {name}
            self.queue = deque(m for m in self.queue if {m[0], m[1]} != set(pair))
            if other in self.cores:
                self.perform(other, self.cores[other].nodedown(name, "connection_closed", self.now))

    def stop(self, name: str) -> None:
        """A clean stop: the core persists what it saw last, then the node goes."""
        self.perform(name, self.cores[name].stop(self.now))
        self.sync(name)  # a clean stop syncs every log
        self.crash(name)

    def cut(self, a: str, b: str) -> None:
        pair = frozenset((a, b))
        self.blocked.add(pair)
        if pair in self.links:
            self.links.discard(pair)
            self.queue = deque(m for m in self.queue if {m[0], m[1]} != {a, b})
            for x, y in ((a, b), (b, a)):
                if x in self.cores:
                    self.perform(x, self.cores[x].nodedown(y, "net_tick_timeout", self.now))

    def heal(self, a: str, b: str) -> None:
        self.blocked.discard(frozenset((a, b)))
        self._connect(a, b)

    def partition(self, side1: list[str], side2: list[str]) -> None:
        for a in side1:
            for b in side2:
                self.cut(a, b)
        self.run()

    def heal_all(self) -> None:
        pairs = list(self.blocked)
        self.blocked.clear()
        for pair in pairs:
            a, b = sorted(pair)
            self._connect(a, b)
        self.run()

    def _connect(self, a: str, b: str) -> bool:
        pair = frozenset((a, b))
        if a == b or pair in self.links:
            return True
        if pair in self.blocked or a not in self.cores or b not in self.cores:
            return False
        self.links.add(pair)
        self.perform(a, self.cores[a].nodeup(b, 0, self.now))
        self.perform(b, self.cores[b].nodeup(a, 0, self.now))
        return True

    # ---- effects

    def perform(self, node: str, effects: list[Any]) -> None:
        disc = self.discs[node]
        for e in effects:
            if node not in self.cores:
                return  # crashed by crash_after: it performs nothing more
            self._perform(node, disc, e)
            if self.crash_after is not None and self.crash_after(node, e):
                # what it sent is on the wire (in the kernel's buffers): it arrives before
                # the connection closes, as TCP delivers it after a kill -9
                sent = [m for m in self.queue if m[0] == node and m[1] != node]
                self.queue = deque(m for m in self.queue if m[0] != node)
                del self.cores[node]
                for src, dst, msg in sent:
                    core = self.cores.get(dst)
                    if core is not None and frozenset((src, dst)) in self.links:
                        self.perform(dst, core.receive(src, msg, self.now))
                self.cores[node] = None  # type: ignore[assignment]  # crash() pops it
                self.crash(node)
                return

    def _perform(self, node: str, disc: Disc, e: Any) -> None:
        if isinstance(e, Send):
            if e.node == node or self._connect(node, e.node):
                self.queue.append((node, e.node, json.loads(json.dumps(e.msg))))
        elif isinstance(e, Connect):
            self._connect(node, e.node)
        elif isinstance(e, Disconnect):
            self.cut(node, e.node)
            self.blocked.discard(frozenset((node, e.node)))
        elif isinstance(e, SetTimer):
            self.timers[(node, e.key)] = (self.now + e.after, e.data)
        elif isinstance(e, CancelTimer):
            self.timers.pop((node, e.key), None)
        elif isinstance(e, Log):
            self.logs.append((node, e))
        elif isinstance(e, Reply):
            self.replies[node][e.req_id] = e
        elif isinstance(e, MnesiaEvent):
            self.events.append((node, e))
        elif isinstance(e, PersistSchema):
            disc.schema = json.loads(json.dumps(e.state))
        elif isinstance(e, DiscCommit):
            if e.lazy or e.after:
                if not disc.unsynced:
                    disc.unsynced_since = self.now
                disc.unsynced.append(e)
                return
            aged = self.now - disc.unsynced_since >= LAZY_SYNC
            synced, disc.unsynced = settle_lazy(disc.unsynced, e.table, aged)
            for pending in synced:  # this append's fsync covers these
                self._write(disc, pending)
            self._write(disc, e)
        elif isinstance(e, ReplaceTable):
            self.sync(node)
            disc.tables[e.table] = json.loads(json.dumps(e.entries))
            disc.tids[e.table] = e.tid
        elif isinstance(e, DropTable):
            self.sync(node)
            disc.tables.pop(e.table, None)
        else:
            raise AssertionError(f"unknown effect {e!r}")

    def _write(self, disc: Disc, e: DiscCommit) -> None:
        if e.tid == 0:  # numbered as it reaches the log (the _prepared log)
            e = DiscCommit(e.table, disc.tids.get(e.table, 0) + 1, e.ops)
        assert e.tid > disc.tids.get(e.table, 0), (e.table, e.tid)
        content = disc.tables.setdefault(e.table, {})
        for kind, key, entry in e.ops:
            kj = json.dumps(key, separators=(",", ":"), sort_keys=True)
            if kind == "put":
                content[kj] = json.loads(json.dumps(entry))
            else:
                content.pop(kj, None)
        disc.tids[e.table] = e.tid
        self.disc_commits += 1

    def run(self, max_time: float = 5.0, deliver_limit: int = 100000) -> None:
        """Deliver everything; then fire timers due within `max_time` from now."""
        end = self.now + max_time
        steps = 0
        while True:
            while self.queue:
                steps += 1
                assert steps < deliver_limit, "no quiescence"
                src, dst, msg = self.queue.popleft()
                core = self.cores.get(dst)
                if core is None:
                    continue
                if src != dst and frozenset((src, dst)) not in self.links:
                    continue
                self.perform(dst, core.receive(src, msg, self.now))
            due = [(t, k) for k, (t, _d) in self.timers.items() if t <= end]
            if not due:
                return
            t, key = min(due)
            self.now = max(self.now, t)
            _t, data = self.timers.pop(key)
            node, name = key
            if node in self.cores:
                self.perform(node, self.cores[node].timer(name, self.now, data))

    def advance(self, seconds: float) -> None:
        self.run(max_time=seconds)
        self.now += 0  # timers moved the clock as far as they fired

    # ---- API

    def submit(self, node: str, op: str, /, **args: Any) -> int:
        req = next(self._req)
        self.perform(node, self.cores[node].request(req, op, args, self.now))
        return req

    def result(self, node: str, req: int) -> Reply | None:
        return self.replies[node].pop(req, None)

    def call(self, node: str, op: str, /, run: float = 5.0, **args: Any) -> Any:
        req = self.submit(node, op, **args)
        self.run(max_time=run)
        reply = self.result(node, req)
        assert reply is not None, f"no reply to {op} on {node}"
        if reply.error is not None:
            raise reply.error
        return reply.value

    def transaction(self, node: str, steps: list[tuple[Any, ...]], retries: int = 10) -> Any:
        """Run a transaction of (op, args...) steps; a callable step gets the previous
        results and returns a step. Restarts as Schema.transaction does."""
        age = None
        for _attempt in range(retries):
            begun = self.call(node, "tx_begin", age=age)
            tid, age = begun["tid"], begun["age"]
            results: list[Any] = []
            try:
                for given in steps:
                    step = given(results) if callable(given) else given
                    op, args = step[0], step[1]
                    results.append(self.call(node, op, tid=tid, **args))
                results.append(self.call(node, "tx_commit", tid=tid))
                return results
            except Restart:
                continue
        raise AssertionError("transaction kept restarting")

    # ---- views

    def content(self, node: str, table: str) -> dict[str, Any]:
        return self.cores[node].records(table)

    def events_of(self, kind: str) -> list[tuple[str, str, Any]]:
        return [(n, e.node, e.detail) for n, e in self.events if e.kind == kind]

    def logged(self, text: str) -> list[tuple[str, Log]]:
        return [(n, e) for n, e in self.logs if text in e.text]


def cluster(n: int = 3, **options: Any) -> Harness:
    """n nodes a@h, b@h, ... booted and connected (each knows the others as extra_db_nodes)."""
    names = [f"{chr(ord('a') + i)}@h" for i in range(n)]
    h = Harness(names, **{"startup_timeout": 0.5, **options})
    for name in names:
        h.node_options[name]["extra_db_nodes"] = [m for m in names if m != name]
    h.boot(*names)
    h.run()
    return h
