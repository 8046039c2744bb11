"""Mnesia: the actor shell around MnesiaCore, and Schema, the blocking public API.

The core decides; this Process does the I/O. It feeds the core the NetKernel's NodeUp/NodeDown,
the messages sent to the registered name MnesiaCore.NAME, its timers (monitors/core_timers.py)
and the API requests, and performs the effects in order: messages through the NetKernel, the
disc copies through `disc_log.TableLog` (one per table), the schema through `schema_file`,
events to subscribers.

Disc effects are not guarded like the others: if an append, an fsync or a snapshot fails, the
exception ends the process (let it crash) before any effect that follows it runs, so no ack
leaves for a commit that is not on disc. The supervisor restarts the store, which reloads.

Group commit (fsync="commit"). A `DiscCommit` is appended at once but not fsynced. From then
on, until that append is on disc, the other effects are *held* in order (disc effects keep their
order among themselves and are never held): messages to other nodes, final answers to callers,
timers, events. Only what lets nothing escape the node may pass (`_may_pass`): answers to a
transaction's operations and messages to this node itself. The appends and held effects since
the last fsync form the open batch. At the end of the event that opened it the batch is
sealed: if the mailbox is empty, this thread fsyncs it at once (nothing could use the time);
otherwise the fsync thread fdatasyncs its logs (on duplicate descriptors) and tells the shell
`_Synced`, and the waiting events are handled meanwhile. Only once the batch is on disc are
its held effects performed, in order. What the events handled during an fsync append or hold
forms the next batch, sealed when the previous one is synced: one fsync per log per batch,
however many commits and clients. Nothing that depends on a commit (its ack, its answer, a message that
could carry what it wrote) leaves the node before the commit is on disc, and a failed fsync
ends the process with the held effects unperformed. A parallel commit's table appends are
lazy (its prepare records hold its writes): the fsync a prepare record needs leaves their
logs out, with the committed markers that must follow them, for up to LAZY_SYNC
(`_defer_lazy`), so a commit's path has one fsync per store, not two.

Messages to this node itself are handed to the core directly, in order, after the effects
of the event that sent them (the simulator delivers them the same way), instead of through
the NetKernel's JSON round trip and the mailbox.

Frames coalesced per peer. Messages to other nodes, once past the hold, are gathered per peer
and name in order, and each peer's go out in one write (NetKernel.send_many) when the mailbox
is empty, or once OUTBOX_MAX are gathered. Any effect a caller or subscriber could observe
(a final answer, an event, a connect) sends what was gathered first. An event that reaches
the store without on_receive (a pykka proxy call) leaves them for the next event, at the
latest the maintenance timer's, within a second.

`Schema` is what user code holds: every method sends a request to the shell and waits on a
future in the caller's thread; the actor's thread never blocks on a caller.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
import queue
import random
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pykka import ActorDeadError

from mnesia_like.core import MnesiaCore
from mnesia_like.disc_log import SyncTicket, TableLog, check_fsync, tables_dir
from mnesia_like.effects import (
    DiscCommit,
    DropTable,
    MnesiaEvent,
    PersistSchema,
    ReplaceTable,
    Reply,
)
from mnesia_like.errors import Aborted, MnesiaError, Restart, Timeout
from mnesia_like.schema_file import read_schema, schema_path, write_schema
from mnesia_like.tx import DECISIONS, PREPARED
from monitors.core_shell import NodeCoreShell
from monitors.dist import NetKernel
from monitors.effects import CancelTimer, Log, Send, SetTimer
from monitors.shell_effects import ShellEffects

log = logging.getLogger("mnesia_like")

T = TypeVar("T")
_REQ_IDS = itertools.count(1)  # next() on a count is atomic under the GIL
MAINTENANCE = 1.0  # s: dumps of long logs (in the background), and fsync for fsync=<seconds>
_JITTER = random.Random()  # not the shared generator, which tests (hypothesis) seed and watch
DEAD_STORE_CHECK = 0.2  # s: how often a waiting caller checks that the store still runs
OUTBOX_MAX = 64  # messages gathered for other nodes before they go out though events wait
# s: lazy appends (a parallel commit's table writes) wait up to this long for their fsync:
# the fsyncs that commits need leave them out (_defer_lazy) until they are this old, and a
# batch of them alone is then synced by itself. Longer would move the tail of the commits
# that take them along (a second fsync) further out, but leave more prepare records without
# their committed marker after a crash, each in doubt until its participants answer.
LAZY_SYNC = 0.2
_DISC_EFFECTS = (DiscCommit, ReplaceTable, DropTable, PersistSchema)
# Answers to a transaction's operations may pass a pending fsync: the caller acts on what they
# carry only through the transaction's commit (or abort), whose answer waits for it.
_EARLY_OPS = frozenset({"tx_begin", "tx_read", "tx_write", "tx_delete", "tx_match", "tx_select"})
# Effects that may be performed before the messages gathered for other nodes go out: nobody
# outside the store sees them. Any other effect (a final answer, an event, a Connect) sends
# those first (_flush_sends), so what the store did before it is on the wire when a caller or
# subscriber learns of it, as when each message went out at once. Answers to a transaction's
# operations (_EARLY_OPS) may pass too: the caller acts on them only through the commit.
_AFTER_SENDS_OK = frozenset({SetTimer, CancelTimer, Log})


@dataclass(frozen=True)
class _Request:
    req_id: int
    op: str
    args: dict[str, Any]
    future: Future


@dataclass(frozen=True)
class _Subscribe:
    target: Any  # an ActorRef or a callable
    add: bool


@dataclass
class _Batch:
    """Group commit: logs appended to since the last fsync, and the effects that wait for it."""

    dirty: dict[str, TableLog] = field(default_factory=dict)
    held: list[Any] = field(default_factory=list)
    self_held: bool = False  # a message to ourselves is held: later ones wait behind it
    # whether its fsync holds the effects that follow (False while it holds only lazy
    # appends: a parallel commit's table writes, already durable in prepare records)
    holds: bool = False
    needs_sync: bool = False  # it holds an append that is not lazy (an `after` one is lazy)
    # the tables of those appends: the logs its fsync is for (the others hold only lazy
    # appends, which may wait for a later fsync: see _defer_lazy)
    needed: set[str] = field(default_factory=set)
    opened: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class _Synced:
    """From the fsync thread: batch `batch` is on disc, but for the logs in `errors`."""

    batch: int
    errors: dict[str, BaseException]


_POOL: ThreadPoolExecutor | None = None  # fsync helpers, shared by the stores of a process


def _side_by_side(calls: list[Callable[[], None]]) -> None:
    """Run `calls` (fsyncs of different files) at the same time: the first on this thread,
    the others on helper threads; return when all are done, raising the first error."""
    global _POOL
    if len(calls) <= 1:
        for call in calls:
            call()
        return
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="mnesia-fsync-side")
    others = [_POOL.submit(call) for call in calls[1:]]
    first: BaseException | None = None
    try:
        calls[0]()
    except BaseException as exc:
        first = exc
    for fut in others:
        try:
            fut.result()
        except BaseException as exc:
            first = first or exc
    if first is not None:
        raise first


class _Syncer:
    """The store's fsync thread: runs each batch's SyncTickets, then tells the store."""

    def __init__(self, ref: Any) -> None:
        self._ref = ref
        self._jobs: queue.SimpleQueue[tuple[int, dict[str, SyncTicket]] | None] = (
            queue.SimpleQueue()
        )
        threading.Thread(target=self._loop, name="mnesia-fsync", daemon=True).start()

    def submit(self, batch: int, tickets: dict[str, SyncTicket]) -> None:
        self._jobs.put((batch, tickets))

    def stop(self) -> None:
        self._jobs.put(None)

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            batch, tickets = job
            errors: dict[str, BaseException] = {}

            def run(
                table: str, ticket: SyncTicket, errors: dict[str, BaseException] = errors
            ) -> None:
                try:
                    ticket.run()
                except OSError as exc:
                    errors[table] = exc

            # The logs of one batch are independent files: fsynced side by side, so that a
            # prepare record and the table writes of the commit before it cost one fsync's
            # time, not two (the batch is released once all are done).
            _side_by_side([functools.partial(run, t, k) for t, k in tickets.items()])
            with contextlib.suppress(ActorDeadError):
                self._ref.tell(_Synced(batch, errors))


class Mnesia(NodeCoreShell[MnesiaCore]):
    """One node's store (Mnesia). Start it after the node's NetKernel; use it via `Schema`.

    - `kernel`: the NetKernel (or its ref).
    - `data_dir`: `schema.json` and `tables/` (the disc copies) live here.
    - `extra_db_nodes`: whom to connect to at start (Mnesia's extra_db_nodes).
    - `merge`: "none" | "autoheal" | "lww": what to do after an inconsistent_database.
    - `fsync`: the disc copies' policy: "commit" (fsync before a commit is acknowledged),
      "none", or seconds between fsyncs.
    - `force_load`: load disc copies from local disc without waiting for the node that
      stopped last.
    - `core_options`: MnesiaCore's (startup_timeout, load_timeout, reconnect_interval, ...).
    """

    trap_exit = True  # a supervisor shutdown must not cut a disc write in half

    def __init__(
        self,
        kernel: Any,
        data_dir: str | os.PathLike[str],
        *,
        extra_db_nodes: Iterable[str] = (),
        merge: str = "none",
        fsync: str | float = "commit",
        force_load: bool = False,
        **core_options: Any,
    ) -> None:
        super().__init__()
        self._kernel_ref = kernel
        self.data_dir = Path(data_dir)
        self._extra = list(extra_db_nodes)
        self._merge = merge
        self._fsync = check_fsync(fsync)
        self._force_load = force_load
        self._core_options = core_options
        self._pending: dict[int, Future] = {}
        self._early: set[int] = set()  # requests whose answer may pass a pending fsync
        self._subscribers: dict[int, Any] = {}
        self._logs: dict[str, TableLog] = {}
        # group commit (see the module docstring): the open batch, and the one the fsync
        # thread is syncing (with its number and tickets)
        self._open_batch: _Batch | None = None
        self._syncing: tuple[int, _Batch, dict[str, SyncTicket]] | None = None
        self._batch_ids = itertools.count(1)
        self._syncer: _Syncer | None = None
        self._selfq: deque[dict[str, Any]] = deque()  # messages to this node, in order
        self._draining = False
        # messages to other nodes gathered per peer and name, in order: each peer's go out in
        # one write once the mailbox is empty (see _flush_sends)
        self._outbox: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self._outbox_n = 0
        self.route(_Synced, self._on_synced)
        self.route(_Request, self._on_request)
        self.route(_Subscribe, self._on_subscribe)

    # ---------------------------------------------------------------------- lifecycle

    def on_start(self) -> None:
        self.kernel = NetKernel.of(self._kernel_ref)
        node = self.kernel.node
        self.data_dir.mkdir(parents=True, exist_ok=True)
        saved = read_schema(schema_path(self.data_dir))
        disc: dict[str, dict[str, Any]] = {}
        tids: dict[str, int] = {}
        for table, d in sorted(((saved or {}).get("tables") or {}).items()):
            if isinstance(d, dict) and node in (d.get("disc") or []):
                tlog = self._open(table)
                disc[table] = dict(tlog.entries)
                tids[table] = tlog.last_tid
        # The node's own logs, in no schema: its decisions as a coordinator, and its prepare
        # records (parallel commit), which the core takes back as outcomes or in doubt.
        tdir = tables_dir(self.data_dir)
        for table in (DECISIONS, PREPARED):
            if (tdir / f"{table}.log").exists() or (tdir / f"{table}.snap").exists():
                tlog = self._open(table)
                disc[table] = dict(tlog.entries)
                tids[table] = tlog.last_tid
        self.core = MnesiaCore(
            node,
            self.kernel.creation,
            saved=saved,
            disc=disc,
            disc_tids=tids,
            extra_db_nodes=self._extra,
            merge=self._merge,
            force_load=self._force_load,
            **self._core_options,
        )
        self._effects = ShellEffects(
            self,
            self._timers,
            log,
            "mnesia",
            kernel=self.kernel,
            log_prefix="mnesia",
            thread_prefix="mnesia-connect",
        )
        self.attach(MnesiaCore.NAME)
        self._perform(self.core.start(time.monotonic()))
        self.replay_nodeups()
        self._seal()
        self._flush_sends()
        self._timers.set("_maintenance", MAINTENANCE)

    def on_stop(self) -> None:
        if self.core is not None:
            with contextlib.suppress(Exception):
                self._flush_now()  # a clean stop: what the batches wait for goes out
                self._perform(self.core.stop(time.monotonic()))
                self._flush_now()
                self._flush_sends()
        self._shutdown()

    def on_failure(self, *_exc_info: Any) -> None:
        self._shutdown()

    def on_kill(self) -> None:
        self._shutdown()

    def _shutdown(self) -> None:
        # held effects are never performed: their commits may not be on disc
        self._open_batch = self._syncing = None
        if self._syncer is not None:
            self._syncer.stop()
            self._syncer = None
        self._selfq.clear()
        self._outbox.clear()
        self._timers.clear()
        self.detach(MnesiaCore.NAME)
        for tlog in self._logs.values():
            with contextlib.suppress(Exception):
                tlog.close()
        self._logs.clear()
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(MnesiaError("the store stopped before answering"))
        self._pending.clear()
        self._early.clear()

    # ---------------------------------------------------------------------- events

    # The incoming half is NodeCoreShell's (monitors/core_shell.py): NodeUp, NodeDown,
    # messages to MnesiaCore.NAME, timers and connect attempts; and these routes of our own.

    def on_receive(self, message: Any) -> Any:
        result = super().on_receive(message)
        self._maybe_flush_sends()  # also after events that performed nothing
        return result

    def after_event(self) -> None:
        if self._syncing is None and self._open_batch is not None:
            self._seal()

    def _on_synced(self, message: _Synced, now: float) -> None:
        self._synced(message)

    def _on_request(self, message: _Request, now: float) -> None:
        self._pending[message.req_id] = message.future
        if message.op in _EARLY_OPS:
            self._early.add(message.req_id)
        self._perform(self._core().request(message.req_id, message.op, message.args, now))

    def _on_subscribe(self, message: _Subscribe, now: float) -> None:
        if message.add:
            self._subscribers[id(message.target)] = message.target
        else:
            self._subscribers.pop(id(message.target), None)

    def on_timer(self, key: str, now: float, data: Any) -> None:
        if key == "_maintenance":
            self._maintenance()
        else:
            super().on_timer(key, now, data)

    def _maintenance(self) -> None:
        for table, tlog in list(self._logs.items()):
            try:
                due = tlog.sync_due
                if due() if callable(due) else due:
                    tlog.sync()
                # on the dump's own thread: the store's thread only switches the log (see
                # disc_log "dumping in the background"); each tick moves a dump in flight on
                tlog.maybe_dump(background=True)
            except Exception:
                log.exception("mnesia: maintenance of the disc copy of %r failed", table)
        self._timers.set("_maintenance", MAINTENANCE)

    # ---------------------------------------------------------------------- effects

    def _perform(self, effects: Iterable[Any]) -> None:
        """Perform `effects` in order (held behind a pending fsync: see the module docstring),
        then hand the core the messages it sent to this node, until none is left."""
        self._perform_list(effects)
        if self._draining:
            return  # the outer call drains
        self._draining = True
        try:
            queue, core = self._selfq, self.core
            assert core is not None
            while queue:
                msg = queue.popleft()
                self._perform_list(core.receive(self.kernel.node, msg, time.monotonic()))
        finally:
            self._draining = False
        self._maybe_flush_sends()

    def _maybe_flush_sends(self) -> None:
        if self._outbox and (self._outbox_n >= OUTBOX_MAX or self.actor_inbox.empty()):
            self._flush_sends()

    def _flush_sends(self) -> None:
        """Send what the events gathered for other nodes: one write per peer (frames coalesced
        per peer, NetKernel.send_many). Gathering goes on while more events wait in the
        mailbox (the replies, acks and votes that arrived in one read from a peer, say), up to
        OUTBOX_MAX messages, as group commit gathers commits. Every message here is past its
        group-commit barrier already (held ones are gathered only when released), and a
        peer's messages keep their order; messages to different peers never had one."""
        self._outbox_n = 0
        outbox = self._outbox
        while outbox:
            (node, name), msgs = outbox.popitem()
            try:
                self.kernel.send_many(node, name, msgs)
            except Exception:
                log.exception(
                    "mnesia: sending %d message(s) to %r on %s failed", len(msgs), name, node
                )

    def _holding(self) -> bool:
        """Whether an fsync is pending that the effects from here on must wait for."""
        return bool(
            (self._open_batch and self._open_batch.holds)
            or (self._syncing and self._syncing[1].holds)
        )

    def _perform_list(self, effects: Iterable[Any]) -> None:
        for effect in effects:
            kind = type(effect)
            if kind in _DISC_EFFECTS:
                if kind is DiscCommit and effect.after and (self._open_batch or self._syncing):
                    # waits until everything appended before it is on disc: performed when
                    # the open batch is synced (_release), after the one being synced
                    batch = self._open_batch
                    if batch is None:
                        batch = self._open_batch = _Batch()
                    batch.held.append(effect)
                    continue
                self._perform_disc(effect)  # a failure ends the process: see the docstring
                continue
            to_self = kind is Send and self._to_self(effect)
            if self._holding() and not self._may_pass(effect, kind, to_self):
                batch = self._open_batch
                if batch is None:
                    batch = self._open_batch = _Batch()  # waits for the batch being synced
                batch.holds = True  # what it holds waits for it: seal it without delay
                batch.self_held = batch.self_held or to_self
                batch.held.append(effect)  # after a commit that is not on disc yet
                continue
            if to_self:
                self._selfq.append(effect.msg)
                continue
            try:
                self._perform_one(effect)
            except Exception:
                log.exception("mnesia: performing %r failed", effect)

    def _to_self(self, effect: Any) -> bool:
        return (
            type(effect) is Send
            and effect.node == self.kernel.node
            and effect.name == MnesiaCore.NAME
        )

    def _may_pass(self, effect: Any, kind: type, to_self: bool) -> bool:
        """Whether `effect` may be performed while commits wait for their fsync.

        Only what cannot let anything escape the node: the answer to a transaction's
        operation (see _EARLY_OPS), and a message to ourselves (its effects pass through
        here in turn), in order behind any held one, except a `commit` while a decision
        waits for its fsync: our own part of a transaction must not reach the disc before the
        decision that other participants may ask us about after a crash. Everything else
        (messages to other nodes, final answers, timers, events) waits.
        """
        if kind is Reply:
            return effect.req_id in self._early
        if not to_self:
            return False
        batches = [b for b in (self._open_batch, self._syncing and self._syncing[1]) if b]
        if any(b.self_held for b in batches):
            return False
        return not (effect.msg.get("t") == "commit" and any(DECISIONS in b.dirty for b in batches))

    def _perform_disc(self, effect: Any) -> None:
        kind = type(effect)
        if kind is DiscCommit:
            tlog = self._log_of(effect.table)
            tid = effect.tid or tlog.last_tid + 1  # 0: numbered here (the _prepared log)
            if self._fsync == "commit":
                tlog.append_commit(tid, effect.ops, sync=False)
                batch = self._open_batch
                if batch is None:
                    batch = self._open_batch = _Batch()
                batch.dirty[effect.table] = tlog  # sealed at the end of the event
                # a lazy append, or a marker let through after its fsync barrier (nothing
                # waits for it: a lost marker leaves the prepare record, resolved again)
                if not (effect.lazy or effect.after):
                    batch.holds = batch.needs_sync = True
                    batch.needed.add(effect.table)
            else:
                tlog.append_commit(tid, effect.ops)
        elif kind is ReplaceTable:
            self._log_of(effect.table).replace_all(effect.entries, effect.tid)
        elif kind is DropTable:
            if self._open_batch is not None:
                self._open_batch.dirty.pop(effect.table, None)
            known = self._logs.pop(effect.table, None)
            tlog = known if known is not None else self._open(effect.table, keep=False)
            tlog.delete_files()
        else:
            write_schema(schema_path(self.data_dir), effect.state)

    def _seal(self) -> None:
        """fsync the open batch: here if no event waits (then perform what it held, and seal
        what that opened), else on the fsync thread. A batch with nothing to sync (it waited
        for the one before it, or a dump synced it) performs what it held at once."""
        while self._syncing is None and self._open_batch is not None:
            batch = self._open_batch
            if not batch.needs_sync and batch.holds:
                # What it holds waited for the batch before it (synced now): nothing it
                # appended is needed for them, only lazy appends. Out they go, but the
                # `after` appends, which wait for this batch's own.
                waiting = [e for e in batch.held if type(e) is not DiscCommit]
                batch.held = [e for e in batch.held if type(e) is DiscCommit]
                batch.holds = batch.self_held = False
                self._release(waiting)
                continue
            if not self._open_batch.holds:
                # Lazy appends alone: nothing waits for them. They ride on the next fsync a
                # commit needs (a prepare record, most often), or go after LAZY_SYNC (the
                # maintenance timer comes by), and never on this thread.
                if time.monotonic() - self._open_batch.opened >= LAZY_SYNC:
                    self._seal_to_thread()
                return
            if not self.actor_inbox.empty():
                self._seal_to_thread()
                return
            batch, self._open_batch = self._open_batch, None
            # the deferred logs open the next batch now, before anything this fsync releases
            # appends or drops a table (a DropTable takes its log out of the open batch)
            self._reopen(self._defer_lazy(batch))
            if self._outbox:
                # What was gathered passed its barrier already: out before this thread
                # blocks on an fsync (a prepare's messages to the other participants, whose
                # own fsyncs then run beside ours, not after them).
                self._flush_sends()
            # side by side when there are several; a failure raises: the process ends, the
            # held effects never run
            _side_by_side([tlog.sync for tlog in batch.dirty.values()])
            self._release(batch.held)

    def _seal_to_thread(self) -> None:
        batch, self._open_batch = self._open_batch, None
        if batch is None:
            return
        self._reopen(self._defer_lazy(batch))
        tickets: dict[str, SyncTicket] = {}
        for table, tlog in batch.dirty.items():
            ticket = tlog.sync_begin()  # None: synced since (a dump)
            if ticket is not None:
                tickets[table] = ticket
        if not tickets:
            self._release(batch.held)
            return
        if self._syncer is None:
            self._syncer = _Syncer(self.actor_ref)
        n = next(self._batch_ids)
        self._syncing = (n, batch, tickets)
        self._syncer.submit(n, tickets)

    def _defer_lazy(self, batch: _Batch) -> _Batch | None:
        """Take out of `batch`, which is about to be fsynced for what it holds, the logs that
        hold only lazy appends (a parallel commit's table writes, already durable in the
        prepare records), with the `after` appends (committed markers), which must wait for
        them; returned as a batch of their own for a later fsync. So the fsync a prepare
        record needs does not also sync the table log of the commit before it: one fsync per
        store on a commit's path instead of two side by side, which the disc's journal
        serialises. The lazy appends ride on a later fsync that needs their log, or go after
        LAZY_SYNC counted from the batch's opening, as a batch of lazy appends alone does.
        Nothing waits for them; a crash before their fsync leaves the prepare records,
        which recovery resolves (termination.py)."""
        if not batch.needs_sync or time.monotonic() - batch.opened >= LAZY_SYNC:
            return None
        lazy = [table for table in batch.dirty if table not in batch.needed]
        if not lazy:
            return None
        later = _Batch(opened=batch.opened)
        for table in lazy:
            later.dirty[table] = batch.dirty.pop(table)
        later.held = [e for e in batch.held if type(e) is DiscCommit]  # the `after` appends
        batch.held = [e for e in batch.held if type(e) is not DiscCommit]
        return later

    def _reopen(self, later: _Batch | None) -> None:
        """Put a batch `_defer_lazy` took out back in front of the open batch: its appends
        and held `after` appends came first."""
        if later is None:
            return
        batch = self._open_batch
        if batch is None:
            self._open_batch = later
            return
        for table, tlog in later.dirty.items():
            batch.dirty.setdefault(table, tlog)
        batch.held[:0] = later.held
        batch.opened = min(batch.opened, later.opened)

    def _synced(self, message: _Synced) -> None:
        syncing = self._syncing
        if syncing is None or syncing[0] != message.batch:
            return  # flushed at a stop already
        self._syncing = None
        _n, batch, tickets = syncing
        for table, ticket in tickets.items():
            # an error raises: the process ends and the batch's held effects never run
            batch.dirty[table].sync_end(ticket, message.errors.get(table))
        self._release(batch.held)  # the next batch, if any, is sealed at the end of this event

    def _release(self, held: list[Any]) -> None:
        """Perform effects that waited for their batch's fsync, in order: they are past their
        barrier, even if a later batch is open now (its effects come after them)."""
        for effect in held:
            if type(effect) is DiscCommit:
                self._perform_disc(effect)  # an `after` append: a failure ends the process
                continue
            if self._to_self(effect):
                self._selfq.append(effect.msg)
                continue
            try:
                self._perform_one(effect)
            except Exception:
                log.exception("mnesia: performing %r failed", effect)
        self._perform(())  # the messages to ourselves among them

    def _flush_now(self) -> None:
        """Sync every batch on this thread and perform what they held (a clean stop)."""
        batches = [b for b in (self._syncing and self._syncing[1], self._open_batch) if b]
        self._syncing = self._open_batch = None
        for batch in batches:
            for tlog in batch.dirty.values():
                tlog.sync()
            self._release(batch.held)

    def _open(self, table: str, keep: bool = True) -> TableLog:
        tlog = TableLog.open(tables_dir(self.data_dir), table, fsync=self._fsync)
        if keep:
            self._logs[table] = tlog
        return tlog

    def _log_of(self, table: str) -> TableLog:
        tlog = self._logs.get(table)
        return tlog if tlog is not None else self._open(table)

    def _perform_one(self, effect: Any) -> None:
        """One effect past the group-commit hold and the self-delivery (_perform_list): the
        store's own here, the common ones by ShellEffects."""
        kind = type(effect)
        if kind is Send:
            self._outbox.setdefault((effect.node, effect.name), []).append(effect.msg)
            self._outbox_n += 1
            return
        early = kind is Reply and effect.req_id in self._early
        if self._outbox and kind not in _AFTER_SENDS_OK and not early:
            self._flush_sends()
        if kind is Reply:
            fut = self._pending.pop(effect.req_id, None)
            self._early.discard(effect.req_id)
            if fut is not None and not fut.done():
                if effect.error is not None:
                    fut.set_exception(effect.error)
                else:
                    fut.set_result(effect.value)
        elif kind is MnesiaEvent:
            self._notify(effect)
        elif not self._common_effects().perform(effect):
            log.error("mnesia: unknown effect %r dropped", effect)

    def _notify(self, event: MnesiaEvent) -> None:
        for key, target in list(self._subscribers.items()):
            try:
                if hasattr(target, "tell"):
                    target.tell(event)
                else:
                    target(event)  # a callable runs on this thread: it must not block
            except Exception:
                log.warning("mnesia: subscriber %r failed; dropped", target)
                self._subscribers.pop(key, None)


class Tx:
    """What a transaction function gets: read, write, delete, match and select, each taking
    its locks on every active replica. Raises Restart (handled by Schema.transaction)."""

    def __init__(self, schema: Schema, tid: str) -> None:
        self._schema = schema
        self.tid = tid

    def read(self, table: str, key: Any, lock: str = "read") -> dict[str, Any] | None:
        """The record (None if there is none). `lock="write"` takes the record's write lock
        instead of a read lock (Mnesia's `read(T, K, write)`): for a read-modify-write, so
        that the write needs no second lock round and two such transactions on one key do
        not both read and then conflict upgrading (the younger one waits or restarts at the
        read instead)."""
        if lock == "read":
            return self._schema._call("tx_read", tid=self.tid, table=table, key=key)
        return self._schema._call("tx_read", tid=self.tid, table=table, key=key, lock=lock)

    def wread(self, table: str, key: Any) -> dict[str, Any] | None:
        """`read(table, key, lock="write")` (Mnesia's wread)."""
        return self.read(table, key, lock="write")

    def write(self, table: str, record: dict[str, Any]) -> None:
        self._schema._call("tx_write", tid=self.tid, table=table, record=record)

    def delete(self, table: str, key: Any) -> None:
        self._schema._call("tx_delete", tid=self.tid, table=table, key=key)

    def match(self, table: str, pattern: dict[str, Any]) -> list[dict[str, Any]]:
        return self._schema._call("tx_match", tid=self.tid, table=table, pattern=pattern)

    def select(self, table: str, spec: dict[str, Any]) -> list[Any]:
        return self._schema._call("tx_select", tid=self.tid, table=table, spec=spec)


class Schema:
    """The blocking API of one node's store (Mnesia's module API, in Python).

    `Schema(ref)` with the ActorRef of a started `Mnesia` process. Every call waits in the
    caller's thread for at most `timeout` seconds (Timeout). Errors are MnesiaError
    subclasses (mnesia_like.errors) that say what, where, and what was expected.
    """

    def __init__(self, ref: Any, timeout: float = 30.0, max_restarts: int = 20) -> None:
        self._ref = ref
        self.timeout = timeout
        self.max_restarts = max_restarts

    def _call(self, op: str, /, *, _wait: float | None = None, **args: Any) -> Any:
        fut: Future = Future()
        req = _Request(next(_REQ_IDS), op, args, fut)
        self._ref.tell(req)
        wait = self.timeout if _wait is None else _wait
        deadline = time.monotonic() + wait
        while True:
            # In slices: a request that reached the inbox as the store stopped (a failed
            # fsync ends it) is dropped unanswered, and its caller must not wait out `wait`.
            left = deadline - time.monotonic()
            try:
                return fut.result(max(0.0, min(left, DEAD_STORE_CHECK)))
            except FutureTimeout:
                if left <= DEAD_STORE_CHECK:
                    raise Timeout(f"{op}: no answer from the store within {wait} s") from None
                if not self._ref.is_alive():
                    with contextlib.suppress(FutureTimeout):  # answered as it stopped
                        return fut.result(0)
                    raise MnesiaError(f"{op}: the store stopped before answering") from None

    def _retrying(self, op: str, **args: Any) -> Any:
        """Schema operations lock the schema on every running node: retry on Restart."""
        last: Restart | None = None
        for attempt in range(self.max_restarts):
            try:
                return self._call(op, **args)
            except Restart as exc:
                last = exc
                _backoff(attempt)
        raise Aborted(f"{op} gave up after {self.max_restarts} restarts: {last}")

    # ---- the schema

    def system_info(self, key: str = "all") -> Any:
        """db_nodes, extra_db_nodes, running_db_nodes, tables, local_tables, loaded_tables,
        merge, is_running, inconsistent_nodes; or "all" for a dict of them."""
        return self._call("system_info", key=key)

    def change_config(self, key: str, value: Any) -> list[str]:
        """Only "extra_db_nodes": connect to these nodes and merge schemas; returns the ones
        now running with us. A conflicting schema raises SchemaConflict."""
        return self._call("change_config", key=key, value=list(value))

    def create_table(
        self,
        name: str,
        *,
        attributes: Iterable[str] = ("key", "value"),
        key: str | None = None,
        ram_copies: Iterable[str] | None = None,
        disc_copies: Iterable[str] | None = None,
    ) -> None:
        self._retrying(
            "create_table",
            name=name,
            attributes=list(attributes),
            key=key,
            ram_copies=None if ram_copies is None else list(ram_copies),
            disc_copies=None if disc_copies is None else list(disc_copies),
        )

    def delete_table(self, name: str) -> None:
        self._retrying("delete_table", name=name)

    def add_table_copy(self, table: str, node: str, type: str = "ram_copies") -> None:
        self._retrying("add_table_copy", table=table, node=node, type=type)

    def del_table_copy(self, table: str, node: str) -> None:
        self._retrying("del_table_copy", table=table, node=node)

    def table_info(self, table: str, key: str | None = None) -> Any:
        return self._call("table_info", table=table, key=key)

    def wait_for_tables(self, tables: Iterable[str], timeout: float = 30.0) -> None:
        """Until every table has an active replica reachable from here; TablesNotLoaded
        (naming whom each waits for) after `timeout`."""
        self._call("wait_for_tables", _wait=timeout + 5.0, tables=list(tables), timeout=timeout)

    def status(self) -> dict[str, Any]:
        """running_db_nodes and per-table all/active copies, for the control API."""
        return self._call("status")

    def reload_from(self, node: str) -> None:
        """Drop this node's tables and reload them from `node`'s side (manual healing)."""
        self._call("reload_from", node=node)

    def subscribe(self, target: Any) -> None:
        """Send MnesiaEvent(kind, node, detail) to `target` (an ActorRef, or a callable run
        on the store's thread, which must not block)."""
        self._ref.tell(_Subscribe(target, True))

    def unsubscribe(self, target: Any) -> None:
        self._ref.tell(_Subscribe(target, False))

    # ---- dirty operations

    def dirty_read(self, table: str, key: Any) -> dict[str, Any] | None:
        return self._call("dirty_read", table=table, key=key)

    def dirty_write(self, table: str, record: dict[str, Any]) -> None:
        self._call("dirty_write", table=table, record=record)

    def dirty_delete(self, table: str, key: Any) -> None:
        self._call("dirty_delete", table=table, key=key)

    def dirty_match(self, table: str, pattern: dict[str, Any]) -> list[dict[str, Any]]:
        return self._call("dirty_match", table=table, pattern=pattern)

    def dirty_select(self, table: str, spec: dict[str, Any]) -> list[Any]:
        return self._call("dirty_select", table=table, spec=spec)

    # Mnesia's names without the prefix, as the public API (mnesia_like/__init__.py) lists them
    read = dirty_read
    write = dirty_write

    # ---- transactions

    def transaction(self, fn: Callable[[Tx], T], retries: int | None = None) -> T:
        """Run `fn(tx)` as a transaction and return its result once committed.

        A lock conflict with an older transaction, a participant going down or a stale
        replica set restarts it (fn runs again: keep it free of side effects), keeping its
        age so that it eventually wins; after `retries` restarts it raises Aborted. An
        exception from fn aborts the transaction (nothing is written) and propagates.
        """
        limit = self.max_restarts if retries is None else retries
        prev: str | None = None
        last: Restart | None = None
        for attempt in range(limit + 1):
            # Begun without waiting: the store handles its mailbox in order, so the begin is
            # there before the first operation. A restart names the attempt before (its age).
            tid = f"tx-{uuid.uuid4().hex}"
            self._ref.tell(
                _Request(next(_REQ_IDS), "tx_begin", {"tid": tid, "prev": prev}, Future())
            )
            prev = tid
            try:
                result = fn(Tx(self, tid))
                self._call("tx_commit", tid=tid)
                return result
            except Restart as exc:
                last = exc
                _backoff(attempt)
            except BaseException:
                with contextlib.suppress(Exception):
                    self._call("tx_abort", tid=tid)
                raise
        raise Aborted(f"gave up after {limit} restarts: {last.reason if last else '?'}")


def _backoff(attempt: int) -> None:
    # a little random so that two restarting transactions do not meet again in lockstep
    time.sleep(_JITTER.uniform(0.0, min(0.002 * 2**attempt, 0.2)))
