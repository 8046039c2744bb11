"""Fixtures: a fault proxy on its own loop in a thread, the toxiproxy-python client pointed at
it, and real echo and sink servers for the bytes to go through."""

from __future__ import annotations

import asyncio
import os
import socket
import socketserver
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import requests
from toxiproxy import Toxiproxy
from toxiproxy.api import APIConsumer

from rabbitry.testing.faultproxy import FaultProxyServer


class FaultProxyThread:
    """A FaultProxyServer on a private event loop, so tests can use blocking sockets."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.server = FaultProxyServer("127.0.0.1", 0)
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(5)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.close(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        try:
            while data := self.request.recv(65536):
                self.request.sendall(data)
        except OSError:
            pass


class _Sink(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        total = 0
        try:
            while data := self.request.recv(65536):
                total += len(data)
            self.request.sendall(str(total).encode())
        except OSError:
            pass


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def _run(handler: type[socketserver.BaseRequestHandler]) -> Iterator[str]:
    server = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def fp() -> Iterator[FaultProxyThread]:
    """Our server on its own loop (tests needing its internals skip under TOXIPROXY_URL)."""
    if os.environ.get("TOXIPROXY_URL"):
        pytest.skip("runs against rabbitry's own fault proxy only")
    proxy = FaultProxyThread()
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.fixture
def api(request: pytest.FixtureRequest) -> Iterator[str]:
    """The API's base URL: a real Toxiproxy at TOXIPROXY_URL if set, else our own server."""
    url = os.environ.get("TOXIPROXY_URL")
    if not url:
        fp: FaultProxyThread = request.getfixturevalue("fp")
        url = f"http://127.0.0.1:{fp.server.port}"
    parts = urlsplit(url)
    APIConsumer.host, APIConsumer.port = parts.hostname or "127.0.0.1", parts.port or 8474
    yield url.rstrip("/")
    if os.environ.get("TOXIPROXY_URL"):  # leave a shared server as we found it
        for name in requests.get(f"{url}/proxies", timeout=10).json():
            requests.delete(f"{url}/proxies/{name}", timeout=10)


@pytest.fixture
def client(api: str) -> Toxiproxy:
    return Toxiproxy()


@pytest.fixture
def echo() -> Iterator[str]:
    yield from _run(_Echo)


@pytest.fixture
def sink() -> Iterator[str]:
    yield from _run(_Sink)


def connect(listen: str, timeout: float = 5.0) -> socket.socket:
    host, _, port = listen.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        data = sock.recv(n - len(buf))
        if not data:
            break
        buf += data
    return buf
