"""HTTPS for the node's small HTTP servers (control API, metrics, failover status).

`serve_https(server, context)` makes a `socketserver` server (ThreadingHTTPServer) speak TLS.
The handshake runs on the request's own thread, never in the accept loop, so a client that
stalls its handshake holds only its own thread (for at most `handshake_timeout`). A plain
HTTP request on the HTTPS port gets a plain-text answer saying to use https://, and a line in
the log, instead of a connection reset that explains nothing.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import ssl
from collections.abc import Callable
from typing import Any

log = logging.getLogger("monitors.tls")

HANDSHAKE_TIMEOUT = 10.0
_TLS_HANDSHAKE = 0x16  # the first byte of a TLS record carrying a ClientHello


def _answer_plain(sock: socket.socket, what: str) -> None:
    body = json.dumps(
        {
            "error": f"this {what} serves HTTPS: use an https:// address (and --cacert with the "
            "cluster's CA file)"
        }
    ).encode()
    head = (
        "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    with contextlib.suppress(OSError):
        sock.sendall(head + body)


def serve_https(
    server: Any,
    context: Callable[[], ssl.SSLContext],
    what: str = "server",
    handshake_timeout: float = HANDSHAKE_TIMEOUT,
) -> None:
    """Make `server` (a socketserver.TCPServer, threading) wrap each accepted connection in
    TLS with `context()` (called per connection, so rotated certificates are picked up)."""
    plain_finish = server.finish_request

    def finish_request(request: socket.socket, client_address: Any) -> None:
        where = f"{client_address[0]}:{client_address[1]}"
        request.settimeout(handshake_timeout)
        try:
            first = request.recv(1, socket.MSG_PEEK)
        except OSError:
            return
        if not first:
            return
        if first[0] != _TLS_HANDSHAKE:
            log.warning(
                "%s: plain HTTP from %s on the HTTPS port; told it to use https://", what, where
            )
            _answer_plain(request, what)
            return
        try:
            tls = context().wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            log.warning("%s: TLS handshake with %s failed: %s", what, where, exc)
            return
        try:
            tls.settimeout(None)
            plain_finish(tls, client_address)
        finally:
            with contextlib.suppress(OSError):
                tls.close()

    server.finish_request = finish_request
