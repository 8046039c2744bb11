"""Bad input on the dist port: a wrong cookie, garbage, oversized and bad frames, a silent
client, a flood. Each is logged with the peer address and closed; the node carries on."""

from __future__ import annotations

import logging
import socket
import struct
import time

import pytest

from monitors.dist import NodeDown, NodeUp
from monitors.dist.frames import encode
from monitors.dist.handshake import Connector
from supervisors import exit_reason
from tests.dist.helpers import COOKIE, Echo, Probe, mesh, wait_until
from tests.dist.test_kernel import _fake_peer

pytestmark = pytest.mark.timeout(60)


def _deep_frame(depth: int) -> bytes:
    body = b'{"v":1,"t":"send","to":"echo","m":' + b"[" * depth + b"]" * depth + b"}"
    return struct.pack(">I", len(body)) + body


def _rejections(caplog, node: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "monitors.dist" and r.getMessage().startswith(f"dist {node}: rejected")
    ]


def _raw(kernel) -> socket.socket:
    host, port = kernel.address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=5)


def _closed_by_peer(sock: socket.socket, timeout: float = 5.0) -> bool:
    """Read until EOF (or a reset): True if the other side closed it."""
    sock.settimeout(timeout)
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    return True


def _still_serves(kernel, make_kernel) -> None:
    """The node still accepts a proper peer and answers calls."""
    if kernel.whereis("echo") is None:
        kernel.register("echo", Echo.start())
    peer = make_kernel(f"check{time.monotonic_ns()}")
    mesh(kernel, peer)
    assert peer.call(kernel.node, "echo", {"op": "echo"})["node"] == peer.node


def test_wrong_cookie_no_connection_one_log_line_listener_fine(make_kernel, caplog):
    caplog.set_level(logging.INFO, "monitors.dist")
    a = make_kernel("a")
    intruder = make_kernel("intruder", cookie="not the cookie")
    mesh(a, intruder)
    assert intruder.connect(a.node) is False
    assert a.nodes() == [] and intruder.nodes() == []
    lines = wait_until(lambda: _rejections(caplog, a.node), "a's log line")
    assert len(lines) == 1
    assert "bad_cookie" in lines[0]
    assert "127.0.0.1:" in lines[0]  # the peer's address
    connector_lines = [
        r.getMessage() for r in caplog.records if r.getMessage().startswith("dist intruder")
    ]
    assert any("cannot connect to a@127.0.0.1" in line for line in connector_lines)
    _still_serves(a, make_kernel)


def test_garbage_client_is_closed_and_logged_with_its_address(make_kernel, caplog):
    caplog.set_level(logging.INFO, "monitors.dist")
    a = make_kernel("a")
    sock = _raw(a)
    local = f"127.0.0.1:{sock.getsockname()[1]}"
    sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert _closed_by_peer(sock)
    sock.close()
    (line,) = wait_until(lambda: _rejections(caplog, a.node), "the log line")
    assert f"from {local}: garbage" in line
    _still_serves(a, make_kernel)


def test_random_bytes_after_a_valid_magic_fail_the_cookie_check(make_kernel, caplog):
    caplog.set_level(logging.INFO, "monitors.dist")
    a = make_kernel("a")
    sock = _raw(a)
    sock.recv(38)
    sock.sendall(b"RBTD\x00\x01" + bytes(range(64)))
    assert _closed_by_peer(sock)
    sock.close()
    (line,) = wait_until(lambda: _rejections(caplog, a.node), "the log line")
    assert "bad_cookie" in line


def test_silent_client_times_out_and_is_closed(make_kernel, caplog):
    caplog.set_level(logging.INFO, "monitors.dist")
    a = make_kernel("a", handshake_timeout=0.3)
    sock = _raw(a)
    local = f"127.0.0.1:{sock.getsockname()[1]}"
    started = time.monotonic()
    assert _closed_by_peer(sock)
    assert time.monotonic() - started < 4  # closed by the timeout, not by the test
    sock.close()
    (line,) = wait_until(lambda: _rejections(caplog, a.node), "the log line")
    assert f"from {local}: timeout" in line
    _still_serves(a, make_kernel)


def test_an_oversized_frame_from_an_authenticated_peer(make_kernel, caplog):
    caplog.set_level(logging.INFO, "monitors.dist")
    a = make_kernel("a", max_frame=1000)
    probe = Probe()
    a.monitor_nodes(probe.ref)
    sock = _fake_peer(a, "x@127.0.0.1")
    probe.wait_type(NodeUp)
    sock.sendall(struct.pack(">I", 1001))  # only the header: it is refused on that
    assert _closed_by_peer(sock)
    sock.close()
    assert probe.wait_type(NodeDown) == NodeDown("x@127.0.0.1", "connection_closed")
    lines = [r.getMessage() for r in caplog.records if "bad frame" in r.getMessage()]
    assert len(lines) == 1 and "x@127.0.0.1" in lines[0] and "limit is 1000" in lines[0]
    _still_serves(a, make_kernel)


