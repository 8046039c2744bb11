"""One established connection to a peer: its state, its write queue, and its read step.

No thread of its own. The kernel's I/O loop (ioloop.py) reads it when its socket is readable
and flushes its queue when the socket can take more; senders write from their own threads.

The write path: a sender whose connection is idle writes straight to the (non-blocking)
socket from its own thread: no thread hand-off, which is what keeps a call round trip short.
When the connection is busy, or that write was partial, frames queue up and the loop sends
everything queued in one `send` when the socket is writable (coalescing: this is what gives
the throughput). The queue has a byte limit; past it, `write(block=True)` waits, as Erlang
suspends a sender on a busy dist port, until the loop drains it below the limit or the
connection closes (a frozen peer is declared down by ticks after net_ticktime, which frees
every waiter). Frames written with `block=False` (replies, signals, ticks, pongs) never wait,
and nothing ever waits on the loop's own thread: the loop must serve every other peer.
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
# One send of a flush is at most this much: the kernel takes what fits in the socket buffer,
# and a bigger slice would only be copied for nothing.
_SEND_SLICE = 4 << 20


class _Writer:
    """See the module docstring. `request_flush()` asks the I/O loop to flush (from any
    thread); the loop calls `flush()`. Every field below is guarded by `_cond`, except that
    the holder of the writing turn (`_busy`) alone touches `_out` outside it."""

    def __init__(
        self,
        sock: socket.socket,
        limit: int,
        seal: Callable[[bytes], bytes] | None = None,
    ) -> None:
        self._sock = sock
        self._limit = limit
        # With TLS, `seal` turns frames into records. Only the holder of the writing turn
        # seals, so records go out in the order they were sealed; `_out` holds wire bytes
        # (records, with TLS) a send could not finish, which go out before anything queued.
        self._seal = seal
        self._cond = threading.Condition(threading.Lock())
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._out = b""
        self._out_pos = 0
        self._busy = False  # a thread (the loop or a direct sender) is writing now
        self._armed = False  # the loop owes this writer a flush (asked, or waiting to write)
        self._closed = False
        self._release_sock = False  # closed while busy: the turn's holder closes the socket
        self.last_sent = time.monotonic()
        self.error: OSError | None = None
        self.request_flush: Callable[[], None] = lambda: None
        self.loop_thread: threading.Thread | None = None

    @property
    def queued(self) -> int:
        """Bytes queued or partly sent, not yet on the wire."""
        return self._pending_bytes + len(self._out) - self._out_pos

    def write(self, data: bytes, block: bool = True) -> bool:
        """Queue or write `data`; False if the connection is closed (the data is dropped)."""
        cond = self._cond
        with cond:
            if self._closed:
                return False
            if self._busy or self._pending or self._out:
                if block and self.queued >= self._limit and not self._on_loop():
                    cond.wait_for(lambda: self._closed or self.queued < self._limit)
                    if self._closed:
                        return False
                self._pending.append(data)
                self._pending_bytes += len(data)
                ask = not self._busy and not self._armed
                self._armed = self._armed or ask
            else:
                self._busy = True
                ask = None
        if ask is not None:
            if ask:
                self.request_flush()
            return True
        return self._direct(data)

    def _on_loop(self) -> bool:
        return self.loop_thread is threading.current_thread()

    def _direct(self, data: bytes) -> bool:
        """The writing turn is ours and nothing is queued: send from this thread."""
        sent = 0
        try:
            if self._seal is not None:
                data = self._seal(data)
            sent = self._sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self._end_turn_failed(exc)
            return False
        except Exception as exc:  # the TLS state failed: end the connection, say why
            self._end_turn_failed(OSError(f"TLS: {exc}"))
            return False
        with self._cond:
            self._busy = False
            if sent:
                self.last_sent = time.monotonic()
            if sent < len(data):
                self._out, self._out_pos = data, sent
            ask = bool(self._out or self._pending) and not self._armed and not self._closed
            self._armed = self._armed or ask
            self._after_turn()
        if ask:
            self.request_flush()
        return True

    def enqueue(self, data: bytes) -> None:
        """Queue `data` without writing it from this thread; the loop sends it once the
        connection is added to it. Used for the welcome: it must go out before any frame,
        yet only once the connection is published (see NetKernel.hello)."""
        with self._cond:
            self._pending.append(data)
            self._pending_bytes += len(data)
            self._armed = True  # adding the connection to the loop flushes it

    def flush(self) -> bool:
        """The loop's turn: send what is queued, as far as the socket takes it. True if some
        is left (the loop then waits for the socket to be writable)."""
        cond = self._cond
        with cond:
            if self._closed or self._busy:
                # Busy: a direct sender holds the turn and asks again if it leaves a queue.
                self._armed = False
                return False
            if not (self._pending or self._out):
                self._armed = False
                return False
            self._busy = True
            batch, self._pending, self._pending_bytes = self._pending, [], 0
            out, pos = self._out, self._out_pos
        sent_any = False
        try:
            if batch:
                data = batch[0] if len(batch) == 1 else b"".join(batch)
                if self._seal is not None:
                    data = self._seal(data)
                out = (out[pos:] + data) if pos < len(out) else data
                pos = 0
            view = memoryview(out)
            try:
                while pos < len(out):
                    sent = self._sock.send(view[pos : pos + _SEND_SLICE])
                    if sent <= 0:
                        break
                    pos += sent
                    sent_any = True
            except (BlockingIOError, InterruptedError):
                pass
            finally:
                view.release()
        except OSError as exc:
            self._end_turn_failed(exc)
            return False
        except Exception as exc:  # the TLS state failed
            self._end_turn_failed(OSError(f"TLS: {exc}"))
            return False
        with cond:
            self._busy = False
            if pos < len(out):
                self._out, self._out_pos = out, pos
            else:
                self._out, self._out_pos = b"", 0
            if sent_any:
                self.last_sent = time.monotonic()
            more = bool(self._out or self._pending) and not self._closed
            self._armed = more
            cond.notify_all()  # senders waiting on the byte limit
            self._after_turn()
        return more

    def _end_turn_failed(self, exc: OSError) -> None:
        """The socket (or TLS) failed under our turn: close the writer, keep the reason,
        and shut the socket down so that the loop reads EOF and reports the loss once."""
        with self._cond:
            self._busy = False
            if self.error is None and not self._closed:
                self.error = exc
            self._closed = True
            self._cond.notify_all()
            self._after_turn()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self.request_flush()  # wakes the loop, which sees the writer closed

    def _after_turn(self) -> None:
        """With _cond held, the turn released: close the socket if that was left to us."""
        if self._release_sock and not self._busy:
            self._release_sock = False
            with contextlib.suppress(OSError):
                self._sock.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Stop writing; waiters on the byte limit return False."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def close_socket(self) -> None:
        """Close the writer and the socket, now or, if a sender is mid-write, when it is
        done (so that its fd is never reused under it)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            self._release_sock = True
            self._after_turn()


