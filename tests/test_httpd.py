"""HTTP that cannot be held open (issue 25): the hardened server behind the control API, the
management page, /metrics and the failover status page. Real sockets; bounds on counts and
on what the server answers, never on timings."""

from __future__ import annotations

import json
import logging
import socket
import ssl
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler

import pytest

from failover.http_status import StatusServer
from monitors.httpd import HardenedHTTPServer
from monitors.tls import TlsContexts, TlsFiles, https_client_context
from rabbitry.control import ControlServer
from rabbitry.observe.metrics import bind_metrics_server
from rabbitry.tls_gen import generate
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(60)


class _Echo(BaseHTTPRequestHandler):
    """Answers the request's body length; /block waits for the test's event."""

    gate = threading.Event()

    def do_GET(self) -> None:
        if self.path == "/block":
            self.gate.wait(30)
        self._answer({"path": self.path})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self._answer({"body": len(self.rfile.read(length)) if length > 0 else 0})

    def _answer(self, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server():
    srv = HardenedHTTPServer(
        ("127.0.0.1", 0), _Echo, what="test", header_timeout=1.0, max_connections=2
    )
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    _Echo.gate.set()
    srv.shutdown()
    srv.server_close()


def _connect(srv) -> socket.socket:
    return socket.create_connection(srv.server_address[:2], timeout=10)


def _exchange(srv, raw: bytes) -> bytes:
    with _connect(srv) as sock:
        sock.sendall(raw)
        return _read_all(sock)


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def test_a_request_is_answered_and_closed(server):
    answer = _exchange(server, b"GET /x HTTP/1.1\r\nHost: h\r\n\r\n")
    assert _status(answer) == 200 and b'"/x"' in answer and b"Connection: close" in answer


@pytest.mark.parametrize(
    ("length", "status"),
    [("-5", 400), ("abc", 400), ("1e3", 400), ("999999999", 413), (None, 200)],
)
def test_the_body_limit_cannot_be_skipped(server, length, status):
    header = f"Content-Length: {length}\r\n" if length is not None else ""
    answer = _exchange(server, f"POST / HTTP/1.1\r\nHost: h\r\n{header}\r\n".encode())
    assert _status(answer) == status
    if status == 200:
        assert b'"body": 0' in answer


def test_chunked_and_oversized_heads_are_refused(server):
    chunked = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    assert _status(_exchange(server, chunked)) == 411
    huge = b"GET / HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n"
    assert _status(_exchange(server, huge)) == 431


def _answer_or_reset(sock: socket.socket) -> bytes:
    """Everything until the server closes (a recv that times out fails the test)."""
    sock.settimeout(10)
    try:
        return _read_all(sock)
    except (ConnectionResetError, ssl.SSLError):
        return b""


def test_slowloris_is_closed_at_the_header_deadline(server):
    with _connect(server) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\n")
        stop = threading.Event()

        def trickle() -> None:  # a byte every 0.2 s: no read ever times out on its own
            while not stop.wait(0.2):
                try:
                    sock.sendall(b"X")
                except OSError:
                    return

        threading.Thread(target=trickle, daemon=True).start()
        try:
            answer = _answer_or_reset(sock)
        finally:
            stop.set()
    assert answer == b"" or _status(answer) == 408


def test_silent_sockets_cost_no_thread_and_a_request_still_gets_through():
    # A long deadline, so that all 500 are held at once however slowly they connect.
    srv = HardenedHTTPServer(("127.0.0.1", 0), _Echo, what="test", header_timeout=60.0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    before = threading.active_count()
    silent = [_connect(srv) for _ in range(500)]
    try:
        wait_until(lambda: srv.connections >= 500, "500 pending connections")
        assert threading.active_count() - before < 10  # a thread per socket would be 500
        assert _status(_exchange(srv, b"GET /ok HTTP/1.1\r\n\r\n")) == 200
    finally:
        for sock in silent:
            sock.close()
        wait_until(lambda: srv.connections == 0, "the server to drop the closed ones")
        srv.shutdown()
        srv.server_close()


def test_beyond_the_cap_a_503(server):
    _Echo.gate.clear()
    held = [_connect(server) for _ in range(2)]
    try:
        for sock in held:
            sock.sendall(b"GET /block HTTP/1.1\r\n\r\n")
        wait_until(lambda: server._busy == 2, "two requests in progress")
        assert _status(_exchange(server, b"GET / HTTP/1.1\r\n\r\n")) == 503
    finally:
        _Echo.gate.set()
        for sock in held:
            sock.close()


def test_https_also_times_out_after_the_handshake(tmp_path):
    _, (files,) = generate(tmp_path, ["x@127.0.0.1"])
    tls = TlsContexts(TlsFiles(files.certfile, files.keyfile, files.cafile))
    srv = HardenedHTTPServer(
        ("127.0.0.1", 0), _Echo, tls=tls.https_server, what="test", header_timeout=1.0
    )
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        host, port = srv.server_address[:2]
        client = https_client_context(files.cafile)
        with urllib.request.urlopen(f"https://{host}:{port}/s", context=client) as response:
            assert json.loads(response.read()) == {"path": "/s"}
        raw = socket.create_connection((host, port), timeout=10)
        with client.wrap_socket(raw, server_hostname=host) as tls_sock:
            tls_sock.sendall(b"GET / HTTP/1.1\r\n")  # then nothing
            answer = _answer_or_reset(tls_sock)
        assert answer == b"" or _status(answer) == 408
        wait_until(lambda: srv.connections == 0, "the stalled TLS client closed")
    finally:
        srv.shutdown()
        srv.server_close()


def test_slowloris_on_each_listener(monkeypatch):
    """The control API (and its management page), /metrics and the failover status page all
    close a client that never finishes its request."""
    monkeypatch.setattr("monitors.httpd.HEADER_TIMEOUT", 1.0)
    metrics = bind_metrics_server("127.0.0.1", 0, _Echo)
    status = StatusServer("127.0.0.1", 0, dict, lambda: False).start()
    control = ControlServer.start("127.0.0.1", 0, b"cookie", {})
    threading.Thread(target=metrics.serve_forever, daemon=True).start()
    try:
        addresses = [
            metrics.server_address[:2],
            status.address,
            control.proxy().get_address().get(timeout=10),
        ]
        socks = [socket.create_connection(tuple(a), timeout=10) for a in addresses]
        for sock in socks:
            sock.sendall(b"GET /ui/ HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and no more
        for sock in socks:
            answer = _answer_or_reset(sock)
            assert answer == b"" or _status(answer) == 408
            sock.close()
    finally:
        metrics.shutdown()
        metrics.server_close()
        status.close()
        control.stop()


def test_host_check_refuses_other_names_and_allows_ips():
    from monitors.httpd import host_allowed

    allowed = frozenset({"localhost", "127.0.0.1", "node.example"})
    assert host_allowed("localhost:15692", allowed)
    assert host_allowed("node.example", allowed)
    assert host_allowed("10.0.0.5:15692", allowed)  # an IP literal cannot be a rebinding
    assert host_allowed("[::1]:80", allowed)
    assert host_allowed("http://localhost:8080", allowed)  # an Origin
    assert not host_allowed("attacker.example:15692", allowed)
    assert not host_allowed(None, allowed)


class _Failing(BaseHTTPRequestHandler):
    """/gone: the client hung up mid-answer (the write fails); /bug: a handler's own bug."""

    def do_GET(self) -> None:
        if self.path == "/gone":
            raise BrokenPipeError(32, "Broken pipe")
        raise ValueError("a bug in the handler")

    def log_message(self, *_args: object) -> None:
        pass


def test_a_client_that_hangs_up_is_no_error_but_a_handler_bug_is(caplog):
    """A hang-up mid-answer is the client's loss: a debug line, no traceback (a hostile
    client could otherwise fill the log). A bug in a handler is still logged with its
    traceback."""
    srv = HardenedHTTPServer(("127.0.0.1", 0), _Failing, what="test", header_timeout=1.0)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    caplog.set_level(logging.DEBUG, logger="monitors.httpd")
    try:
        _exchange(srv, b"GET /gone HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")  # answered by a close
        gone = [r for r in caplog.records if "went away" in r.getMessage()]
        assert len(gone) == 1 and gone[0].levelno == logging.DEBUG and not gone[0].exc_info
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
        _exchange(srv, b"GET /bug HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        (bug,) = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert "serving" in bug.getMessage() and bug.exc_info is not None
    finally:
        srv.shutdown()
        srv.server_close()
