"""One hardened HTTP(S) server for the node's small listeners: the control API (and its
management page), /metrics and the failover status page.

Why: `ThreadingHTTPServer` starts a thread per connection and never times out an idle one,
and HTTPS dropped its timeout once the TLS handshake was done: 60 idle connections took a
node from 27 to 87 threads, in the process that also runs dist. nginx and RabbitMQ's
management listener bound idle connections with timeouts; so do we, and more cheaply:

- Until a request is whole (TLS handshake, head, body) a connection is an entry in one
  selector loop: no thread. It must be whole within `header_timeout` from the accept, however
  slowly its bytes trickle in (slowloris), or it is closed.
- Pending connections are bounded per source address and in all; past a bound the OLDEST
  pending one is closed, so silent sockets cannot turn a newcomer away.
- A whole request goes to a small pool of `workers` threads; at most `max_connections` are
  being served or queued, and one more gets a 503 at once.
- The head is at most `max_head` bytes (431 beyond), the body at most `max_body` (413); the
  length must be a plain non-negative decimal (400), chunked bodies are refused (411), and a
  body is read only up to its declared length. A handler's `rfile` holds exactly the request.
- One request per connection (`Connection: close`): no idle keep-alive connection to hold.

Handlers are ordinary `BaseHTTPRequestHandler` subclasses. The server has the
`socketserver` surface the callers use: `server_address`, `serve_forever`, `shutdown`,
`server_close`.
"""

from __future__ import annotations

import contextlib
import io
import ipaddress
import logging
import re
import selectors
import socket
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from monitors.tls.https import _answer_plain

log = logging.getLogger("monitors.httpd")

HEADER_TIMEOUT = 10.0  # a request must be whole this long after the accept (nginx: 60 s)
WRITE_TIMEOUT = 10.0  # a worker waits this long on a client that does not read its answer
MAX_HEAD = 16 * 1024
MAX_BODY = 64 * 1024
MAX_CONNECTIONS = 64  # requests being served or queued for a worker; a 503 beyond
MAX_PENDING = 1024  # connections whose request is not whole yet (the oldest goes)
PER_ADDRESS = 512
WORKERS = 4
_TLS_HANDSHAKE = 0x16
_LENGTH = re.compile(rb"^[0-9]{1,12}$")
_LOG_EVERY = 10.0


@dataclass(eq=False)
class _Conn:
    sock: socket.socket
    address: tuple[Any, ...]
    deadline: float
    state: str = "head"  # sniff (HTTPS: first byte) | tls | head | body
    data: bytearray = field(default_factory=bytearray)
    need: int = 0  # bytes the whole request has (head + body), once the head is in


