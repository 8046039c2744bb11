"""The bus over TLS: rediss:// against a real redis-server started with --tls-port (mutual
TLS: the server asks for our certificate), and the amqps:// URL's options. Verification is
always on; certificates come from rabbitry.tls_gen."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from monitors.bus import BusUnavailable
from monitors.bus.urls import parse_bus_url
from rabbitry.testing.cluster import free_ports
from rabbitry.tls_gen import generate
from tests.bus.conftest import Inbox
from tests.services import require_amqp
from tests.socket_pump import close_all, pump

BUILD_HINT = "install a redis-server built with TLS (Debian's redis-server 7 is)"


def _candidates() -> list[str]:
    """Every redis-server on PATH (a pyenv shim may come first with an older build), then
    Debian's."""
    found = []
    for folder in [*os.environ.get("PATH", "").split(os.pathsep), "/usr/bin"]:
        path = shutil.which("redis-server", path=folder)
        if path and os.path.realpath(path) not in {os.path.realpath(p) for p in found}:
            found.append(path)
    return found


def _free_port() -> int:
    return free_ports(1)[0]  # race-free across workers (rabbitry.testing.cluster)


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory) -> Iterator[tuple[str, dict[str, Path]]]:
    """A redis-server serving only TLS on a free port, and the client's files."""
    root = tmp_path_factory.mktemp("redis-tls")
    _, files = generate(root, ["redis@127.0.0.1", "client@127.0.0.1"])
    server, client = files
    tried = []
    for binary in _candidates():
        port = _free_port()
        proc = subprocess.Popen(
            [binary, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
             "--tls-cert-file", str(server.certfile), "--tls-key-file", str(server.keyfile),
             "--tls-ca-cert-file", str(server.cafile), "--save", "", "--appendonly", "no",
             "--dir", str(root)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.poll() is None:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.02)
        if proc.poll() is None:
            try:
                yield (
                    f"127.0.0.1:{port}",
                    {
                        "cafile": client.cafile,
                        "certfile": client.certfile,
                        "keyfile": client.keyfile,
                    },
                )
            finally:
                proc.terminate()
                proc.wait(10)
            return
        tried.append(f"{binary}: {(proc.stdout.read() if proc.stdout else '').strip()[-120:]}")
    pytest.skip(
        f"no redis-server here supports --tls-port ({'; '.join(tried) or 'none found'}); {BUILD_HINT}"
    )


def _url(address: str, **files: Path) -> str:
    query = "&".join(f"{k}={v}" for k, v in files.items())
    return f"rediss://{address}/0" + (f"?{query}" if query else "")


def test_rediss_bus_carries_messages_over_mutual_tls(tls_redis, make_bus):
    address, files = tls_redis
    url = _url(address, **files)
    a, b = make_bus(url, "a"), make_bus(url, "b")
    inbox = Inbox()
    b.subscribe("w.#", inbox)
    a.publish("w.tls", {"over": "tls"})
    assert inbox.wait(1)[0].body == {"over": "tls"}
    a.send("b", "w.direct", {"to": "b"})
    assert inbox.wait_key("w.direct").body == {"to": "b"}
    # and it really is TLS with a verified server: a plain client gets nowhere
    with socket.create_connection(("127.0.0.1", int(address.split(":")[1])), timeout=5) as raw:
        raw.sendall(b"PING\r\n")
        try:
            answer = raw.recv(100)
        except OSError as exc:  # a reset
            answer = repr(exc).encode()
    assert b"PONG" not in answer


def test_rediss_without_a_client_certificate_or_with_another_ca_fails_clearly(
    tls_redis, make_bus, tmp_path
):
    address, files = tls_redis
    with pytest.raises(BusUnavailable, match=r"rediss://127\.0\.0\.1"):
        make_bus(_url(address, cafile=files["cafile"]), "nocert", connect_timeout=1)
    _, (other,) = generate(tmp_path, ["x@127.0.0.1"])  # another CA
    with pytest.raises(BusUnavailable, match="certificate verify failed"):
        make_bus(_url(address, cafile=other.cafile), "otherca", connect_timeout=1)


class TlsTerminator:
    """A TLS front for the local plain RabbitMQ, as a load balancer terminating TLS would be:
    it requires a client certificate of the CA, then pipes bytes to 127.0.0.1:5672."""

    def __init__(self, server: Path, key: Path, cafile: Path) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(server, key)
        self.context.load_verify_locations(cafile=str(cafile))
        self.context.verify_mode = ssl.CERT_REQUIRED
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.refused: list[str] = []
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                raw, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        try:
            raw.settimeout(10)
            front = self.context.wrap_socket(raw, server_side=True)
            front.settimeout(None)
        except (ssl.SSLError, OSError) as exc:
            self.refused.append(str(exc))
            raw.close()
            return
        back = socket.create_connection(("127.0.0.1", 5672))
        self._socks += [front, back]
        threading.Thread(target=pump, args=(back, front), daemon=True).start()
        pump(front, back)

    def close(self) -> None:
        close_all(self.listener, self._socks)


@pytest.mark.amqp
def test_amqps_bus_over_pikas_tls(make_bus, cleanup, tmp_path):
    cleanup["amqp"].add(require_amqp())  # the exchange and queues go, through the plain port
    _, (server, client) = generate(tmp_path, ["broker@127.0.0.1", "client@127.0.0.1"])
    front = TlsTerminator(server.certfile, server.keyfile, server.cafile)
    buses = []
    try:
        query = f"cafile={client.cafile}&certfile={client.certfile}&keyfile={client.keyfile}"
        url = f"amqps://guest:guest@127.0.0.1:{front.port}/%2F?{query}"
        a, b = buses = [make_bus(url, "a"), make_bus(url, "b")]
        inbox = Inbox()
        b.subscribe("w.#", inbox)
        a.publish("w.tls", {"over": "amqps"})
        assert inbox.wait(1)[0].body == {"over": "amqps"}
        # Without a client certificate the front refuses, and the bus says so.
        with pytest.raises(BusUnavailable, match="amqps://"):
            make_bus(f"amqps://guest:guest@127.0.0.1:{front.port}/%2F?cafile={client.cafile}",
                     "nocert", connect_timeout=2)  # fmt: skip
    finally:
        for bus in buses:
            bus.close()
        front.close()


def test_amqps_url_options():
    url = parse_bus_url("amqps://u:p@broker.example/%2F?cafile=/etc/ca.pem")
    assert url.scheme == "amqp" and url.tls and url.port == 5671 and url.cafile == "/etc/ca.pem"
    assert url.redacted() == "amqps://u:***@broker.example:5671/%2F?cafile=%2Fetc%2Fca.pem"
    with pytest.raises(ValueError, match="certfile and keyfile go together"):
        parse_bus_url("amqps://broker/%2F?certfile=/c.pem")
    with pytest.raises(ValueError, match="query strings"):
        parse_bus_url("amqp://broker/%2F?cafile=/c.pem")
