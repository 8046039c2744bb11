"""The node's HTTP JSON control API, and its client.

Every request carries `Authorization: Bearer <token>`, where the token is an HMAC of a fixed
label under the cluster cookie: whoever can read the cookie file may control the node, and the
cookie itself never crosses the socket. Without `tls:` the server binds loopback addresses only
(node_config checks it); with `tls:` it serves HTTPS with the node's certificate and may listen
on any address, and the client checks that certificate against the cluster CA (`cafile`).

Routes (their handlers: rabbitry/control_routes.py):
    GET  /status           the cluster status: node, all, disc, running, partitions, paused, alarms,
                           ephemeral
    GET  /app              whether the application tree runs, and why not
    GET  /cluster/modes    {member: partition_handling}, and whether they differ
    GET  /singletons       where each singleton runs, with its token and expiry
    POST /cluster/join     {"node": "b@h", "address": "h:7002"}   join b's cluster
    GET  /cluster/ephemeral                                  the ephemeral members {up, down}
    POST /cluster/leave    {}                                     leave the cluster
    POST /cluster/forget   {"node": "b@h"}                        remove b from the membership
    GET  /gossip           the gossip state (needs `bus:`)
    GET  /gossip/revoked   {"count": n, "ids": [...]}: the revoked set
    POST /gossip/revoke    {"ids": [...]}                         revoke ids cluster-wide
    POST /gossip/elect     {"id": "k", "timeout": 10}             stand in election k; the winner
    POST /gossip/elect_once {"key": "k"}                          {"winner", "run"}: run is true
                                                                  for one asker cluster-wide
    GET  /mnesia           the store: running_db_nodes, tables {t: {all, active, ...}}, events
    POST /mnesia           {"op": "dirty_write", "args": {...}}   one store operation (409: the
                                                                  store refused it)
    POST /debug/block      {"nodes": [...] | "all", "seconds": s} fault injection: cut this node
                                                                  off (NetKernel.block)
    POST /debug/unblock    {"nodes": [...] | "all"}               end a block early

Errors come back as `{"error": "..."}` with 400 (bad request), 401 (bad token), 404 (no such
route), 409 (the action cannot be done now) or 500, and the client raises ControlError with
that message.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import logging
import os
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from monitors.httpd import HardenedHTTPServer
from monitors.tls import https_client_context
from rabbitry.node_config import _is_loopback as is_loopback
from supervisors import CallerError, Process

log = logging.getLogger("rabbitry.control")

TOKEN_LABEL = b"rabbitry-control-v1"
MAX_BODY = 64 * 1024
STATUS_KEYS = (
    "node",
    "all",
    "disc",
    "running",
    "partitions",
    "paused",
    "alarms",
    "ephemeral",
)

Handler = Callable[[dict[str, Any]], Any]


class ControlError(Exception):
    """A control request failed: the node said no, or could not be reached."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class Conflict(CallerError):
    """Raise from an action handler when the action cannot be done now (HTTP 409)."""


def control_token(cookie: bytes) -> str:
    """The bearer token for a cluster cookie."""
    return hmac.new(cookie, TOKEN_LABEL, hashlib.sha256).hexdigest()


class ControlServer(Process):
    """Serves the control API while the process lives; a child of the node's root supervisor.

    `routes` maps ("GET" | "POST", path) to a handler taking the JSON body (a dict) and
    returning a JSON-able result. Handlers run on the HTTP server's threads, so they must be
    thread-safe (the node's handlers ask actors, which is).
    """

    def __init__(
        self,
        host: str,
        port: int,
        cookie: bytes,
        routes: dict[tuple[str, str], Handler],
        tls: Callable[[], ssl.SSLContext] | None = None,
        *,
        web: Any = None,
    ):
        """`tls`: returns the server SSLContext for each new connection (HTTPS); None: HTTP.
        `web`: serves the paths it `owns()` (the management page, /ui/) with its own
        authentication (a session cookie), instead of the bearer token."""
        super().__init__()
        self._bind = (host, port)
        self._tls = tls
        self._web = web
        self._token = control_token(cookie)
        self._routes = dict(routes)
        self._server: HardenedHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        """The bound (host, port); port 0 in the config becomes the real port here."""
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def on_start(self) -> None:
        server = HardenedHTTPServer(
            self._bind,
            _make_handler(self._token, self._routes, self._web),
            tls=self._tls,
            what="control API",
        )
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, name=f"control-{self._bind[1]}", daemon=True
        )
        self._thread.start()
        scheme = "https" if self._tls is not None else "http"
        log.info("control API listening on %s://%s:%s", scheme, *self.address)

    def on_stop(self) -> None:
        self._close()

    def on_failure(self, *_exc_info: Any) -> None:
        self._close()

    def on_kill(self) -> None:
        self._close()

    def get_address(self) -> tuple[str, int]:
        return self.address

    def _close(self) -> None:
        if self._web is not None:
            self._web.close()
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()


