"""Dist over mutual TLS 1.3 (docs/tls.md): real certificates from rabbitry.tls_gen, real
sockets, verification always on. A recording proxy shows that nothing readable crosses the
link; bad clients are turned away with a clear line while the node keeps serving its peers;
a plain node and a TLS node each say why they cannot talk; a CA is rotated in two steps
without a nodedown."""

from __future__ import annotations

import datetime
import logging
import socket
import ssl
import threading
from pathlib import Path

import pytest

from monitors.dist import Message, NodeDown
from monitors.tls import TlsContexts, TlsFiles
from rabbitry.tls_gen import CA, make_ca, make_cert, write_cert, write_key
from supervisors import Process
from tests.dist.helpers import Echo, Probe, mesh, wait_until
from tests.socket_pump import close_all, pump

pytestmark = pytest.mark.timeout(60)

HOST = "127.0.0.1"


def node(name: str) -> str:
    return f"{name}@{HOST}"


def _write(directory: Path, name: str, ca: CA, cafile: Path, **cert_options) -> TlsFiles:
    key, cert = make_cert(ca, node(name), **cert_options)
    files = TlsFiles(directory / f"{name}.pem", directory / f"{name}-key.pem", cafile)
    write_key(files.keyfile, key)
    write_cert(files.certfile, cert)
    return files


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict:
    """One CA with certificates for a, b, c, x; another CA; an expired certificate."""
    root = tmp_path_factory.mktemp("pki")
    ca, other = make_ca(), make_ca("another CA")
    cafile, other_cafile = root / "ca.pem", root / "other-ca.pem"
    write_cert(cafile, ca.cert)
    write_cert(other_cafile, other.cert)
    files = {n: _write(root, n, ca, cafile) for n in ("a", "b", "c", "x")}
    files["stranger"] = _write(root, "stranger", other, other_cafile)
    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=30)
    files["expired"] = _write(
        root, "expired", ca, cafile, not_before=past, not_after=past + datetime.timedelta(days=1)
    )
    return {"ca": ca, "cafile": cafile, "files": files, "root": root}


def tls_for(pki: dict, name: str) -> TlsContexts:
    return TlsContexts(pki["files"][name], node(name))


def _lines(caplog, prefix: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(prefix)]


def test_tls_link_carries_sends_and_calls(make_kernel, pki, caplog):
    caplog.set_level(logging.INFO, "monitors.dist")
    a = make_kernel("a", tls=tls_for(pki, "a"))
    b = make_kernel("b", tls=tls_for(pki, "b"))
    mesh(a, b)
    b.register("echo", Echo.start())
    for i in range(50):
        assert a.call(b.node, "echo", {"op": "echo", "i": i})["msg"]["i"] == i
    big = "y" * 500_000  # many records in one frame
    assert a.call(b.node, "echo", {"op": "echo", "big": big})["msg"]["big"] == big
    assert any("over TLSv1.3" in line for line in _lines(caplog, "dist a@127.0.0.1: node up"))


class RecordingProxy:
    """A TCP proxy that keeps every byte going each way."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.listener = socket.create_server((HOST, 0))
        self.address = f"{HOST}:{self.listener.getsockname()[1]}"
        self.to_server = bytearray()
        self.to_client = bytearray()
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        try:
            client, _ = self.listener.accept()
        except OSError:
            return
        server = socket.create_connection(self.upstream)
        self._socks += [client, server]
        for src, dst, log in ((client, server, self.to_server), (server, client, self.to_client)):
            threading.Thread(target=pump, args=(src, dst, log), daemon=True).start()

    def close(self) -> None:
        close_all(self.listener, self._socks)


def test_recording_proxy_sees_a_tls_handshake_and_nothing_readable(make_kernel, pki):
    a = make_kernel("a", cookie=b"the-secret-cookie-value", tls=tls_for(pki, "a"))
    b = make_kernel("b", cookie=b"the-secret-cookie-value", tls=tls_for(pki, "b"))
    proxy = RecordingProxy(b.address)
    try:
        a.set_address(b.node, proxy.address)
        b.register("echo", Echo.start())
        secret = "payload-that-must-not-show"
        assert a.call(b.node, "echo", {"op": "echo", "s": secret})["msg"]["s"] == secret
        a.send(b.node, "echo", {"op": "note", "s": secret})
        wait_until(lambda: len(proxy.to_server) > 600, "the send through the proxy")
        up, down = bytes(proxy.to_server), bytes(proxy.to_client)
        # A TLS ClientHello first (handshake record, version 3.x), a TLS answer back.
        assert up[:2] == b"\x16\x03" and down[:2] == b"\x16\x03"
        for clear in (
            b"a@127.0.0.1",
            b"b@127.0.0.1",
            b"the-secret-cookie-value",
            b"RBTD",
            secret.encode(),
            b'"t":',
            b"hello",
            b"echo",
        ):
            assert clear not in up and clear not in down, clear
    finally:
        proxy.close()


def _tls_client(pki: dict, name: str | None, kernel, cafile: Path | None = None) -> str:
    """Connect with a raw TLS client presenting `name`'s certificate (None: no certificate);
    return how it ended."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.load_verify_locations(cafile=str(cafile or pki["cafile"]))
    if name is not None:
        files = pki["files"][name]
        ctx.load_cert_chain(files.certfile, files.keyfile)
    host, port = kernel.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        try:
            with ctx.wrap_socket(raw) as tls:
                return f"read {tls.recv(100)!r}"  # TLS 1.3: the server's verdict comes now
        except (ssl.SSLError, OSError) as exc:
            return f"failed {exc}"