class _Writer(io.RawIOBase):
    """wfile for a handler: every write goes straight out (sendall, with WRITE_TIMEOUT)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._sock.sendall(data)
        return len(data)


class HardenedHTTPServer:
    """Serve `handler` (a BaseHTTPRequestHandler subclass) on `address`; HTTPS when `tls`
    (called per connection, so rotated certificates are picked up) is given."""

    def __init__(
        self,
        address: tuple[str, int],
        handler: type,
        *,
        tls: Callable[[], ssl.SSLContext] | None = None,
        what: str = "HTTP server",
        header_timeout: float | None = None,
        max_connections: int = MAX_CONNECTIONS,
        max_pending: int = MAX_PENDING,
        per_address: int = PER_ADDRESS,
        workers: int = WORKERS,
        max_body: int = MAX_BODY,
        max_head: int = MAX_HEAD,
    ) -> None:
        host, port = address
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(128)
        except OSError:
            sock.close()
            raise
        sock.setblocking(False)
        self.socket = sock
        self.server_address = sock.getsockname()
        self.tls = tls
        self.what = what
        # Read at call time, so one setting (or a test) changes every listener.
        self.header_timeout = header_timeout if header_timeout is not None else HEADER_TIMEOUT
        self.max_connections = max_connections
        self.max_pending = max_pending
        self.per_address = per_address
        self.max_body = max_body
        self.max_head = max_head
        self.handler = _one_shot(handler)
        self.daemon_threads = True  # socketserver's attribute; our workers are daemons anyway
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix=f"http-{what}")
        self._busy = 0  # requests being served or queued
        self._busy_lock = threading.Lock()
        self._conns: dict[socket.socket, _Conn] = {}
        self._by_address: dict[str, OrderedDict[_Conn, None]] = {}
        self._told: dict[str, float] = {}
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._stopping = False
        self._stopped = threading.Event()
        self._stopped.set()

    # ------------------------------------------------------------------ socketserver surface

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        self._stopped.clear()
        self._selector.register(self.socket, selectors.EVENT_READ, None)
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        try:
            while not self._stopping:
                now = time.monotonic()
                soonest = min((c.deadline for c in self._conns.values()), default=now + 1.0)
                timeout = max(min(soonest - now, poll_interval), 0.0)
                for key, mask in self._selector.select(timeout):
                    if key.data is None:
                        self._accept()
                    elif key.data == "wake":
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(4096)
                    else:
                        self._event(key.data, mask)
                self._expire(time.monotonic())
        finally:
            for conn in list(self._conns.values()):
                self._drop(conn)
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(self.socket)
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(self._wake_r)
            self._stopped.set()

    def shutdown(self) -> None:
        self._stopping = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._stopped.wait(5.0)

    def server_close(self) -> None:
        self._stopping = True
        with contextlib.suppress(OSError):
            self.socket.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    @property
    def connections(self) -> int:
        """Connections held now: pending ones plus requests served or queued."""
        return len(self._conns) + self._busy

    # ------------------------------------------------------------------ the selector phase

    def _accept(self) -> None:
        for _ in range(64):
            if self._stopping:
                return
            try:
                sock, address = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of file descriptors: shed the oldest, try later
                self._tell("accept", "%s: accept failed: %s", self.what, exc)
                self._evict_oldest()
                return
            source = str(address[0])
            group = self._by_address.setdefault(source, OrderedDict())
            if len(group) >= self.per_address:
                self._evict(next(iter(group)))
            if len(self._conns) >= self.max_pending:
                self._evict_oldest()
            sock.setblocking(False)
            conn = _Conn(sock, address, time.monotonic() + self.header_timeout)
            conn.state = "sniff" if self.tls is not None else "head"
            self._conns[sock] = conn
            group[conn] = None
            self._selector.register(sock, selectors.EVENT_READ, conn)

    def _evict_oldest(self) -> None:
        if self._by_address:
            source = max(self._by_address, key=lambda s: len(self._by_address[s]))
            self._evict(next(iter(self._by_address[source])))

    def _evict(self, conn: _Conn) -> None:
        self._tell(
            f"evict {conn.address[0]}",
            "%s: closed a connection from %s that had not sent its request (too many pending)",
            self.what,
            conn.address[0],
        )
        self._drop(conn)

    def _event(self, conn: _Conn, mask: int) -> None:
        if conn.sock not in self._conns:
            return
        try:
            if conn.state == "sniff":
                self._sniff(conn)
            elif conn.state == "tls":
                self._handshake(conn)
            else:
                self._read(conn)
        except Exception:
            log.exception("%s: a connection from %s failed", self.what, conn.address[0])
            self._drop(conn)

    def _sniff(self, conn: _Conn) -> None:
        """HTTPS: a plain HTTP request is told to use https:// instead of a reset."""
        try:
            first = conn.sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            first = b""
        if not first:
            self._drop(conn)
            return
        if first[0] != _TLS_HANDSHAKE:
            self._tell(
                f"plain {conn.address[0]}",
                "%s: plain HTTP from %s on the HTTPS port; told it to use https://",
                self.what,
                conn.address[0],
            )
            self._forget(conn)
            _answer_plain(conn.sock, self.what)  # non-blocking, one try: it is short
            _close(conn.sock)
            return
        assert self.tls is not None
        self._selector.unregister(conn.sock)
        del self._conns[conn.sock]
        conn.sock = self.tls().wrap_socket(
            conn.sock, server_side=True, do_handshake_on_connect=False
        )
        self._conns[conn.sock] = conn
        self._selector.register(conn.sock, selectors.EVENT_READ, conn)
        conn.state = "tls"
        self._handshake(conn)

    def _handshake(self, conn: _Conn) -> None:
        sock = conn.sock
        assert isinstance(sock, ssl.SSLSocket)
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            self._selector.modify(sock, selectors.EVENT_READ, conn)
            return
        except ssl.SSLWantWriteError:
            self._selector.modify(sock, selectors.EVENT_WRITE, conn)
            return
        except (ssl.SSLError, OSError) as exc:
            self._tell(
                f"tls {conn.address[0]}",
                "%s: TLS handshake with %s failed: %s",
                self.what,
                conn.address[0],
                exc,
            )
            self._drop(conn)
            return
        conn.state = "head"
        self._selector.modify(sock, selectors.EVENT_READ, conn)
        self._read(conn)  # TLS may have buffered application data already

    def _read(self, conn: _Conn) -> None:
        while True:
            try:
                chunk = conn.sock.recv(16 * 1024)
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError):
                return
            except ssl.SSLWantWriteError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                self._drop(conn)
                return
            conn.data += chunk
            if conn.state == "head":
                end = conn.data.find(b"\r\n\r\n")
                if end < 0:
                    if len(conn.data) > self.max_head:
                        self._refuse(conn, 431, "request header fields too large")
                    continue
                if end + 4 > self.max_head:
                    self._refuse(conn, 431, "request header fields too large")
                    return
                length = self._body_length(conn, bytes(conn.data[:end]))
                if length is None:
                    return
                conn.state, conn.need = "body", end + 4 + length
            if len(conn.data) >= conn.need:
                del conn.data[conn.need :]  # bytes past the declared body are not ours
                self._dispatch(conn)
                return

    def _body_length(self, conn: _Conn, head: bytes) -> int | None:
        """The declared body length, or None after refusing the request."""
        lengths, chunked = [], False
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                lengths.append(value.strip())
            elif name == b"transfer-encoding":
                chunked = True
        if chunked:
            self._refuse(conn, 411, "send the body with a Content-Length, not chunked")
            return None
        if not lengths:
            return 0
        if len(set(lengths)) != 1 or not _LENGTH.match(lengths[0]):
            self._refuse(conn, 400, "Content-Length must be one non-negative decimal number")
            return None
        length = int(lengths[0])
        if length > self.max_body:
            self._refuse(conn, 413, f"body too large ({length} bytes; limit {self.max_body})")
            return None
        return length

    def _expire(self, now: float) -> None:
        for conn in list(self._conns.values()):
            if now >= conn.deadline:
                self._tell(
                    f"slow {conn.address[0]}",
                    "%s: closed a connection from %s: no whole request within %g s",
                    self.what,
                    conn.address[0],
                    self.header_timeout,
                )
                if conn.state in ("head", "body") and conn.data:
                    self._refuse(conn, 408, "request timeout")
                else:
                    self._drop(conn)

    # ------------------------------------------------------------------ serving

    def _dispatch(self, conn: _Conn) -> None:
        self._forget(conn)
        with self._busy_lock:
            full = self._busy >= self.max_connections
            if not full:
                self._busy += 1
        if full:
            self._tell(
                "busy",
                "%s: %d requests in progress; answered 503 to %s",
                self.what,
                self.max_connections,
                conn.address[0],
            )
            _reply_now(conn.sock, 503, "busy: too many requests in progress, try again")
            _close(conn.sock)
            return
        try:
            self._pool.submit(self._serve, conn)
        except RuntimeError:  # shut down meanwhile
            self._done()
            _close(conn.sock)

    def _done(self) -> None:
        with self._busy_lock:
            self._busy -= 1

    def _serve(self, conn: _Conn) -> None:
        try:
            conn.sock.setblocking(True)
            conn.sock.settimeout(WRITE_TIMEOUT)
            self.handler(conn.sock, conn.address, self, bytes(conn.data))
        except OSError as exc:
            # The client hung up or stalled past WRITE_TIMEOUT mid-answer: its loss, and no
            # bug of ours, so no traceback (a hostile client could fill the log with them).
            log.debug("%s: %s went away while being answered: %s", self.what, conn.address[0], exc)
        except Exception:
            log.exception("%s: serving %s failed", self.what, conn.address[0])
        finally:
            self._done()
            _close(conn.sock)

    # ------------------------------------------------------------------ endings

    def _refuse(self, conn: _Conn, status: int, why: str) -> None:
        self._tell(
            f"{status} {conn.address[0]}",
            "%s: answered %d to %s: %s",
            self.what,
            status,
            conn.address[0],
            why,
        )
        self._forget(conn)
        _reply_now(conn.sock, status, why)
        _close(conn.sock)

    def _forget(self, conn: _Conn) -> None:
        if self._conns.pop(conn.sock, None) is None:
            return
        group = self._by_address.get(str(conn.address[0]))
        if group is not None:
            group.pop(conn, None)
            if not group:
                del self._by_address[str(conn.address[0])]
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(conn.sock)

    def _drop(self, conn: _Conn) -> None:
        self._forget(conn)
        _close(conn.sock)

    def _tell(self, key: str, msg: str, *args: Any) -> None:
        """A warning per key every _LOG_EVERY s; the rest at debug level."""
        now = time.monotonic()
        last = self._told.get(key)
        if last is not None and now - last < _LOG_EVERY:
            log.debug(msg, *args)
            return
        if len(self._told) >= 10_000:
            self._told.clear()
        self._told[key] = now
        log.warning(msg, *args)