class _BadTokenLog:
    """A bad token is logged at most once per address every 10 s (a script retrying with a
    stale cookie must not flood the log), with how many were not logged."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[str, tuple[float, int]] = {}

    def warn(self, address: str) -> None:
        now = time.monotonic()
        with self._lock:
            last = self._last.get(address)
            if last is not None and now - last[0] < 10.0:
                self._last[address] = (last[0], last[1] + 1)
                return
            if len(self._last) >= 10_000:
                self._last.clear()
            self._last[address] = (now, 0)
        more = f" ({last[1]} more in the last 10 s)" if last is not None and last[1] else ""
        log.warning("control: bad or missing token from %s%s", address, more)


def _make_handler(token: str, routes: dict[tuple[str, str], Handler], web: Any = None) -> type:
    told = _BadTokenLog()

    class _Handler(BaseHTTPRequestHandler):
        server_version = "rabbitry-control"
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug("%s %s", self.address_string(), fmt % args)

        def _serve(self, method: str) -> None:
            path = self.path.split("?", 1)[0]
            if web is not None and web.owns(path) and (method, path) not in routes:
                web.serve(self, method, path)
                return
            given = self.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                told.warn(self.address_string())
                self._reply(401, {"error": "bad or missing token (it derives from the cookie)"})
                return
            handler = routes.get((method, self.path.split("?", 1)[0]))
            if handler is None:
                self._reply(404, {"error": f"no route {method} {self.path}"})
                return
            try:
                body = self._body()
            except ValueError as exc:
                self._reply(400, {"error": str(exc)})
                return
            try:
                self._reply(200, handler(body))
            except Conflict as exc:
                self._reply(409, {"error": str(exc)})
            except (ValueError, TypeError, CallerError) as exc:
                self._reply(400, {"error": str(exc)})
            except Exception as exc:
                log.exception("control: %s %s failed", method, self.path)
                self._reply(500, {"error": f"{type(exc).__name__}: {exc}"})

        def _body(self) -> dict[str, Any]:
            length = int(self.headers.get("Content-Length") or 0)
            if length < 0 or length > MAX_BODY:
                raise ValueError(f"body too large ({length} bytes; limit {MAX_BODY})")
            if not length:
                return {}
            try:
                data = json.loads(self.rfile.read(length))
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
                raise ValueError(f"body is not JSON: {exc}") from None
            if not isinstance(data, dict):
                raise ValueError("body must be a JSON object")
            return data

        def _reply(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return _Handler


class ControlClient:
    """Talks to one node's control API."""

    def __init__(
        self,
        host: str,
        port: int,
        cookie: bytes | None = None,
        timeout: float = 10.0,
        *,
        token: str | None = None,
        cafile: str | os.PathLike[str] | None = None,
        https: bool | None = None,
    ) -> None:
        """`cookie` (the cluster's), or the `token` made from it (what a Spark executor's info
        file holds, so that tasks never see the cookie itself). `cafile`: the cluster CA, which
        makes the client speak HTTPS and check the node's certificate (`https=True` without a
        cafile trusts the system's CAs)."""
        if (cookie is None) == (token is None):
            raise TypeError("ControlClient needs exactly one of cookie or token")
        self.host, self.port, self.timeout = host, port, timeout
        self._token = token if token is not None else control_token(cookie or b"")
        self.cafile = cafile
        self.https = bool(cafile is not None if https is None else https)
        try:
            self._context = https_client_context(cafile) if self.https else None
        except (OSError, ssl.SSLError) as exc:
            raise ControlError(
                f"cannot load the CA file {cafile}: {exc}; give the cluster's CA file (PEM), "
                "the nodes' `tls.cafile`"
            ) from None
        if self._context is not None and cafile is not None and is_loopback(host):
            # The node's own host (a Spark task and its executor's node): the certificate names
            # the host's outside name, not 127.0.0.1. It must still chain to the cluster CA.
            self._context.check_hostname = False

    def __repr__(self) -> str:  # never the token
        return f"<ControlClient {self.url}>"

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.https else 'http'}://{host}:{self.port}"

    def status(self) -> dict[str, Any]:
        """The node's cluster status, with exactly the keys in STATUS_KEYS."""
        return self._request("GET", "/status")

    def app(self) -> dict[str, Any]:
        """The node's application tree: state (running, stopped, restarting, none), tree, and
        last_error (why it last failed to start, or None)."""
        return self._request("GET", "/app")

    def partition_modes(self) -> dict[str, Any]:
        """GET /cluster/modes: each core member's partition_handling, and whether they differ."""
        return self._request("GET", "/cluster/modes")

    def gossip(self) -> dict[str, Any]:
        """The node's gossip state: clock, alive workers, revoked count, bus, elections."""
        return self._request("GET", "/gossip")

    def revoked(self) -> list[str]:
        """Every id in the node's revoked set."""
        return self._request("GET", "/gossip/revoked")["ids"]

    def revoke(self, ids: list[str]) -> dict[str, Any]:
        """Revoke ids on the node and, through gossip, on every node of its bus."""
        return self._request("POST", "/gossip/revoke", {"ids": list(ids)})

    def elect(self, eid: str, topic: str = "rabbitry.elect", timeout: float = 10.0) -> str:
        """Stand in gossip election `eid` and return the winner's node name."""
        body = {"id": eid, "topic": topic, "timeout": timeout}
        return self._request("POST", "/gossip/elect", body)["winner"]

    def block(self, nodes: list[str] | str, seconds: float) -> dict[str, Any]:
        """Fault injection: cut the node off from `nodes` ("all": every peer) for `seconds`."""
        return self._request("POST", "/debug/block", {"nodes": nodes, "seconds": seconds})

    def unblock(self, nodes: list[str] | str = "all") -> dict[str, Any]:
        """End a `block` early, for `nodes` ("all": every blocked peer)."""
        return self._request("POST", "/debug/unblock", {"nodes": nodes})

    def mnesia_status(self) -> dict[str, Any]:
        """The store: running_db_nodes, per-table copies (all, active), recent events."""
        return self._request("GET", "/mnesia")

    def mnesia(self, op: str, **args: Any) -> Any:
        """Run one store operation (mnesia_like.Schema's name and keyword arguments), or
        op="transaction" with writes=[[table, record], ...], deletes=[[table, key], ...]."""
        return self._request("POST", "/mnesia", {"op": op, "args": args})["result"]

    def join(self, node: str, address: str) -> dict[str, Any]:
        return self._request("POST", "/cluster/join", {"node": node, "address": address})

    def ephemeral(self) -> dict[str, list[str]]:
        """The ephemeral members this node knows: {"up": [...], "down": [...]} (down ones
        until forgotten after forget_ephemeral_after)."""
        return self._request("GET", "/cluster/ephemeral")

    def singletons(self) -> dict[str, Any]:
        """GET /singletons: where each cluster singleton runs (token, lease expiry)."""
        return self._request("GET", "/singletons")

    def leave(self) -> dict[str, Any]:
        return self._request("POST", "/cluster/leave", {})

    def forget(self, node: str) -> dict[str, Any]:
        return self._request("POST", "/cluster/forget", {"node": node})

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """Any route, by method and path: the JSON answer, or ControlError."""
        return self._request(method, path, body)

    def _connection(self) -> http.client.HTTPConnection:
        """A new HTTP(S) connection to the node (a subclass may make its socket elsewhere:
        rabbitry.testing reaches nodes inside network namespaces)."""
        if self._context is not None:
            return http.client.HTTPSConnection(
                self.host, self.port, timeout=self.timeout, context=self._context
            )
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        connection = self._connection()
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {self._token}"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        try:
            connection.request(method, path, body=data, headers=headers)
            response = connection.getresponse()
            payload = response.read()
        except ssl.SSLCertVerificationError as exc:
            raise ControlError(
                f"the control API at {self.url} presented a certificate that does not check out "
                f"against {self._ca_name()}: {exc.verify_message or exc}; pass the cluster's CA "
                "file (the node's `tls.cafile`) with --cacert, and use the host name or address "
                "the node's certificate names"
            ) from None
        except ssl.SSLError as exc:
            hint = (
                "the node serves plain HTTP (it has no `tls:`): use an http:// address "
                "without --cacert"
                if "WRONG_VERSION_NUMBER" in str(exc) or "wrong version number" in str(exc)
                else "is it a rabbitry control port?"
            )
            raise ControlError(
                f"TLS with the control API at {self.url} failed: {exc}; {hint}"
            ) from None
        except http.client.RemoteDisconnected:
            raise ControlError(
                f"the control API at {self.url} closed the connection without an answer"
                + ("" if self.https else "; if the node has `tls:`, use https:// and --cacert")
            ) from None
        except http.client.IncompleteRead as exc:
            raise ControlError(
                f"the control API at {self.url} closed the connection in the middle of its "
                f"answer ({len(exc.partial)} of {len(exc.partial) + (exc.expected or 0)} bytes): "
                "the node may have stopped; whether the request took effect is unknown"
            ) from None
        except http.client.HTTPException as exc:
            raise ControlError(
                f"{self._where} did not answer HTTP ({type(exc).__name__}: {exc}); "
                "is it a rabbitry control port?"
            ) from None
        except OSError as exc:
            raise ControlError(
                f"cannot reach the control API at {self._where}: {exc} "
                "(is the node running, and is `control:` set in its config?)"
            ) from None
        finally:
            connection.close()
        try:
            decoded = json.loads(payload) if payload else None
        except json.JSONDecodeError:
            raise ControlError(
                f"{self._where} did not answer with JSON; is it a rabbitry control port?",
                response.status,
            ) from None
        if response.status != 200:
            message = decoded.get("error") if isinstance(decoded, dict) else None
            raise ControlError(message or f"HTTP {response.status}", response.status)
        return decoded

    @property
    def _where(self) -> str:
        return self.url if self.https else f"{self.host}:{self.port}"

    def _ca_name(self) -> str:
        return f"--cacert {self.cafile}" if self.cafile is not None else "the system's CAs"
