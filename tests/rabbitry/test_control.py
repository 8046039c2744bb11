"""The control API over real HTTP on loopback, and `rabbitry cluster` against it."""

from __future__ import annotations

import http.client
import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rabbitry.cli import main
from rabbitry.control import (
    STATUS_KEYS,
    Conflict,
    ControlClient,
    ControlError,
    ControlServer,
    control_token,
)

COOKIE = b"the-cookie"
STATUS = {
    "node": "a@127.0.0.1",
    "all": ["a@127.0.0.1", "b@127.0.0.1", "c@127.0.0.1"],
    "disc": ["a@127.0.0.1", "b@127.0.0.1", "c@127.0.0.1"],
    "running": ["a@127.0.0.1", "b@127.0.0.1"],
    "partitions": {"a@127.0.0.1": ["c@127.0.0.1"]},
    "paused": False,
    "alarms": {"a@127.0.0.1": [], "b@127.0.0.1": ["memory"]},
    "ephemeral": ["x@127.0.0.1"],
}


class _Node:
    """What the routes act on: records calls, refuses what a real node would refuse."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []

    def routes(self) -> dict:
        def join(body: dict) -> dict:
            self.calls.append(("join", body))
            if "node" not in body:
                raise ValueError("join needs a node")
            return {"ok": True}

        def forget(body: dict) -> dict:
            self.calls.append(("forget", body))
            raise Conflict(f"{body.get('node')} is running; stop it before forgetting it")

        def boom(_body: dict) -> dict:
            raise RuntimeError("handler bug")

        return {
            ("GET", "/status"): lambda _body: STATUS,
            ("POST", "/cluster/join"): join,
            ("POST", "/cluster/forget"): forget,
            ("POST", "/cluster/leave"): boom,
        }


@pytest.fixture
def node() -> Iterator[tuple[_Node, tuple[str, int]]]:
    fake = _Node()
    ref = ControlServer.start("127.0.0.1", 0, COOKIE, fake.routes())
    try:
        yield fake, ref.proxy().get_address().get()
    finally:
        ref.stop()


@pytest.fixture
def cookie_file(tmp_path: Path) -> Path:
    path = tmp_path / "cookie"
    path.write_bytes(COOKIE + b"\n")
    os.chmod(path, 0o600)
    return path


def test_status_round_trip(node: Any) -> None:
    _, (host, port) = node
    assert ControlClient(host, port, COOKIE).status() == STATUS


def test_a_wrong_cookie_is_refused(node: Any) -> None:
    _, (host, port) = node
    with pytest.raises(ControlError, match="bad or missing token") as caught:
        ControlClient(host, port, b"other-cookie").status()
    assert caught.value.status == 401


def test_no_token_is_refused(node: Any) -> None:
    _, (host, port) = node
    connection = http.client.HTTPConnection(host, port, timeout=5)
    connection.request("GET", "/status")
    response = connection.getresponse()
    assert response.status == 401
    assert "error" in json.loads(response.read())
    connection.close()


def test_errors_map_to_statuses(node: Any) -> None:
    fake, (host, port) = node
    client = ControlClient(host, port, COOKIE)
    assert client.join("b@127.0.0.1", "127.0.0.1:7002") == {"ok": True}
    assert fake.calls == [("join", {"node": "b@127.0.0.1", "address": "127.0.0.1:7002"})]
    with pytest.raises(ControlError, match="is running") as conflict:
        client.forget("b@127.0.0.1")
    assert conflict.value.status == 409
    with pytest.raises(ControlError, match="RuntimeError: handler bug") as bug:
        client.leave()
    assert bug.value.status == 500
    assert client.status() == STATUS  # the server survived its handler's crash


def test_bad_bodies_and_routes(node: Any) -> None:
    _, (host, port) = node
    headers = {"Authorization": f"Bearer {control_token(COOKIE)}"}
    for method, path, body, expected in [
        ("POST", "/cluster/join", b"not json", 400),
        ("POST", "/cluster/join", b"[1, 2]", 400),
        ("GET", "/nowhere", None, 404),
    ]:
        connection = http.client.HTTPConnection(host, port, timeout=5)
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        assert response.status == expected, (method, path)
        assert "error" in json.loads(response.read())
        connection.close()


def _answer_once(raw: bytes) -> int:
    """A listener that answers one connection with `raw` and closes it; its port."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with listener, listener.accept()[0] as conn:
            conn.recv(65536)
            conn.sendall(raw)

    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[1]


