"""One established connection to a peer: a reader thread and a coalescing writer.

Why threads, not asyncio: every message ends in a pykka mailbox or comes from a caller's
thread, so an event loop would add a hop (call_soon_threadsafe) each way. A reader thread per
connection delivers straight into mailboxes; a cluster has tens of peers, not thousands.

The writer: a sender whose connection is idle writes straight to the socket from its own
thread, non-blocking (no thread hand-off: this is what keeps a call round trip short). When
the socket is busy, or that write was partial, frames queue up and the writer thread sends
everything queued in one sendall (coalescing: this is what gives the throughput). The queue
has a byte limit; past it, `write(block=True)` waits, as Erlang suspends a sender on a busy
dist port. Frames written from reader or handler threads (replies, signals) never wait.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from monitors.dist.frames import TICK, FrameDecoder, FrameError
from monitors.dist.ticks import TickCore
from monitors.dist.tls_stream import TlsStream, TlsStreamError

log = logging.getLogger("monitors.dist")

RECV_SIZE = 256 * 1024
_DONTWAIT = getattr(socket, "MSG_DONTWAIT", 0)


class _Writer:
    """See the module docstring. `on_error` is called once if the socket fails."""

    def __init__(
        self,
        sock: socket.socket,
        limit: int,
        name: str,
        seal: Callable[[bytes], bytes] | None = None,
    ) -> None:
        self._sock = sock
        self._limit = limit
        # With TLS, `seal` turns frames into records. Only the holder of the writing turn
        # (`_busy`) seals, so records go out in the order they were sealed; `_sealed` holds
        # records a direct send could not finish, which go out before anything queued.
        self._seal = seal
        self._sealed = b""
        self._cond = threading.Condition(threading.Lock())
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._busy = False  # a thread (the writer or a direct sender) is writing now
        self._closed = False
        self.last_sent = time.monotonic()
        self.error: OSError | None = None
        self._thread = threading.Thread(target=self._run, name=f"dist-writer {name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def write(self, data: bytes, block: bool = True) -> bool:
        """Queue or write `data`; False if the connection is closed (the data is dropped)."""
        cond = self._cond
        with cond:
            if self._closed:
                return False
            if self._busy or self._pending or self._sealed:
                if block and self._pending_bytes >= self._limit:
                    cond.wait_for(lambda: self._closed or self._pending_bytes < self._limit)
                    if self._closed:
                        return False
                self._pending.append(data)
                self._pending_bytes += len(data)
                if not self._busy:
                    cond.notify_all()
                return True
            self._busy = True
        if self._seal is not None:
            try:
                data = self._seal(data)
            except Exception as exc:
                self._fail(OSError(f"TLS: {exc}"))
                return False
        sent = 0
        if _DONTWAIT:
            try:
                sent = self._sock.send(data, _DONTWAIT)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                self._fail(exc)
                return False
        with cond:
            self._busy = False
            if sent:
                self.last_sent = time.monotonic()
            if sent < len(data):
                rest = data[sent:]
                if self._seal is not None:
                    self._sealed = rest
                else:
                    self._pending.insert(0, rest)
                self._pending_bytes += len(rest)
            if self._pending or self._sealed or self._closed:
                cond.notify_all()
        return True

    def enqueue(self, data: bytes) -> None:
        """Queue `data` for the writer thread, never writing it from this thread. Used for
        the welcome: it must go out before any frame, yet only once the connection is
        published (the thread starts after that)."""
        with self._cond:
            self._pending.append(data)
            self._pending_bytes += len(data)
            self._cond.notify_all()

    def _run(self) -> None:
        cond = self._cond
        sock = self._sock
        while True:
            with cond:
                while (self._busy or not (self._pending or self._sealed)) and not self._closed:
                    cond.wait()
                if self._closed:
                    return
                batch, self._pending, self._pending_bytes = self._pending, [], 0
                sealed, self._sealed = self._sealed, b""
                self._busy = True
                cond.notify_all()  # senders waiting on the byte limit
            data = batch[0] if len(batch) == 1 else b"".join(batch)
            try:
                if self._seal is not None:
                    data = sealed + self._seal(data)
                sock.sendall(data)
            except OSError as exc:
                self._fail(exc)
                return
            except Exception as exc:  # the TLS state failed: end the connection, say why
                self._fail(OSError(f"TLS: {exc}"))
                return
            with cond:
                self._busy = False
                self.last_sent = time.monotonic()

    def _fail(self, exc: OSError) -> None:
        with self._cond:
            if self.error is None and not self._closed:
                self.error = exc
            self._closed = True
            self._busy = False
            self._cond.notify_all()
        # Wake the reader, which reports the connection lost (once, with one reason).
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def join(self, timeout: float) -> None:
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)


class Connection:
    """An authenticated connection to `node`. The kernel owns it; it calls back the kernel's
    `_on_frame(conn, frame)` for each frame and `_connection_lost(conn, reason)` once."""

    def __init__(
        self,
        sock: socket.socket,
        *,
        node: str,
        creation: int,
        address: str,
        outgoing: bool,
        net_ticktime: float,
        max_frame: int,
        max_queue: int,
        rest: bytes,
        confirmed: bool,
        on_frame: Callable[[Connection, dict[str, Any]], None],
        on_lost: Callable[[Connection, str], None],
        local: str,
        stream: TlsStream | None = None,
    ) -> None:
        self.node = node
        self.creation = creation
        self.address = address
        self.outgoing = outgoing
        self.local = local
        self.max_frame = max_frame
        # Guards `down` and the tables below against the teardown swapping them out.
        self.lock = threading.Lock()
        self.down: str | None = None
        # Calls we made on this connection: id -> reply slot.
        self.calls: dict[int, Any] = {}
        # Links between our processes and the peer's (see remote.py):
        # (how the peer names our process, how we name the peer's) -> (our ref, RemoteRef)
        self.links: dict[tuple[str, str], tuple[Any, Any]] = {}
        # (our process's urn, how we name the peer's) -> how the peer names ours
        self.link_keys: dict[tuple[str, str], str] = {}
        self.mon_out: dict[int, tuple[Any, Any]] = {}  # our monitors: id -> (watcher, RemoteRef)
        self.mon_in: dict[int, Any] = {}  # the peer's monitors of our processes: id -> our ref
        # The acceptor side is "set up" once the connector's first bytes arrive after welcome.
        self.confirmed = confirmed
        now = time.monotonic()
        self.last_received = now
        self.ticks = TickCore(net_ticktime, now)
        self.tick_due = now + self.ticks.interval
        self._sock = sock
        self._rest = rest
        self._on_frame = on_frame
        self._on_lost = on_lost
        self._stream = stream
        self._writer = _Writer(
            sock, max_queue, f"{local}->{node}", stream.seal if stream is not None else None
        )
        self._reader = threading.Thread(
            target=self._read_loop, name=f"dist-reader {local}<-{node}", daemon=True
        )

    def __repr__(self) -> str:
        way = "to" if self.outgoing else "from"
        return f"<Connection {self.local} {way} {self.node} at {self.address}>"

    @property
    def last_sent(self) -> float:
        return self._writer.last_sent

    def start(self) -> None:
        self._writer.start()
        self._reader.start()

    def write(self, data: bytes, block: bool = True) -> bool:
        """Send one or more encoded frames; False (dropped) if the connection is closed."""
        return self._writer.write(data, block)

    def enqueue(self, data: bytes) -> None:
        """Queue `data` to go out first, once the connection starts (see _Writer.enqueue)."""
        self._writer.enqueue(data)

    def send_tick(self) -> None:
        self._writer.write(TICK, block=False)

    def close(self) -> None:
        """Stop writing and wake the reader (which then reports the loss and cleans up)."""
        self._writer.close()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)

    def join(self, timeout: float) -> None:
        if self._reader.is_alive() and self._reader is not threading.current_thread():
            self._reader.join(timeout)

    def _read_loop(self) -> None:
        sock = self._sock
        decoder = FrameDecoder(self.max_frame)
        on_frame = self._on_frame
        stream = self._stream
        monotonic = time.monotonic
        try:
            data = self._rest
            self._rest = b""
            if data:
                self.confirmed = True
            while True:
                if data:
                    for frame in decoder.feed(data):
                        if frame is not None:
                            on_frame(self, frame)
                data = sock.recv(RECV_SIZE)
                if not data:
                    break
                self.last_received = monotonic()
                self.confirmed = True
                if stream is not None:
                    data = stream.open(data)
        except FrameError as exc:
            log.warning(
                "dist %s: bad frame from %s at %s (%s); closing the connection",
                self.local,
                self.node,
                self.address,
                exc,
            )
        except TlsStreamError as exc:
            log.warning(
                "dist %s: TLS error from %s at %s (%s); closing the connection",
                self.local,
                self.node,
                self.address,
                exc,
            )
        except OSError:
            pass
        except Exception:  # a bug of ours: never let it kill the node, but do say it
            log.exception("dist %s: reader for %s failed", self.local, self.node)
        finally:
            self._on_lost(self, "connection_closed")
            self._writer.close()
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            self._writer.join(2.0)
            sock.close()
