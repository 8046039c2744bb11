"""Nodes as separate OS processes (tests/dist/node_main.py) started by the reusable launcher:
a SIGKILLed node gives connection_closed, a SIGSTOPped one net_tick_timeout and, after
SIGCONT, a reconnect; a wrong-cookie node and a garbage client are turned away."""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import pytest

from monitors.dist import NetKernel
from rabbitry.testing.launcher import Launcher, LaunchError, NodeSpec, OsNode

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

NODE_MAIN = str(Path(__file__).with_name("node_main.py"))
NET_TICKTIME = 1.0
COOKIE = b"os-cluster-cookie"


def _spec(name: str, cookie_file: Path, *extra: str) -> NodeSpec:
    return NodeSpec(
        name,
        [
            sys.executable,
            NODE_MAIN,
            "--name",
            f"{name}@127.0.0.1",
            "--listen",
            "127.0.0.1:0",
            "--cookie-file",
            str(cookie_file),
            "--net-ticktime",
            str(NET_TICKTIME),
            "--ping-interval",
            "0.3",
            *extra,
        ],
    )


def _cookie(tmp_path: Path, name: str, value: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(value)
    path.chmod(0o600)
    return path


def _introduce(nodes: list[OsNode]) -> None:
    """Tell every node every other's address; their ping loops connect them."""
    for node in nodes:
        for other in nodes:
            if other is not node:
                node.send_line(f"peer {other.name}@127.0.0.1 {other.address}")


@pytest.fixture
def launcher():
    with Launcher(grace=3.0) as launcher:
        yield launcher


@pytest.fixture
def cluster(launcher, tmp_path):
    cookie = _cookie(tmp_path, "cookie", COOKIE)
    nodes = launcher.start(*(_spec(name, cookie) for name in "abc"))
    _introduce(nodes)
    for node in nodes:
        for other in nodes:
            if other is not node:
                node.wait_for(rf"^EVENT nodeup {other.name}@127\.0\.0\.1 ", timeout=20)
    return nodes


def test_a_sigkilled_node_gives_connection_closed(cluster):
    a, b, c = cluster
    marks = [a.mark(), b.mark()]
    killed_at = time.monotonic()
    c.kill()
    for node, mark in zip((a, b), marks, strict=True):
        node.wait_for(r"^EVENT nodedown c@127\.0\.0\.1 connection_closed$", 10, mark)
    print(f"connection_closed seen {time.monotonic() - killed_at:.3f} s after SIGKILL")


def test_a_sigstopped_node_gives_net_tick_timeout_then_sigcont_reconnects(cluster):
    a, b, c = cluster
    marks = [a.mark(), b.mark()]
    stopped_at = time.monotonic()
    c.pause()
    for node, mark in zip((a, b), marks, strict=True):
        node.wait_for(r"^EVENT nodedown c@127\.0\.0\.1 net_tick_timeout$", NET_TICKTIME + 5, mark)
    print(f"net_tick_timeout seen {time.monotonic() - stopped_at:.3f} s after SIGSTOP")
    assert a.alive and b.alive  # and they still see each other
    marks = [a.mark(), b.mark()]
    c.resume()
    for node, mark in zip((a, b), marks, strict=True):
        node.wait_for(r"^EVENT nodeup c@127\.0\.0\.1 ", 20, mark)


def test_a_wrong_cookie_node_is_turned_away(cluster, launcher, tmp_path):
    a = cluster[0]
    wrong = _cookie(tmp_path, "wrong", b"not-the-cookie")
    mark = a.mark("stderr")
    (d,) = launcher.start(_spec("d", wrong, "--peer", f"a@127.0.0.1={a.address}"))
    line = a.wait_for(r"rejected connection from 127\.0\.0\.1:\d+: bad_cookie", 10, mark, "stderr")
    assert "a@127.0.0.1" in line.string
    d.wait_for(r"cannot connect to a@127\.0\.0\.1", 10, 0, "stderr")
    assert not [line for line in a.stdout() if "EVENT nodeup d@" in line]
    a.send_line("nodes")
    a.wait_for(r"^NODES b@127\.0\.0\.1,c@127\.0\.0\.1$", 5)


def test_a_garbage_client_on_the_dist_port(cluster):
    a, _b, _c = cluster
    host, port = a.address.rsplit(":", 1)
    mark = a.mark("stderr")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        local = f"127.0.0.1:{sock.getsockname()[1]}"
        sock.sendall(os.urandom(100))
        sock.settimeout(5)
        while True:
            try:
                if not sock.recv(4096):
                    break
            except ConnectionResetError:
                break
    a.wait_for(rf"rejected connection from {local}: garbage", 10, mark, "stderr")
    # The node still serves: a new peer (this test process) connects and calls it.
    ref = NetKernel.start("t@127.0.0.1", cookie=COOKIE, peers={"a@127.0.0.1": a.address})
    try:
        kernel = NetKernel.of(ref)
        assert kernel.call("a@127.0.0.1", "echo", {"op": "echo"})["node"] == "t@127.0.0.1"
    finally:
        ref.stop()


def test_the_launcher_reports_a_node_that_fails_to_start(launcher, tmp_path):
    missing = tmp_path / "no-such-cookie"
    with pytest.raises(LaunchError, match="exited") as info:
        launcher.start(_spec("x", missing))
    assert "No such file" in str(info.value)  # the stderr tail says why


def test_the_launcher_leaves_nothing_behind(tmp_path):
    cookie = _cookie(tmp_path, "cookie", COOKIE)
    with Launcher(grace=2.0) as launcher:
        (a,) = launcher.start(_spec("a", cookie))
        a.pause()  # even a stopped one
        pid, address = a.pid, a.address
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    host, port = address.rsplit(":", 1)
    with pytest.raises(OSError):
        socket.create_connection((host, int(port)), timeout=1).close()
