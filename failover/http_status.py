"""The RCS's HTTP status page, as Beetle's redis_configuration_http_server serves it.

    GET  /  /.html        an HTML table (with `Refresh: 3`, as Beetle's)
    GET  /.json           the status as JSON
    GET  /.txt            the status as "key: value" lines
    POST /initiate_master_switch   201 "Master switch initiated" or 200 "No master switch
                          necessary", with `Authorization: Bearer <http_token>` only (Beetle
                          also accepts GET and no token: we do not, a switch changes state;
                          GET answers 405; no token configured: 403)
    anything else         404

Host must name this page (its listen host, localhost, 127.0.0.1 or ::1; 421 otherwise) and a
switch's Origin too, if sent (403), so that a page elsewhere cannot drive it through DNS
rebinding or a cross-site form. Bad tokens are logged at most once per 10 s.

The server runs on its own thread and only calls the two callables it is given, which must be
thread-safe (the RCS shell answers them through its actor).
"""

from __future__ import annotations

import hmac
import html
import json
import logging
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from monitors.httpd import HardenedHTTPServer, host_allowed

__all__ = ["BEETLE_KEYS", "StatusServer", "format_text"]

log = logging.getLogger("failover.http")

# Beetle's status keys (its `redis_master_available?` without the question mark)
BEETLE_KEYS = (
    "redis_master",
    "redis_master_available",
    "redis_slaves_available",
    "switch_in_progress",
    "configured_client_ids",
    "unknown_client_ids",
    "unresponsive_clients",
    "unseen_client_ids",
)


def _show(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ", ".join(map(str, value)) or "-"
    if value is None:
        return "-"
    return str(value)


def format_text(status: dict[str, Any]) -> str:
    """The /.txt page: Beetle's keys first, then the rest, one "key: value" per line."""
    keys = [k for k in BEETLE_KEYS if k in status] + sorted(
        k for k in status if k not in BEETLE_KEYS
    )
    return "".join(f"{key}: {_show(status[key])}\n" for key in keys)


def _format_html(status: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><th>{html.escape(line.split(': ', 1)[0])}</th>"
        f"<td>{html.escape(line.split(': ', 1)[1])}</td></tr>"
        for line in format_text(status).splitlines()
    )
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>Redis failover status</title>"
        "</head><body><h1>Redis failover status</h1>"
        f"<table>{rows}</table></body></html>\n"
    )


class StatusServer:
    """Serve `status()` and `initiate_master_switch()` over HTTP on (host, port), or over
    HTTPS when `tls` (a callable returning the server SSLContext per connection) is given."""

    def __init__(
        self,
        host: str,
        port: int,
        status: Callable[[], dict[str, Any]],
        initiate_master_switch: Callable[[], bool],
        tls: Callable[[], ssl.SSLContext] | None = None,
        *,
        switch_token: str | None = None,
    ) -> None:
        handler = _handler(status, initiate_master_switch, switch_token, _allowed_hosts(host))
        self._server = HardenedHTTPServer(
            (host, port), handler, tls=tls, what="failover status page"
        )
        self.https = tls is not None
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=f"failover-http-{port}", daemon=True
        )

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> StatusServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _allowed_hosts(host: str) -> frozenset[str]:
    """Names a browser may use for this page (DNS rebinding: any other Host is refused)."""
    return frozenset({host.strip("[]").lower(), "localhost", "127.0.0.1", "::1"})


def _handler(
    status: Callable[[], dict[str, Any]],
    initiate: Callable[[], bool],
    token: str | None = None,
    allowed: frozenset[str] = frozenset(),
) -> type[BaseHTTPRequestHandler]:
    told = {"at": -1e9}

    def tell(msg: str, *args: Any) -> None:  # bad tokens: a warning every 10 s, else debug
        now = time.monotonic()
        fresh = now - told["at"] >= 10.0
        if fresh:
            told["at"] = now
        log.log(logging.WARNING if fresh else logging.DEBUG, msg, *args)

    class _Handler(BaseHTTPRequestHandler):
        server_version = "rabbitry-failover"

        def log_message(self, fmt: str, *args: Any) -> None:  # quiet: debug only
            log.debug("http %s: " + fmt, self.client_address[0], *args)

        def _send(self, code: int, body: str, kind: str, refresh: bool = False) -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", f"{kind}; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            if refresh:
                self.send_header("Refresh", "3")
            self.end_headers()
            self.wfile.write(data)

        def _status_page(self) -> None:
            path = self.path.split("?", 1)[0]
            try:
                current = status()
            except Exception as exc:  # the RCS restarting: say so, do not crash the server
                self._send(503, f"status unavailable: {exc}\n", "text/plain")
                return
            if path in ("/", "/.html"):
                self._send(200, _format_html(current), "text/html", refresh=True)
            elif path == "/.json":
                self._send(
                    200, json.dumps(current, indent=2, sort_keys=True) + "\n", "application/json"
                )
            elif path == "/.txt":
                self._send(200, format_text(current), "text/plain")
            else:
                self._send(404, "not found\n", "text/plain")

        def _switch(self) -> None:
            try:
                started = initiate()
            except Exception as exc:
                self._send(503, f"cannot initiate a master switch: {exc}\n", "text/plain")
                return
            if started:
                self._send(201, "Master switch initiated\n", "text/plain")
            else:
                self._send(200, "No master switch necessary\n", "text/plain")

        def do_GET(self) -> None:
            if not host_allowed(self.headers.get("Host"), allowed):
                self._send(421, "unknown Host (use the page's own address)\n", "text/plain")
            elif self.path.split("?", 1)[0] == "/initiate_master_switch":
                # A switch changes state: never on a GET (a link, a prefetch, an <img>).
                self._send(405, "POST /initiate_master_switch with the token\n", "text/plain")
            else:
                self._status_page()

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > 0:  # the server bounded it; never read(-1)
                self.rfile.read(min(length, 65536))
            if self.path.split("?", 1)[0] != "/initiate_master_switch":
                self._send(404, "not found\n", "text/plain")
                return
            origin = self.headers.get("Origin")
            if not host_allowed(self.headers.get("Host"), allowed) or (
                origin is not None and not host_allowed(origin, allowed)
            ):
                tell(
                    "failover http: refused a switch from %s: Host or Origin",
                    self.client_address[0],
                )
                self._send(403, "refused: Host or Origin is not this page's\n", "text/plain")
                return
            if token is None:
                self._send(
                    403,
                    "the switch is disabled: start the server with an http_token\n",
                    "text/plain",
                )
                return
            given = self.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                tell("failover http: bad or missing token from %s", self.client_address[0])
                self._send(401, "bad or missing token\n", "text/plain")
                return
            self._switch()

    return _Handler