def test_an_oversized_hello_during_the_handshake(make_kernel, caplog):
    caplog.set_level(logging.INFO, "monitors.dist")
    a = make_kernel("a")
    # Authenticate by hand, then announce a 16 MiB hello.
    sock = _raw(a)
    core = Connector(COOKIE, "x@127.0.0.1", 1, a.node, nonce=b"\x07" * 32)
    sock.sendall(core.feed(sock.recv(38)).out[:70])  # the answer, without the hello
    sock.recv(32)
    sock.sendall(struct.pack(">I", 16 << 20))
    assert _closed_by_peer(sock)
    sock.close()
    (line,) = wait_until(lambda: _rejections(caplog, a.node), "the log line")
    assert "frame_too_large" in line
    assert a.nodes() == []


@pytest.mark.parametrize(
    "payload",
    [
        struct.pack(">I", 9) + b"{not json",
        struct.pack(">I", 2) + b"\xff\xfe",
        encode({"v": 2, "t": "send", "to": "echo", "m": {}}),
        struct.pack(">I", 5) + b"[1,2]",
        _deep_frame(100_000),
    ],
    ids=["not-json", "not-utf8", "wrong-version", "not-an-object", "nested-100000-deep"],
)
def test_a_bad_frame_closes_the_connection(make_kernel, caplog, payload):
    caplog.set_level(logging.INFO, "monitors.dist")
    a = make_kernel("a")
    sock = _fake_peer(a, "x@127.0.0.1")
    wait_until(lambda: a.nodes() == ["x@127.0.0.1"], "x up")
    sock.sendall(payload)
    assert _closed_by_peer(sock)
    sock.close()
    wait_until(lambda: a.nodes() == [], "x down")
    assert [r for r in caplog.records if "bad frame from x@127.0.0.1" in r.getMessage()]


def test_a_malformed_but_valid_frame_is_dropped_and_the_connection_stays(make_kernel, caplog):
    caplog.set_level(logging.INFO, "monitors.dist")
    a = make_kernel("a")
    probe = Probe()
    a.register("inbox", probe.ref)
    sock = _fake_peer(a, "x@127.0.0.1")
    wait_until(lambda: a.nodes() == ["x@127.0.0.1"], "x up")
    sock.sendall(
        encode({"v": 1, "t": "send", "m": {}})  # no "to"
        + encode({"v": 1, "t": "call", "id": 1, "to": 5, "m": {}})  # "to" not a string
        + encode({"v": 1, "t": "link", "from": 1, "to": "inbox"})
        + encode({"v": 1, "t": "no-such-type"})
        + encode({"v": 1, "t": "send", "to": "inbox", "m": {"ok": 1}})
    )
    wait_until(probe.messages, "the good message")
    assert probe.messages()[0].msg == {"ok": 1}
    assert a.nodes() == ["x@127.0.0.1"]
    dropped = [r for r in caplog.records if "malformed" in r.getMessage()]
    assert len(dropped) == 3
    assert exit_reason(probe.ref) is None
    sock.close()


def test_a_flood_from_one_address_evicts_the_oldest_pending_not_the_newcomer(make_kernel, caplog):
    caplog.set_level(logging.INFO, "monitors.dist")
    a = make_kernel("a", max_handshakes=4, handshake_timeout=5.0)
    socks = [_raw(a) for _ in range(10)]
    wait_until(
        lambda: [r for r in caplog.records if "too many pending connections" in r.getMessage()],
        "evictions",
    )
    assert _closed_by_peer(socks[0])  # the oldest went to make room
    _still_serves(a, make_kernel)  # a newcomer from the same address still joins
    for sock in socks:
        sock.close()


def test_a_hello_nested_100000_deep_is_a_protocol_error_not_a_traceback(make_kernel, caplog):
    caplog.set_level(logging.INFO, "monitors.dist")
    a = make_kernel("a")
    sock = _raw(a)
    core = Connector(COOKIE, "x@127.0.0.1", 1, a.node, nonce=b"\x07" * 32)
    sock.sendall(core.feed(sock.recv(38)).out[:70])
    sock.recv(32)
    sock.sendall(_deep_frame(100_000))
    assert _closed_by_peer(sock)
    sock.close()
    (line,) = wait_until(lambda: _rejections(caplog, a.node), "the log line")
    assert "bad_frame" in line and "deeper than" in line
    assert not [r for r in caplog.records if r.exc_info]
