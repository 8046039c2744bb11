"""Mnesia: the actor shell around MnesiaCore, and Schema, the blocking public API.

The core decides; this Process does the I/O. It feeds the core the NetKernel's NodeUp/NodeDown,
the messages sent to the registered name MnesiaCore.NAME, its timers (monitors/core_timers.py)
and the API requests, and performs the effects in order: messages through the NetKernel, the
disc copies through `disc_log.TableLog` (one per table), the schema through `schema_file`,
events to subscribers.

Disc effects are not guarded like the others: if an append or a snapshot fails, the exception
ends the process (let it crash) before any later effect of the same event runs, so no ack
leaves for a commit that is not on disc. The supervisor restarts the store, which reloads.

`Schema` is what user code holds: every method sends a request to the shell and waits on a
future in the caller's thread; the actor's thread never blocks on a caller.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from mnesia_like.core import MnesiaCore
from mnesia_like.disc_log import TableLog, tables_dir
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
from monitors.core_timers import CoreTimers, Fired
from monitors.dist import Message, NetKernel, NodeDown, NodeUp
from monitors.effects import CancelTimer, Connect, Disconnect, Log, Send, SetTimer
from supervisors import Process

log = logging.getLogger("mnesia_like")

T = TypeVar("T")
_REQ_IDS = itertools.count(1)  # next() on a count is atomic under the GIL
MAINTENANCE = 1.0  # s: dumps of long logs, and fsync for fsync=<seconds>


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


class Mnesia(Process):
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
        self._fsync = fsync
        self._force_load = force_load
        self._core_options = core_options
        self._timers = CoreTimers(self)
        self._pending: dict[int, Future] = {}
        self._subscribers: dict[int, Any] = {}
        self._logs: dict[str, TableLog] = {}
        self._connecting: set[str] = set()
        self.core: MnesiaCore | None = None

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
        self.kernel.register(MnesiaCore.NAME, self.actor_ref)
        self.kernel.monitor_nodes(self.actor_ref)
        self._perform(self.core.start(time.monotonic()))
        for peer in self.kernel.nodes():  # connected before we subscribed
            self._perform(self.core.nodeup(peer, self.kernel.peer_creation(peer), time.monotonic()))
        self._timers.set("_maintenance", MAINTENANCE)

    def on_stop(self) -> None:
        if self.core is not None:
            with contextlib.suppress(Exception):
                self._perform(self.core.stop(time.monotonic()))
        self._shutdown()

    def on_failure(self, *_exc_info: Any) -> None:
        self._shutdown()

    def on_kill(self) -> None:
        self._shutdown()

    def _shutdown(self) -> None:
        self._timers.clear()
        kernel = getattr(self, "kernel", None)
        if kernel is not None:
            with contextlib.suppress(Exception):
                kernel.demonitor_nodes(self.actor_ref)
                kernel.unregister(MnesiaCore.NAME)
        for tlog in self._logs.values():
            with contextlib.suppress(Exception):
                tlog.close()
        self._logs.clear()
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(MnesiaError("the store stopped before answering"))
        self._pending.clear()

    # ---------------------------------------------------------------------- events

    def on_receive(self, message: Any) -> Any:
        core = self.core
        assert core is not None
        now = time.monotonic()
        if isinstance(message, _Request):
            self._pending[message.req_id] = message.future
            self._perform(core.request(message.req_id, message.op, message.args, now))
        elif isinstance(message, Message):
            self._perform(core.receive(message.node, message.msg, now))
        elif isinstance(message, NodeUp):
            self._perform(core.nodeup(message.node, message.creation, now))
        elif isinstance(message, NodeDown):
            self._connecting.discard(message.node)
            self._perform(core.nodedown(message.node, message.reason, now))
        elif isinstance(message, Fired):
            if self._timers.fired(message):
                if message.key == "_maintenance":
                    self._maintenance()
                else:
                    self._perform(core.timer(message.key, now, message.data))
        elif isinstance(message, _Subscribe):
            if message.add:
                self._subscribers[id(message.target)] = message.target
            else:
                self._subscribers.pop(id(message.target), None)
        elif isinstance(message, tuple) and message and message[0] == "connect-done":
            self._connecting.discard(message[1])
        else:
            return super().on_receive(message)
        return None

    def _maintenance(self) -> None:
        for table, tlog in list(self._logs.items()):
            try:
                due = tlog.sync_due
                if due() if callable(due) else due:
                    tlog.sync()
                tlog.maybe_dump()
            except Exception:
                log.exception("mnesia: maintenance of the disc copy of %r failed", table)
        self._timers.set("_maintenance", MAINTENANCE)

    # ---------------------------------------------------------------------- effects

    def _perform(self, effects: Iterable[Any]) -> None:
        for effect in effects:
            kind = type(effect)
            if kind in (DiscCommit, ReplaceTable, DropTable, PersistSchema):
                self._perform_disc(effect)  # a failure ends the process: see the docstring
                continue
            try:
                self._perform_one(effect)
            except Exception:
                log.exception("mnesia: performing %r failed", effect)

    def _perform_disc(self, effect: Any) -> None:
        kind = type(effect)
        if kind is DiscCommit:
            self._log_of(effect.table).append_commit(effect.tid, effect.ops)
        elif kind is ReplaceTable:
            self._log_of(effect.table).replace_all(effect.entries, effect.tid)
        elif kind is DropTable:
            tlog = self._logs.pop(effect.table, None) or self._open(effect.table, keep=False)
            tlog.delete_files()
        else:
            write_schema(schema_path(self.data_dir), effect.state)

    def _open(self, table: str, keep: bool = True) -> TableLog:
        tlog = TableLog.open(tables_dir(self.data_dir), table, fsync=self._fsync)
        if keep:
            self._logs[table] = tlog
        return tlog

    def _log_of(self, table: str) -> TableLog:
        tlog = self._logs.get(table)
        return tlog if tlog is not None else self._open(table)

    def _perform_one(self, effect: Any) -> None:
        kind = type(effect)
        if kind is Reply:
            fut = self._pending.pop(effect.req_id, None)
            if fut is not None and not fut.done():
                if effect.error is not None:
                    fut.set_exception(effect.error)
                else:
                    fut.set_result(effect.value)
        elif kind is Send:
            self.kernel.send(effect.node, effect.name, effect.msg)
        elif kind is SetTimer:
            self._timers.set(effect.key, effect.after, effect.data)
        elif kind is CancelTimer:
            self._timers.cancel(effect.key)
        elif kind is Connect:
            self._connect(effect.node)
        elif kind is Disconnect:
            self.kernel.disconnect(effect.node)
        elif kind is Log:
            log.log(effect.level, "mnesia: %s %s", effect.text, effect.fields)
        elif kind is MnesiaEvent:
            self._notify(effect)
        else:
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

    def _connect(self, node: str) -> None:
        if node in self._connecting:
            return
        self._connecting.add(node)

        def attempt() -> None:
            try:
                self.kernel.connect(node)
            except Exception as exc:
                log.debug("mnesia: connect to %s failed: %s", node, exc)
            with contextlib.suppress(Exception):
                self.actor_ref.tell(("connect-done", node))

        threading.Thread(target=attempt, name=f"mnesia-connect-{node}", daemon=True).start()


class Tx:
    """What a transaction function gets: read, write, delete, match and select, each taking
    its locks on every active replica. Raises Restart (handled by Schema.transaction)."""

    def __init__(self, schema: Schema, tid: str) -> None:
        self._schema = schema
        self.tid = tid

    def read(self, table: str, key: Any) -> dict[str, Any] | None:
        return self._schema._call("tx_read", tid=self.tid, table=table, key=key)

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
        try:
            return fut.result(wait)
        except FutureTimeout:
            raise Timeout(f"{op}: no answer from the store within {wait} s") from None

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

    # Mnesia's names without the prefix, as DESIGN.md lists them
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
        age = None
        last: Restart | None = None
        for attempt in range(limit + 1):
            begun = self._call("tx_begin", age=age)
            tid, age = begun["tid"], begun["age"]
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
    time.sleep(random.uniform(0.0, min(0.002 * 2**attempt, 0.2)))
