"""Each toxic's effect on real bytes through a real echo (or sink) server, driven by the
toxiproxy-python client. Timing bounds are generous; waits are on conditions."""

from __future__ import annotations

import contextlib
import socket
import time

import pytest
import requests
from toxiproxy import Toxiproxy

from tests.faultproxy.conftest import connect, recv_exactly


def _round_trip(sock: socket.socket, payload: bytes = b"ping") -> float:
    start = time.monotonic()
    sock.sendall(payload)
    assert recv_exactly(sock, len(payload)) == payload
    return time.monotonic() - start


def _read_to_eof(sock: socket.socket) -> bytes:
    buf = b""
    while data := sock.recv(65536):
        buf += data
    return buf


def test_plain_proxying_and_many_proxies(client: Toxiproxy, echo: str) -> None:
    proxies = [client.create(upstream=echo, name=f"p{i}") for i in range(20)]
    socks = [connect(p.listen) for p in proxies]
    for i, sock in enumerate(socks):
        sock.sendall(b"x" * i + b"!")
    for i, sock in enumerate(socks):
        assert recv_exactly(sock, i + 1) == b"x" * i + b"!"
        sock.close()
    big = bytes(range(256)) * 4096  # 1 MiB both ways
    with connect(proxies[0].listen) as sock:
        sock.sendall(big)
        assert recv_exactly(sock, len(big)) == big


def test_latency_with_jitter_applies_to_live_connections(client: Toxiproxy, echo: str) -> None:
    proxy = client.create(upstream=echo, name="lat")
    with connect(proxy.listen) as sock:
        assert _round_trip(sock) < 0.5
        proxy.add_toxic(type="latency", attributes={"latency": 300, "jitter": 50})
        elapsed = _round_trip(sock)
        assert 0.24 <= elapsed < 2.0
        proxy.add_toxic(type="latency", stream="upstream", attributes={"latency": 300})
        assert 0.5 <= _round_trip(sock) < 3.0
        proxy.destroy_toxic("latency_downstream")
        proxy.destroy_toxic("latency_upstream")
        assert _round_trip(sock) < 0.5


def test_toxicity_zero_never_applies(client: Toxiproxy, echo: str) -> None:
    proxy = client.create(upstream=echo, name="t0")
    proxy.add_toxic(type="latency", toxicity=0.0, attributes={"latency": 2000})
    with connect(proxy.listen) as sock:
        assert _round_trip(sock) < 1.0


def test_toxicity_is_drawn_per_connection(client: Toxiproxy, echo: str) -> None:
    proxy = client.create(upstream=echo, name="half")
    proxy.add_toxic(type="limit_data", toxicity=0.5, attributes={"bytes": 1})
    outcomes = set()
    for _ in range(40):
        with connect(proxy.listen) as sock:
            sock.sendall(b"hello")
            outcomes.add(recv_exactly(sock, 5))
    assert outcomes == {b"h", b"hello"}


def test_bandwidth_limits_rate(client: Toxiproxy, echo: str) -> None:
    proxy = client.create(upstream=echo, name="bw")
    proxy.add_toxic(type="bandwidth", attributes={"rate": 200})  # KB/s
    payload = b"r" * 100_000
    with connect(proxy.listen) as sock:
        start = time.monotonic()
        sock.sendall(payload)
        assert recv_exactly(sock, len(payload)) == payload
        elapsed = time.monotonic() - start
    assert 0.4 <= elapsed < 5.0  # 100 KB at 200 KB/s is 0.5 s


def test_timeout_zero_cuts_until_removed(client: Toxiproxy, echo: str) -> None:
    proxy = client.create(upstream=echo, name="cut")
    with connect(proxy.listen, timeout=0.5) as sock:
        assert _round_trip(sock) < 0.5
        proxy.add_toxic(type="timeout", attributes={"timeout": 0})
        sock.sendall(b"lost")
        with pytest.raises(TimeoutError):
            sock.recv(10)
        proxy.destroy_toxic("timeout_downstream")  # Cleanup closes the connection it held
        sock.settimeout(5)
        assert _read_to_eof(sock) == b""


def test_timeout_closes_after_delay(client: Toxiproxy, echo: str) -> None:
    proxy = client.create(upstream=echo, name="to")
    proxy.add_toxic(type="timeout", stream="upstream", attributes={"timeout": 200})
    with connect(proxy.listen) as sock:
        start = time.monotonic()
        sock.sendall(b"dropped")
        assert _read_to_eof(sock) == b""
        assert 0.15 <= time.monotonic() - start < 3.0


