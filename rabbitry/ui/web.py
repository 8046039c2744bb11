"""The management page at /ui/ on the control API: static files, its JSON state, its actions.

Security (the lessons of RabbitMQ's management CVEs, ecosystem_security.md §2):
- Login is a one-time token from `rabbitry cluster ui` (login.py), traded for a session
  cookie: HttpOnly, SameSite=Strict, Path=/ui/, Secure over HTTPS, and named after the port
  (nodes on one host do not log each other out). Nothing secret is in the page or its URL.
- Every route but /ui/login needs a valid session (401 otherwise).
- No CORS: no Access-Control-* header is ever sent, and OPTIONS is not served. A request a
  browser marks cross-site (Sec-Fetch-Site) is refused, a POST must come with this page's
  Origin and a JSON body, and over plain HTTP the Host must be a loopback name with this port
  (so a DNS-rebound name cannot reach the page).
- A strict Content-Security-Policy: scripts and styles from /ui/ only, no framing.
"""

from __future__ import annotations

import http.cookies
import json
import logging
import ssl
import urllib.parse
from importlib import resources
from typing import Any

from pykka import ActorRef

from rabbitry.control import Conflict
from rabbitry.ui.login import Logins
from rabbitry.ui.state import PageState
from supervisors import CallerError

log = logging.getLogger("rabbitry.ui")

PREFIX = "/ui"
MAX_BODY = 16 * 1024
STATIC = {
    "/ui/": ("index.html", "text/html; charset=utf-8"),
    "/ui/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/ui/style.css": ("style.css", "text/css; charset=utf-8"),
}
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
LOGIN_HELP = (
    "Run `rabbitry cluster ui --control HOST:PORT --cookie-file FILE` and open the URL it "
    "prints; the link works once, for a minute."
)
ACTIONS = {
    "join": ("POST", "/cluster/join"),
    "leave": ("POST", "/cluster/leave"),
    "forget": ("POST", "/cluster/forget"),
}