class Connection:
    """An authenticated connection to `node`. The kernel owns it; the I/O loop calls back
    the kernel's `_on_frame(conn, frame)` for each frame and `_connection_lost(conn, reason)`
    once."""

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
        sock.setblocking(False)
        self.sock = sock
        self._rest = rest
        self._decoder = FrameDecoder(max_frame)
        self._on_frame = on_frame
        self._on_lost = on_lost
        self._stream = stream
        self._finished = False
        self._writer = _Writer(sock, max_queue, stream.seal if stream is not None else None)
        self._loop: Any = None  # the IoLoop, once added
        self.on_tick: Any = None  # its kernel's tick handler (a loop may serve many kernels)

    def __repr__(self) -> str:
        way = "to" if self.outgoing else "from"
        return f"<Connection {self.local} {way} {self.node} at {self.address}>"

    @property
    def last_sent(self) -> float:
        return self._writer.last_sent

    @property
    def queued(self) -> int:
        """Bytes waiting to go out (for tests and metrics)."""
        return self._writer.queued

    def attach(self, loop: Any) -> None:
        """Called by the loop, on its thread, as it adds this connection."""
        self._loop = loop
        self._writer.loop_thread = loop.thread
        self._writer.request_flush = lambda: loop.flush_soon(self)

    def start(self, loop: Any) -> None:
        """Hand the connection to `loop` (any thread): from then on it is read and flushed."""
        loop.add(self)

    def write(self, data: bytes, block: bool = True) -> bool:
        """Send one or more encoded frames; False (dropped) if the connection is closed."""
        return self._writer.write(data, block)

    def enqueue(self, data: bytes) -> None:
        """Queue `data` to go out first, once the connection starts (see _Writer.enqueue)."""
        self._writer.enqueue(data)

    def send_tick(self) -> None:
        self._writer.write(TICK, block=False)

    def flush(self) -> bool:
        """The loop's call: see _Writer.flush."""
        return self._writer.flush()

    @property
    def writer_closed(self) -> bool:
        return self._writer.closed

    def close(self) -> None:
        """Stop writing and have the loop report the loss and clean up (any thread)."""
        self._writer.close()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        loop = self._loop
        if loop is not None:
            loop.close_soon(self)

    # ------------------------------------------------------------------ the loop's side

    def take_rest(self) -> None:
        """Feed the bytes that came with the handshake (the loop, as it adds us)."""
        data, self._rest = self._rest, b""
        if data:
            self.confirmed = True
            self._deliver(data)

    def input_waiting(self) -> bool:
        """Bytes from the peer wait unread in the socket (a peek: nothing is consumed)."""
        try:
            return bool(self.sock.recv(1, socket.MSG_PEEK))  # b"": the peer closed
        except (OSError, ValueError):  # nothing waiting (BlockingIOError), or gone
            return False

    def readable(self) -> bool:
        """The socket is readable: read once and deliver the frames. False once the
        connection is over (the loop then calls `finish`)."""
        try:
            data = self.sock.recv(RECV_SIZE)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            return False
        if not data:
            return False
        self.last_received = time.monotonic()
        self.confirmed = True
        try:
            if self._stream is not None:
                data = self._stream.open(data)
            self._deliver(data)
        except TlsStreamError as exc:
            log.warning(
                "dist %s: TLS error from %s at %s (%s); closing the connection",
                self.local,
                self.node,
                self.address,
                exc,
            )
            return False
        except FrameError as exc:
            log.warning(
                "dist %s: bad frame from %s at %s (%s); closing the connection",
                self.local,
                self.node,
                self.address,
                exc,
            )
            return False
        return True

    def _deliver(self, data: bytes) -> None:
        on_frame = self._on_frame
        for frame in self._decoder.feed(data):
            if frame is not None:
                on_frame(self, frame)

    @property
    def finished(self) -> bool:
        """True once the loop (or the kernel's stop) has finished it."""
        return self._finished

    def finish(self) -> None:
        """The loop dropped us: report the loss (once), release the socket."""
        if self._finished:
            return
        self._finished = True
        try:
            self._on_lost(self, "connection_closed")
        except Exception:  # a bug of ours: never let it kill the loop, but do say it
            log.exception("dist %s: reporting the loss of %s failed", self.local, self.node)
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self._writer.close_socket()