def host_allowed(header: str | None, allowed: frozenset[str]) -> bool:
    """Is the Host (or Origin's host) header one of `allowed`, with any port, or an IP
    address? DNS rebinding needs a name: a browser sends the name it resolved, never the
    IP it rebound to, so an IP literal is a client that meant this address."""
    if not header:
        return False
    value = header.strip().lower()
    if "://" in value:
        value = value.split("://", 1)[1]
    value = value.split("/", 1)[0]
    if value.startswith("["):
        value = value[1 : value.find("]")] if "]" in value else value
    elif value.count(":") == 1:
        value = value.split(":", 1)[0]
    if value in allowed:
        return True
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def _one_shot(handler: type) -> Callable[..., Any]:
    """`handler` fed one whole request from memory, answering on the socket, then closed."""

    class _OneShot(handler):
        def __init__(self, sock: Any, address: Any, server: Any, request: bytes) -> None:
            self._request_bytes = request
            super().__init__(sock, address, server)

        def setup(self) -> None:
            self.connection = self.request
            self.rfile = io.BytesIO(self._request_bytes)
            self.wfile = _Writer(self.request)

        def finish(self) -> None:
            pass

        def end_headers(self) -> None:
            self.send_header("Connection", "close")
            super().end_headers()

    _OneShot.__name__ = handler.__name__
    return _OneShot


def _reply_now(sock: socket.socket, status: int, why: str) -> None:
    """A short plain-text answer, best effort and never blocking the loop for long."""
    reason = {
        400: "Bad Request",
        408: "Request Timeout",
        411: "Length Required",
        413: "Content Too Large",
        431: "Request Header Fields Too Large",
        503: "Service Unavailable",
    }.get(status, "Error")
    body = f"{why}\n".encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    with contextlib.suppress(OSError, ValueError):
        sock.setblocking(False)  # one try: it fits a fresh socket's buffer
        sock.send(head + body)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