class ManagementUI:
    """Serves /ui/ for one node. `routes` are the control API's own handlers, which the
    page's join, leave and forget actions call, so that they behave exactly as the CLI's."""

    def __init__(self, node: Any, routes: dict[tuple[str, str], Any]) -> None:
        self.node = node
        self.routes = routes
        self.logins = Logins()
        self.state = PageState(node)

    def owns(self, path: str) -> bool:
        return path == PREFIX or path.startswith(PREFIX + "/")

    def new_login(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST /ui/token (bearer): a one-time login token, and the path to open with it."""
        ttl = body.get("ttl", self.logins.token_ttl)
        if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl <= 600:
            raise ValueError(f"ttl must be seconds in (0, 600]; got {ttl!r}")
        token = self.logins.new_token(float(ttl))
        return {"path": f"{PREFIX}/login?token={token}", "expires_in": ttl}

    def close(self) -> None:
        self.state.close()

    # ------------------------------------------------------------------ requests

    def serve(self, handler: Any, method: str, path: str) -> None:
        """Answer one request under /ui (called on the control server's thread)."""
        try:
            self._serve(_Request(handler, method, path))
        except Exception:
            log.exception("ui: %s %s failed", method, path)
            with_body = _Request(handler, method, path)
            with_body.json(500, {"error": "internal error; see the node's log"})

    def _serve(self, req: _Request) -> None:
        refused = req.refusal()
        if refused is not None:
            log.warning("ui: refused %s %s from %s: %s", req.method, req.path, req.peer, refused)
            req.json(403, {"error": refused})
            return
        if req.path == f"{PREFIX}/login" and req.method == "GET":
            self._login(req)
            return
        if not self.logins.valid(req.session()):
            if req.path.startswith(f"{PREFIX}/api/") or req.method != "GET":
                req.json(401, {"error": "not logged in. " + LOGIN_HELP})
            else:
                req.page(401, "Not logged in", LOGIN_HELP)
            return
        if req.method == "GET" and req.path == PREFIX:
            req.redirect(f"{PREFIX}/")
        elif req.method == "GET" and req.path in STATIC:
            name, content_type = STATIC[req.path]
            data = resources.files("rabbitry.ui").joinpath("static", name).read_bytes()
            req.send(200, data, content_type)
        elif req.method == "GET" and req.path == f"{PREFIX}/api/state":
            req.json(200, self.state.build())
        elif req.method == "POST" and req.path == f"{PREFIX}/api/action":
            self._action(req)
        elif req.method == "POST" and req.path == f"{PREFIX}/logout":
            self.logins.end(req.session())
            req.json(200, {"logged_out": True}, {"Set-Cookie": req.cookie("", max_age=0)})
        else:
            req.json(404, {"error": f"no page {req.method} {req.path}"})

    def _login(self, req: _Request) -> None:
        token = urllib.parse.parse_qs(req.query).get("token", [""])[0]
        session = self.logins.redeem(token)
        if session is None:
            log.warning("ui: login with a bad, expired or used token from %s", req.peer)
            req.page(
                401,
                "This login link is not valid",
                "It has expired or was already used (each link works once). " + LOGIN_HELP,
            )
            return
        log.info("ui: login from %s", req.peer)
        ttl = int(self.logins.session_ttl)
        req.redirect(f"{PREFIX}/", {"Set-Cookie": req.cookie(session, max_age=ttl)})

    def _action(self, req: _Request) -> None:
        try:
            body = req.body()
            name = body.get("action")
            if name == "restart_child":
                result = restart_child(self.node, body.get("path"), body.get("child"))
            elif name in ACTIONS:
                args = {k: v for k, v in body.items() if k != "action"}
                result = self.routes[ACTIONS[name]](args)
            else:
                raise ValueError(
                    f"action must be one of {[*ACTIONS, 'restart_child']}; got {name!r}"
                )
        except Conflict as exc:
            req.json(409, {"error": str(exc)})
            return
        except (ValueError, TypeError, CallerError) as exc:
            req.json(400, {"error": str(exc)})
            return
        log.info("ui: action %s done for %s", body.get("action"), req.peer)
        req.json(200, {"ok": True, "result": result})


def restart_child(node: Any, path: Any, child: Any) -> dict[str, Any]:
    """Terminate and restart one child of a supervisor in the application tree (`path`: the
    child ids from the root down to that supervisor, starting with "app"). The node's own
    parts (the root's children) are not offered: restarting net_kernel alone would leave the
    parts after it talking to a dead one."""
    if not isinstance(path, list) or not all(isinstance(p, str) for p in path):
        raise ValueError('restart_child needs {"path": ["app", ...], "child": "id"}')
    if not isinstance(child, str) or not child:
        raise ValueError('restart_child needs {"child": "id"}, a non-empty string')
    if not path or path[0] != "app":
        raise Conflict(
            "only children in the application tree (path starting with app) can be restarted"
        )
    if node.status().get("paused"):
        raise Conflict("the node is paused: its application is stopped until it may run")
    sup = node.root
    for step in path:
        sup = _child_ref(sup, step, want_supervisor=True)
    child_id = _child_id(sup, child)
    proxy = sup.proxy()
    proxy.terminate_child(child_id).get(timeout=30)
    proxy.restart_child(child_id).get(timeout=30)
    return {"restarted": child, "path": path}


def _children(sup: Any) -> list[Any]:
    return sup.proxy().which_children().get(timeout=10)


def _child_ref(sup: Any, step: str, want_supervisor: bool) -> Any:
    for info in _children(sup):
        if str(info.id) == step:
            if want_supervisor and (
                info.type != "supervisor" or not isinstance(info.ref, ActorRef)
            ):
                raise Conflict(f"{step} is not a running supervisor")
            return info.ref
    raise Conflict(f"no child {step!r} there (the tree changed?)")


def _child_id(sup: Any, child: str) -> Any:
    for info in _children(sup):
        if info.id is not None and str(info.id) == child:
            return info.id
    raise Conflict(f"no child {child!r} in that supervisor")


class _Request:
    """One request to the page, with the checks and answers the page needs."""

    def __init__(self, handler: Any, method: str, path: str) -> None:
        self.h = handler
        self.method = method
        self.path = path
        self.query = handler.path.partition("?")[2]
        self.https = isinstance(handler.connection, ssl.SSLSocket)
        self.port = int(handler.server.server_address[1])
        self.peer = handler.address_string()

    @property
    def cookie_name(self) -> str:
        return f"rabbitry_ui_{self.port}"

    def refusal(self) -> str | None:
        """Why this request is refused as cross-site or rebound, or None."""
        headers = self.h.headers
        host = headers.get("Host", "")
        if not self.https and host not in {f"{name}:{self.port}" for name in LOOPBACK_HOSTS}:
            return f"unexpected Host {host!r}: open the page at 127.0.0.1:{self.port}"
        site = headers.get("Sec-Fetch-Site")
        if site is not None and site not in ("same-origin", "none"):
            return f"cross-site request refused (Sec-Fetch-Site: {site})"
        if self.method == "POST":
            origin = headers.get("Origin")
            expected = f"{'https' if self.https else 'http'}://{host}"
            if origin != expected:
                return f"cross-site request refused (Origin {origin!r}, expected {expected!r})"
            if headers.get("Content-Type", "").split(";")[0].strip() != "application/json":
                return "a POST to the page must be JSON (Content-Type: application/json)"
        return None

    def session(self) -> str | None:
        jar = http.cookies.SimpleCookie()
        try:
            jar.load(self.h.headers.get("Cookie", ""))
        except http.cookies.CookieError:
            return None
        morsel = jar.get(self.cookie_name)
        return morsel.value if morsel is not None else None

    def cookie(self, value: str, max_age: int) -> str:
        secure = "; Secure" if self.https else ""
        return (
            f"{self.cookie_name}={value}; Path={PREFIX}/; Max-Age={max_age}; HttpOnly; "
            f"SameSite=Strict{secure}"
        )

    def body(self) -> dict[str, Any]:
        length = int(self.h.headers.get("Content-Length") or 0)
        if length < 0 or length > MAX_BODY:
            raise ValueError(f"body too large ({length} bytes; limit {MAX_BODY})")
        try:
            data = json.loads(self.h.rfile.read(length) or b"{}")
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            raise ValueError(f"body is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ValueError("body must be a JSON object")
        return data

    def send(
        self, status: int, data: bytes, content_type: str, extra: dict[str, str] | None = None
    ) -> None:
        h = self.h
        h.send_response(status)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(data)))
        for key, value in {**SECURITY_HEADERS, **(extra or {})}.items():
            h.send_header(key, value)
        h.end_headers()
        if self.method != "HEAD":
            h.wfile.write(data)

    def json(self, status: int, payload: Any, extra: dict[str, str] | None = None) -> None:
        self.send(status, json.dumps(payload).encode(), "application/json", extra)

    def page(self, status: int, title: str, text: str) -> None:
        """A plain page for a person who is not logged in (no script, no style)."""
        from html import escape

        body = (
            f"<!doctype html><html lang=en><meta charset=utf-8><title>rabbitry: {escape(title)}"
            f"</title><h1>{escape(title)}</h1><p>{escape(text)}</p></html>\n"
        )
        self.send(status, body.encode(), "text/html; charset=utf-8")

    def redirect(self, location: str, extra: dict[str, str] | None = None) -> None:
        self.send(303, b"", "text/plain", {"Location": location, **(extra or {})})