def test_an_answer_cut_in_the_middle_is_a_clear_error() -> None:
    """A node killed while answering (headers out, body not): ControlError saying so, not
    http.client's IncompleteRead, which callers catching ControlError would not expect."""
    port = _answer_once(b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\n")
    with pytest.raises(ControlError, match=r"in the middle of its answer \(0 of 13 bytes\)"):
        ControlClient("127.0.0.1", port, COOKIE, timeout=5).status()
    port = _answer_once(b"NOT HTTP AT ALL\r\n\r\n")
    with pytest.raises(ControlError, match="did not answer HTTP"):
        ControlClient("127.0.0.1", port, COOKIE, timeout=5).status()


def test_an_unreachable_node_is_a_clear_error() -> None:
    with pytest.raises(ControlError, match=r"cannot reach the control API at 127\.0\.0\.1:1"):
        ControlClient("127.0.0.1", 1, COOKIE, timeout=2).status()


def test_cli_status_json_has_exactly_the_contract_keys(
    node: Any, cookie_file: Path, capsys: Any
) -> None:
    _, (host, port) = node
    code = main(
        [
            "cluster",
            "status",
            "--control",
            f"{host}:{port}",
            "--cookie-file",
            str(cookie_file),
            "--json",
        ]
    )
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    assert tuple(printed) == STATUS_KEYS
    assert printed == STATUS


def test_cli_status_table(node: Any, cookie_file: Path, capsys: Any) -> None:
    _, (host, port) = node
    assert (
        main(
            ["cluster", "status", "--control", f"{host}:{port}", "--cookie-file", str(cookie_file)]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "Cluster status of node a@127.0.0.1" in out
    assert "running nodes  a@127.0.0.1, b@127.0.0.1" in out
    assert "ephemeral      x@127.0.0.1" in out
    assert "a@127.0.0.1 saw down: c@127.0.0.1" in out
    assert "b@127.0.0.1: memory" in out


def test_cli_refuses_a_cookie_file_others_can_read(
    node: Any, cookie_file: Path, capsys: Any
) -> None:
    _, (host, port) = node
    os.chmod(cookie_file, 0o644)
    code = main(
        ["cluster", "status", "--control", f"{host}:{port}", "--cookie-file", str(cookie_file)]
    )
    assert code == 2
    assert "chmod 600" in capsys.readouterr().err


def test_cli_reports_an_unreachable_node(cookie_file: Path, capsys: Any) -> None:
    code = main(
        ["cluster", "status", "--control", "127.0.0.1:1", "--cookie-file", str(cookie_file)]
    )
    assert code == 1
    assert "cannot reach the control API" in capsys.readouterr().err


def test_cli_finds_the_cookie_without_the_option(
    node: Any, cookie_file: Path, capsys: Any, monkeypatch: Any
) -> None:
    _, (host, port) = node
    monkeypatch.setenv("RABBITRY_COOKIE_FILE", str(cookie_file))
    assert main(["cluster", "status", "--control", f"{host}:{port}", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["node"] == "a@127.0.0.1"
    monkeypatch.delenv("RABBITRY_COOKIE_FILE")
    monkeypatch.chdir(cookie_file.parent)  # ./cookie
    assert main(["cluster", "status", "--control", f"{host}:{port}", "--json"]) == 0


def test_cli_join_and_forget(node: Any, cookie_file: Path, capsys: Any) -> None:
    fake, (host, port) = node
    target = ["--control", f"{host}:{port}", "--cookie-file", str(cookie_file)]
    assert main(["cluster", "join", "b@127.0.0.1", "127.0.0.1:7002", *target]) == 0
    assert fake.calls[-1] == ("join", {"node": "b@127.0.0.1", "address": "127.0.0.1:7002"})
    assert main(["cluster", "forget", "b@127.0.0.1", *target]) == 1
    assert "is running" in capsys.readouterr().err
