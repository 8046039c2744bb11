"""The management page's HTTP side on a real node (m, in this process): login tokens,
sessions, refusals of cross-site and rebound requests, no CORS, the state and the actions."""

from __future__ import annotations

import http.client
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rabbitry.control import ControlClient
from rabbitry.node import Node
from tests.waiting import wait_until


def control(node: Node) -> tuple[str, int]:
    host, _, port = (node.control_address or "").rpartition(":")
    return host, int(port)


def request(
    node: Node, method: str, path: str, headers: dict[str, str] | None = None, body: Any = None
) -> http.client.HTTPResponse:
    host, port = control(node)
    connection = http.client.HTTPConnection(host, port, timeout=10)
    data = json.dumps(body).encode() if body is not None else None
    connection.request(
        method, path, body=data, headers={"Host": f"{host}:{port}", **(headers or {})}
    )
    response = connection.getresponse()
    response.body = response.read()  # type: ignore[attr-defined]
    connection.close()
    return response


def login_path(node: Node, ttl: float = 60.0) -> str:
    host, port = control(node)
    client = ControlClient(host, port, node.config.cookie)
    return client.request("POST", "/ui/token", {"ttl": ttl})["path"]


def session(node: Node) -> str:
    """Log in; the Cookie header value for the session."""
    response = request(node, "GET", login_path(node))
    assert response.status == 303
    return response.getheader("Set-Cookie").split(";")[0]


def post(node: Node, cookie: str, path: str, body: Any) -> http.client.HTTPResponse:
    host, port = control(node)
    headers = {
        "Cookie": cookie,
        "Origin": f"http://{host}:{port}",
        "Content-Type": "application/json",
        "Sec-Fetch-Site": "same-origin",
    }
    return request(node, "POST", path, headers, body)


def test_a_token_logs_in_once_into_a_strict_httponly_session(node: Node) -> None:
    path = login_path(node)
    assert re.fullmatch(r"/ui/login\?token=[A-Za-z0-9_-]{40,}", path)
    response = request(node, "GET", path)
    assert response.status == 303
    assert response.getheader("Location") == "/ui/"  # the token leaves the address bar
    cookie = response.getheader("Set-Cookie")
    _port = control(node)[1]
    assert cookie.startswith(f"rabbitry_ui_{_port}=")
    for part in ("HttpOnly", "SameSite=Strict", "Path=/ui/"):
        assert part in cookie
    page = request(node, "GET", "/ui/", {"Cookie": cookie.split(";")[0]})
    assert page.status == 200
    assert b"<title>rabbitry</title>" in page.body  # type: ignore[attr-defined]
    assert path.split("=")[1].encode() not in page.body  # type: ignore[attr-defined]
    again = request(node, "GET", path)
    assert again.status == 401, "a used token must not log in again"
    assert again.getheader("Set-Cookie") is None


def test_an_expired_token_is_refused(node: Node) -> None:
    path = login_path(node, ttl=0.2)
    time.sleep(0.4)  # the token's lifetime is the point of the test
    response = request(node, "GET", path)
    assert response.status == 401
    assert b"expired" in response.body  # type: ignore[attr-defined]
    assert response.getheader("Set-Cookie") is None


def test_every_route_refuses_without_a_session(node: Node) -> None:
    for path in ("/ui/", "/ui/app.js", "/ui/style.css", "/ui/api/state", "/ui/nope"):
        response = request(node, "GET", path)
        assert response.status == 401, path
    response = request(node, "GET", "/ui/", {"Cookie": f"rabbitry_ui_{control(node)[1]}=forged"})
    assert response.status == 401
    assert post(node, "", "/ui/api/action", {"action": "leave"}).status == 401
    assert request(node, "GET", "/ui/login?token=guess").status == 401


def test_cross_site_and_rebound_requests_are_refused(node: Node) -> None:
    cookie = session(node)
    host, port = control(node)
    cross = request(
        node, "GET", "/ui/api/state", {"Cookie": cookie, "Sec-Fetch-Site": "cross-site"}
    )
    assert cross.status == 403
    rebound = request(
        node, "GET", "/ui/api/state", {"Cookie": cookie, "Host": f"evil.example:{port}"}
    )
    assert rebound.status == 403
    forged = request(
        node,
        "POST",
        "/ui/api/action",
        {"Cookie": cookie, "Origin": "http://evil.example", "Content-Type": "application/json"},
        {"action": "leave"},
    )
    assert forged.status == 403
    form = request(
        node,
        "POST",
        "/ui/api/action",
        {
            "Cookie": cookie,
            "Origin": f"http://{host}:{port}",
            "Content-Type": "application/x-www-form-urlencoded",
        },
        {"action": "leave"},
    )
    assert form.status == 403
    assert node.status()["all"] == ["m@127.0.0.1"]  # nothing was done
    cross_login = request(node, "GET", login_path(node), {"Sec-Fetch-Site": "cross-site"})
    assert cross_login.status == 403


