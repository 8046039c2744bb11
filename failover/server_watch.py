"""ServerWatch: one idle TCP connection to a Redis server, reported when the server closes it.

Why: the RCS checks the master every `master_retry_interval`, so a master SIGKILLed just after
a check was noticed up to one interval late. But a killed process's kernel closes its sockets
at once (FIN or RST to every peer), so a connection that just sits there learns of the death
within a round trip. A hung (SIGSTOPped) process or a cut link closes nothing: the watch stays
quiet and the deliberate checks decide, as before.

The connection sends nothing and reads nothing but the close; Redis keeps idle clients unless
its `timeout` is set, and a close for any reason only makes the RCS check at once (a live
master passes, and the watch is opened again).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable

from failover.redis_ops import parse_address

log = logging.getLogger("failover")


class ServerWatch:
    """Connect to `server` (at `address`: how this host reaches it) and call `on_lost(self)`
    once, on a daemon thread, when the connection ends (closed, reset, or never made).
    `close()` ends it without the call."""

    def __init__(
        self,
        server: str,
        address: str,
        on_lost: Callable[[ServerWatch], None],
        timeout: float,
    ) -> None:
        self.server = server
        self.address = address
        self._on_lost = on_lost
        self._timeout = timeout
        self._closed = threading.Event()
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._run, name=f"failover-watch-{server}", daemon=True
        )

    def start(self) -> ServerWatch:
        self._thread.start()
        return self

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked recv
            sock.close()

    def _run(self) -> None:
        try:
            host, port = parse_address(self.address)
            sock = socket.create_connection((host, port), timeout=self._timeout)
        except OSError as exc:
            log.debug("failover: cannot watch %s: %s", self.address, exc)
            self._lost()
            return
        with self._lock:
            if self._closed.is_set():
                sock.close()
                return
            self._sock = sock
        sock.settimeout(None)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        try:
            while sock.recv(4096):  # Redis sends nothing unasked; data would be odd, not fatal
                pass
        except OSError:
            pass
        self._lost()

    def _lost(self) -> None:
        if not self._closed.is_set():
            self._on_lost(self)