def test_bad_clients_are_turned_away_and_the_node_keeps_serving(make_kernel, pki, caplog):
    caplog.set_level(logging.DEBUG, "monitors.dist")
    b = make_kernel("b", tls=tls_for(pki, "b"), handshake_timeout=1.0)
    a = make_kernel("a", tls=tls_for(pki, "a"))
    mesh(a, b)
    b.register("echo", Echo.start())
    watcher = Probe()
    a.monitor_nodes(watcher.ref)
    assert a.call(b.node, "echo", {"op": "echo"})["node"] == a.node

    rejected = f"dist {b.node}: rejected connection from 127.0.0.1:"
    cases = {
        "stranger": "unknown ca",
        "expired": "certificate has expired",
        None: "peer did not return a certificate",
    }
    for name, reason in cases.items():
        before = len(_lines(caplog, rejected))
        outcome = _tls_client(
            pki, name, b, cafile=pki["files"]["stranger"].cafile if name == "stranger" else None
        )
        assert not outcome.startswith("read b'\\x00"), outcome
        line = wait_until(
            lambda before=before: _lines(caplog, rejected)[before:], f"b's line for {name}"
        )[0]
        assert reason in line, line

    # A valid certificate of x cannot claim to be c.
    impostor = make_kernel("c", tls=tls_for(pki, "x"))
    mesh(impostor, b)
    assert impostor.connect(b.node) is False
    line = wait_until(
        lambda: _lines(caplog, f"dist {b.node}: refused c@127.0.0.1 from"), "b's line"
    )
    assert "names URI:rabbitry://x@127.0.0.1" in line[0] and "not c@127.0.0.1" in line[0]
    # ... nor answer for c when dialled as c.
    b.set_address(node("c"), impostor.address)
    assert b.connect(node("c")) is False
    line = wait_until(lambda: _lines(caplog, f"dist {b.node}: cannot connect to c@127.0.0.1"), "b")
    assert "not c@127.0.0.1" in line[0] and "backing off" in line[0]

    # A plain-text client: no TLS hello, so it is turned away at the handshake timeout.
    plain = make_kernel("p")
    mesh(plain, b)
    assert plain.connect(b.node, timeout=3) is False
    line = wait_until(lambda: [x for x in _lines(caplog, rejected) if "sent nothing" in x], "plain")
    assert "without `tls:`" in line[0]

    assert a.call(b.node, "echo", {"op": "echo"})["node"] == a.node
    assert b.nodes() == [a.node]
    assert not [m for m in watcher.messages() if isinstance(m, NodeDown)]


def test_plain_and_tls_nodes_each_say_why_and_back_off(make_kernel, pki, caplog):
    caplog.set_level(logging.DEBUG, "monitors.dist")
    secure = make_kernel("a", tls=tls_for(pki, "a"))
    plain = make_kernel("b")
    mesh(secure, plain)
    assert secure.connect(plain.node) is False
    mine = wait_until(lambda: _lines(caplog, f"dist {secure.node}: cannot connect"), "a's line")
    assert "plain dist" in mine[0] and "without `tls:`" in mine[0] and plain.address in mine[0]
    assert "backing off" in mine[0]
    theirs = wait_until(lambda: _lines(caplog, f"dist {plain.node}: rejected"), "b's line")
    assert "TLS client hello" in theirs[0] and "127.0.0.1:" in theirs[0]
    # Backing off: the next attempt does not even open a socket, and says nothing new.
    assert secure.connect(plain.node) is False
    warned = [
        r
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.getMessage().startswith(f"dist {secure.node}: cannot")
    ]
    assert len(warned) == 1


class _Counter(Process):
    """Records (sender thread, sequence) of each message, to check order per sender."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, list[int]] = {}

    def on_receive(self, message):
        if isinstance(message, Message):
            if message.msg.get("op") == "count":
                return sum(len(v) for v in self.seen.values())
            if message.msg.get("op") == "report":
                return self.seen
            self.seen.setdefault(message.msg["w"], []).append(message.msg["i"])
        return None


def test_many_writers_both_ways_keep_order_over_tls(make_kernel, pki):
    """Records are sealed by whoever holds the writer's turn: many threads sending at once
    (direct sends, queued batches, replies from the other side) must reach the peer whole and
    in order per sender."""
    a = make_kernel("a", tls=tls_for(pki, "a"))
    b = make_kernel("b", tls=tls_for(pki, "b"))
    mesh(a, b)
    a.register("counter", _Counter.start())
    b.register("counter", _Counter.start())
    a.register("echo", Echo.start())
    b.register("echo", Echo.start())
    n, writers = 2000, 4
    errors: list[BaseException] = []

    def work(src, dst, name: str) -> None:
        try:
            for i in range(n):
                src.send(dst.node, "counter", {"w": name, "i": i, "pad": "z" * (i % 300)})
                if i % 200 == 0:
                    assert src.call(dst.node, "echo", {"op": "echo", "i": i})["msg"]["i"] == i
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=work, args=(src, dst, f"{src.node}-{k}"))
        for src, dst in ((a, b), (b, a))
        for k in range(writers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    for src, dst in ((a, b), (b, a)):
        wait_until(
            lambda src=src, dst=dst: src.call(dst.node, "counter", {"op": "count"}) == n * writers,
            "every message",
        )
        seen = src.call(dst.node, "counter", {"op": "report"})
        assert all(seq == list(range(n)) for seq in seen.values()) and len(seen) == writers
    assert a.nodes() == [b.node]