def test_no_cors(node: Node) -> None:
    cookie = session(node)
    answer = request(
        node, "GET", "/ui/api/state", {"Cookie": cookie, "Origin": "http://evil.example"}
    )
    assert answer.getheader("Access-Control-Allow-Origin") is None
    assert answer.getheader("Access-Control-Allow-Credentials") is None
    preflight = request(
        node,
        "OPTIONS",
        "/ui/api/action",
        {"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"},
    )
    assert not 200 <= preflight.status < 300
    assert preflight.getheader("Access-Control-Allow-Origin") is None


def test_the_state_shows_the_node_and_its_tree(node: Node) -> None:
    cookie = session(node)

    def complete() -> dict[str, Any] | None:
        answer = request(node, "GET", "/ui/api/state", {"Cookie": cookie})
        state = json.loads(answer.body)  # type: ignore[attr-defined]
        # on a loaded machine a part can miss a refresh's budget: wait for one with them all
        return None if state["missing"] else state

    state = wait_until(complete, "a state with every part", poll=0.1)
    assert state["node"] == "m@127.0.0.1"
    assert [(m["name"], m["state"]) for m in state["members"]] == [("m@127.0.0.1", "running")]
    assert sorted(state["members"][0]["alarms"]) == ["disk", "memory"]
    assert state["cut"] == []
    sups = {tuple(s["path"]): s for s in state["supervision"]}
    assert {c["id"] for c in sups[("app",)]["children"]} == {"idle", "flaky", "fragile"}
    assert state["mnesia"]["running_db_nodes"] == ["m@127.0.0.1"]
    assert state["gossip"]["node"] == "m@127.0.0.1"
    assert state["singletons"]["node"] == "m@127.0.0.1"  # the page's Singletons section
    assert state["singletons"]["singletons"] == {}


def test_restart_child_restarts_an_application_child_only(node: Node) -> None:
    cookie = session(node)

    def idle_ref() -> Any:
        app = next(c.ref for c in node.root.proxy().which_children().get() if c.id == "app")
        return next(c.ref for c in app.proxy().which_children().get() if c.id == "idle")

    before = idle_ref()
    body = {"action": "restart_child", "path": ["app"], "child": "idle"}
    done = post(node, cookie, "/ui/api/action", body)
    assert done.status == 200, done.body  # type: ignore[attr-defined]
    after = idle_ref()
    assert after is not None and after != before and after.is_alive()
    assert not before.is_alive()
    body = {"action": "restart_child", "path": [], "child": "net_kernel"}
    assert post(node, cookie, "/ui/api/action", body).status == 409
    assert post(node, cookie, "/ui/api/action", {"action": "shutdown"}).status == 400


def test_cluster_ui_prints_a_login_url(node: Node, tmp_path: Path) -> None:
    host, port = control(node)
    cookie = tmp_path / "cookie"
    cookie.write_bytes(node.config.cookie)
    cookie.chmod(0o600)
    done = subprocess.run(
        [
            sys.executable, "-m", "rabbitry", "cluster", "ui",
            "--control", f"{host}:{port}", "--cookie-file", str(cookie), "--no-browser",
        ],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    url = re.search(r"http://\S+/ui/login\?token=\S+", done.stdout)
    assert url is not None, done.stdout
    path = url.group(0).split(f"{port}", 1)[1]
    assert request(node, "GET", path).status == 303


@pytest.mark.parametrize("ttl", [0, -1, 601, "x"])
def test_a_bad_ttl_is_refused(node: Node, ttl: Any) -> None:
    host, port = control(node)
    from rabbitry.control import ControlError

    with pytest.raises(ControlError) as caught:
        ControlClient(host, port, node.config.cookie).request("POST", "/ui/token", {"ttl": ttl})
    assert caught.value.status == 400