def test_disable_drops_connections_and_closes_listener(client: Toxiproxy, echo: str) -> None:
    proxy = client.create(upstream=echo, name="dn")
    sock = connect(proxy.listen)
    assert _round_trip(sock) < 0.5
    with proxy.down():
        assert _read_to_eof(sock) == b""
        host, _, port = proxy.listen.rpartition(":")
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((host, int(port)), timeout=2)
    sock.close()
    with connect(proxy.listen) as again:
        assert _round_trip(again) < 0.5


def test_reset_peer_gives_econnreset(client: Toxiproxy, echo: str) -> None:
    proxy = client.create(upstream=echo, name="rst")
    proxy.add_toxic(type="reset_peer", attributes={"timeout": 100})
    with connect(proxy.listen) as sock:
        sock.sendall(b"boom")
        with pytest.raises(ConnectionResetError):
            for _ in range(100):
                if not sock.recv(10):
                    break
                time.sleep(0.01)


def test_slicer_chunks_the_stream(client: Toxiproxy, echo: str) -> None:
    proxy = client.create(upstream=echo, name="sl")
    proxy.add_toxic(
        type="slicer", attributes={"average_size": 10, "size_variation": 0, "delay": 20_000}
    )
    payload = b"s" * 100
    with connect(proxy.listen) as sock:
        sock.sendall(payload)
        sizes: list[int] = []
        while sum(sizes) < len(payload):
            sizes.append(len(sock.recv(1000)))
    assert max(sizes) <= 10
    assert len(sizes) >= 5


def test_limit_data_closes_after_n_bytes(client: Toxiproxy, echo: str) -> None:
    proxy = client.create(upstream=echo, name="lim")
    proxy.add_toxic(type="limit_data", attributes={"bytes": 10})
    with connect(proxy.listen) as sock:
        sock.sendall(b"0123456789abcdef")
        assert _read_to_eof(sock) == b"0123456789"
    proxy.destroy_toxic("limit_data_downstream")
    proxy.add_toxic(type="limit_data", stream="upstream", attributes={"bytes": 3})
    with connect(proxy.listen) as sock:
        sock.sendall(b"abcdef")
        assert _read_to_eof(sock) == b"abc"


def test_slow_close_holds_the_close(client: Toxiproxy, echo: str) -> None:
    proxy = client.create(upstream=echo, name="sc")
    proxy.add_toxic(type="slow_close", attributes={"delay": 400})
    with connect(proxy.listen) as sock:
        sock.sendall(b"bye")
        assert recv_exactly(sock, 3) == b"bye"
        start = time.monotonic()
        sock.shutdown(socket.SHUT_WR)
        assert _read_to_eof(sock) == b""
        assert 0.3 <= time.monotonic() - start < 3.0


def test_upstream_unreachable_closes_client(client: Toxiproxy) -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    proxy = client.create(upstream=f"127.0.0.1:{port}", name="dead")
    with connect(proxy.listen) as sock, contextlib.suppress(ConnectionResetError):
        assert sock.recv(10) == b""


def test_server_that_speaks_first(client: Toxiproxy) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        proxy = client.create(upstream=f"127.0.0.1:{port}", name="greet")
        with connect(proxy.listen) as sock:
            conn, _ = listener.accept()
            with conn:
                conn.sendall(b"220 hello\r\n")
                conn.shutdown(socket.SHUT_WR)
                assert _read_to_eof(sock) == b"220 hello\r\n"


def test_many_connections_at_once_under_latency(client: Toxiproxy, echo: str) -> None:
    proxy = client.create(upstream=echo, name="many")
    proxy.add_toxic(type="latency", attributes={"latency": 200})
    socks = [connect(proxy.listen) for _ in range(50)]
    start = time.monotonic()
    for i, sock in enumerate(socks):
        sock.sendall(b"%03d" % i)
    for i, sock in enumerate(socks):
        assert recv_exactly(sock, 3) == b"%03d" % i
        sock.close()
    assert 0.15 <= time.monotonic() - start < 3.0  # concurrent, not 50 x 200 ms


def test_created_disabled_does_not_listen(client: Toxiproxy, api: str, echo: str) -> None:
    proxy = client.create(upstream=echo, name="off", listen="127.0.0.1:0", enabled=False)
    assert proxy.enabled is False
    proxy.enable()
    listen = requests.get(f"{api}/proxies/off", timeout=10).json()["listen"]
    with connect(listen) as sock:
        assert _round_trip(sock) < 0.5
