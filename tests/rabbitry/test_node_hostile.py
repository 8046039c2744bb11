"""A real node (`rabbitry node start`) under a hostile or broken neighbour (issue 25): silent
sockets on its dist and control ports, slowloris on its control API and /metrics, a negative
Content-Length, JSON nested 100,000 deep, a wrong-cookie neighbour. One node for the module;
bounds on counts, never on timings."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from monitors.dist import NetKernel
from rabbitry.control import ControlClient
from rabbitry.testing.launcher import Launcher, NodeSpec
from tests.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

COOKIE = b"hostile-node-test-cookie-0123"
READY = r"^READY (?P<node>\S+) (?P<address>\S+) control=(?P<control>\S+) metrics=(?P<metrics>\S+)"


def _address(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


def _threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads line")


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> Iterator[dict]:
    root = tmp_path_factory.mktemp("hostile")
    (root / "cookie").write_bytes(COOKIE)
    os.chmod(root / "cookie", 0o600)
    (root / "a.yaml").write_text(
        "node: a@127.0.0.1\nlisten: 127.0.0.1:0\ncookie_file: ./cookie\ndata_dir: ./data\n"
        "net_ticktime: 2s\ncontrol: 127.0.0.1:0\nmetrics: 127.0.0.1:0\n"
    )
    argv = [sys.executable, "-m", "rabbitry", "node", "start", "--config", str(root / "a.yaml")]
    with Launcher() as launcher:
        (proc,) = launcher.start(NodeSpec("a@127.0.0.1", argv, ready=READY, cwd=str(root)))
        ready = proc.wait_for(proc.spec.ready)
        yield {
            "pid": proc.popen.pid,
            "node": ready["node"],
            "dist": ready["address"],
            "control": ready["control"],
            "metrics": ready["metrics"],
            "client": ControlClient(*_address(ready["control"]), COOKIE, timeout=10),
        }


def _join(node: dict, name: str, cookie: bytes = COOKIE) -> bool:
    ref = NetKernel.start(f"{name}@127.0.0.1", cookie=cookie)
    try:
        kernel = NetKernel.of(ref)
        kernel.set_address(node["node"], node["dist"])
        return kernel.connect(node["node"], timeout=5)
    finally:
        ref.stop()


def test_silent_sockets_on_dist_and_control_do_not_keep_a_node_out(node):
    before = _threads(node["pid"])
    dist = [socket.create_connection(_address(node["dist"])) for _ in range(200)]
    control = [socket.create_connection(_address(node["control"])) for _ in range(500)]
    try:
        assert _join(node, "joiner")  # on its first try
        assert node["client"].status()["node"] == node["node"]
        # A thread per pending socket would be 700 more.
        assert _threads(node["pid"]) - before < 20
    finally:
        for sock in dist + control:
            sock.close()


def test_a_wrong_cookie_neighbour_keeps_trying_while_a_right_one_joins(node):
    stop = threading.Event()
    tries: list[bool] = []

    def stale() -> None:
        ref = NetKernel.start("stale@127.0.0.1", cookie=b"last month's cookie 0123456789")
        kernel = NetKernel.of(ref)
        kernel.set_address(node["node"], node["dist"])
        while not stop.is_set():
            tries.append(kernel.connect(node["node"], timeout=1))
        ref.stop()

    thread = threading.Thread(target=stale, daemon=True)
    thread.start()
    try:
        wait_until(lambda: len(tries) >= 3, "the stale node to fail a few times")
        for i in range(3):
            assert _join(node, f"right{i}")
    finally:
        stop.set()
        thread.join(10)
    assert not any(tries)


def _raw(address: str, data: bytes) -> bytes:
    with socket.create_connection(_address(address), timeout=10) as sock:
        sock.sendall(data)
        chunks = []
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                chunks.append(chunk)
    return b"".join(chunks)


def test_negative_length_and_deep_json_are_400_not_a_traceback(node):
    token = f"Bearer {node['client']._token}"
    head = f"POST /cluster/forget HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: {token}\r\n"
    answer = _raw(node["control"], (head + "Content-Length: -5\r\n\r\n").encode())
    assert answer.startswith(b"HTTP/1.1 400")
    deep = b"[" * 30_000 + b"]" * 30_000
    answer = _raw(node["control"], (head + f"Content-Length: {len(deep)}\r\n\r\n").encode() + deep)
    assert answer.startswith(b"HTTP/1.1 400")
    assert node["client"].status()["node"] == node["node"]


def test_slowloris_on_control_and_metrics_is_closed(node):
    socks = []
    for address in (node["control"], node["metrics"]):
        sock = socket.create_connection(_address(address), timeout=30)
        sock.sendall(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        socks.append(sock)
    stop = threading.Event()

    def trickle() -> None:
        while not stop.wait(1.0):
            for sock in socks:
                with contextlib.suppress(OSError):
                    sock.sendall(b"X-a: b\r\n")

    threading.Thread(target=trickle, daemon=True).start()
    try:
        for sock in socks:
            chunks = []
            with contextlib.suppress(ConnectionResetError):
                while chunk := sock.recv(4096):  # the header deadline closes it
                    chunks.append(chunk)
            answer = b"".join(chunks)
            assert answer == b"" or answer.startswith(b"HTTP/1.1 408")
    finally:
        stop.set()
        for sock in socks:
            sock.close()


def test_metrics_checks_host(node):
    answer = _raw(node["metrics"], b"GET /metrics HTTP/1.1\r\nHost: rebound.example\r\n\r\n")
    assert answer.startswith(b"HTTP/1.0 421") or answer.startswith(b"HTTP/1.1 421")
    answer = _raw(node["metrics"], b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert b" 200 " in answer.split(b"\r\n", 1)[0] and b"rabbitry_identity_info" in answer
