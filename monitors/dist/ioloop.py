"""One thread, one selector for all of a NetKernel's established connections: reads, queued
writes and ticks.

Why: a reader and a writer thread per connection made a core node with 1,000 attached
executors hold about 2,000 threads. Here a connection is a selector entry and a tick-heap
entry. Senders still write from their own threads while the connection is idle (see
connection.py); the loop flushes what they had to queue, when the socket can take it.

What runs on this thread must never wait on a peer: reads are non-blocking, frames are
delivered with `tell` into mailboxes or a call's reply slot (the kernel's `_on_frame`, as
the reader threads did), writes from here never wait on a full queue, and the kernel's tick
and teardown code takes only short locks. Handshakes are not done here: the hello decision
may wait for a name-check ping (name_check.py) that this loop must be free to answer, so
incoming ones run on the pending loop (pending.py) and outgoing ones on their connect thread.

Several kernels may share one loop (a `rabbitry swarm` process: hundreds of members, one
thread and one epoll for all their connections instead of a thread each). The loop does not
know kernels: each connection carries its kernel's tick handler, and a kernel that stops on a
shared loop closes its own connections and waits for the loop to finish them.

Ticks: each connection has one entry in a heap, due at its `tick_due`; the loop runs every
entry that is due (the kernel's `on_tick`) and re-arms it. It wakes at most every
`_TICK_GRAIN` for ticks, so that 1,000 connections' ticks cost tens of wake-ups a second, not
thousands, and a tick or a timeout is never later than that.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable

from monitors.dist.connection import Connection

log = logging.getLogger("monitors.dist")

_TICK_GRAIN = 0.01  # ticks due within this of each other run in one wake-up
_MAX_SLEEP = 1.0


class IoLoop:
    """The loop. `add`, `flush_soon`, `close_soon` and `stop` may be called from any thread;
    they queue an operation for the loop's thread, which alone touches the selector."""

    def __init__(
        self, name: str, on_tick: Callable[[Connection, float], None] | None = None
    ) -> None:
        """`on_tick(conn, now)` runs each due tick; a connection's own `on_tick`, when set,
        wins, so that one loop can serve the connections of several kernels (a swarm
        process shares one loop among its members: see `NetKernel(io_loop=...)`)."""
        self.name = name
        self._on_tick = on_tick
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._ops: deque[tuple[str, Connection]] = deque()
        self._ops_lock = threading.Lock()
        self._woken = False  # a wake byte is on its way: no need for another
        self._conns: dict[Connection, int] = {}  # -> the events it is registered for
        self._ticks: list[tuple[float, int, Connection]] = []
        self._seq = itertools.count()
        self._stopping = False
        self.thread = threading.Thread(target=self._run, name=f"dist-io {name}", daemon=True)

    def __len__(self) -> int:
        return len(self._conns)

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """End the loop; the connections it still holds are finished (reported lost)."""
        self._stopping = True
        self._wake()
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(timeout)

    # ------------------------------------------------------------------ any thread

    def add(self, conn: Connection) -> None:
        self._post("add", conn)

    def flush_soon(self, conn: Connection) -> None:
        self._post("flush", conn)

    def close_soon(self, conn: Connection) -> None:
        self._post("close", conn)

    def _post(self, op: str, conn: Connection) -> None:
        with self._ops_lock:
            self._ops.append((op, conn))
            if self._woken:
                return
            self._woken = True
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # full: a wake-up is pending anyway
            self._wake_w.send(b"x")

    # ------------------------------------------------------------------ the loop's thread

    def _run(self) -> None:
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        try:
            while not self._stopping:
                try:
                    self._once()
                except Exception:  # a bug of ours: say it, keep serving the others
                    log.exception("dist %s: the I/O loop failed; going on", self.name)
                    time.sleep(0.01)
        finally:
            self._close_all()

    def _once(self) -> None:
        timeout = _MAX_SLEEP
        if self._ticks:
            timeout = min(timeout, max(self._ticks[0][0] - time.monotonic(), _TICK_GRAIN))
        try:
            events = self._selector.select(timeout)
        except InterruptedError:
            return
        for key, mask in events:
            conn = key.data
            if conn is None:
                self._drain_wake()
                continue
            if conn not in self._conns:
                continue
            if mask & selectors.EVENT_WRITE:
                self._flush(conn)
            if mask & selectors.EVENT_READ and conn in self._conns and not conn.readable():
                self._drop(conn)
        self._run_ops()
        self._run_ticks(time.monotonic())

    def _drain_wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_r.recv(4096)

    def _run_ops(self) -> None:
        with self._ops_lock:
            ops, self._ops = self._ops, deque()
            self._woken = False
        for op, conn in ops:
            if op == "add":
                self._add(conn)
            elif conn not in self._conns:
                continue  # not added yet (its add flushes it) or already gone
            elif op == "flush":
                self._flush(conn)
            else:
                self._drop(conn)

    def _add(self, conn: Connection) -> None:
        if self._stopping or conn.writer_closed:
            conn.finish()
            return
        conn.attach(self)
        try:
            self._selector.register(conn.sock, selectors.EVENT_READ, conn)
        except (OSError, ValueError) as exc:  # the socket closed before it got here
            log.debug("dist %s: %r closed before it was added: %s", self.name, conn, exc)
            conn.finish()
            return
        self._conns[conn] = selectors.EVENT_READ
        heapq.heappush(self._ticks, (conn.tick_due, next(self._seq), conn))
        try:
            conn.take_rest()
        except Exception as exc:  # a bad frame among the handshake's leftovers
            log.warning("dist %s: bad first bytes from %r: %s", self.name, conn, exc)
            self._drop(conn)
            return
        self._flush(conn)

    def _flush(self, conn: Connection) -> None:
        more = conn.flush()
        if conn.writer_closed:
            self._drop(conn)
            return
        want = selectors.EVENT_READ | (selectors.EVENT_WRITE if more else 0)
        if self._conns.get(conn) != want:
            try:
                self._selector.modify(conn.sock, want, conn)
            except (OSError, ValueError, KeyError):
                self._drop(conn)
                return
            self._conns[conn] = want

    def _drop(self, conn: Connection) -> None:
        if self._conns.pop(conn, None) is not None:
            with contextlib.suppress(OSError, ValueError, KeyError):
                self._selector.unregister(conn.sock)
        conn.finish()

    def _run_ticks(self, now: float) -> None:
        ticks = self._ticks
        while ticks and ticks[0][0] <= now:
            _, _, conn = heapq.heappop(ticks)
            if conn not in self._conns:
                continue
            try:
                on_tick = conn.on_tick or self._on_tick
                if on_tick is not None:
                    on_tick(conn, now)
            except Exception:
                log.exception("dist %s: tick for %s failed", self.name, conn.node)
            if conn.down is None and conn in self._conns:
                heapq.heappush(
                    ticks, (max(conn.tick_due, now + _TICK_GRAIN), next(self._seq), conn)
                )

    def _close_all(self) -> None:
        for conn in list(self._conns):
            self._drop(conn)
        with self._ops_lock:
            ops, self._ops = self._ops, deque()
        for op, conn in ops:
            if op == "add":
                conn.finish()
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()
