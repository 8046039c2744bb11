"""Fault-proxy throughput (issue 4): bytes per second through a proxy with no toxic, against a
direct loopback connection to the same sink, measured in the same run (goal: ratio >= 0.8).

The fault proxy runs in a subprocess (`rabbitry faultproxy --listen 127.0.0.1:0`), as users
run it, so it does not share a GIL with the sender and the sink.

Usage: python benchmarks/faultproxy.py [--mib 512] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

CHUNK = 256 * 1024


def _sink_server() -> tuple[socket.socket, int]:
    """A sink that reads until EOF, then replies with the byte count (so the sender can time it)."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=drain, args=(conn,), daemon=True).start()

    def drain(conn: socket.socket) -> None:
        total = 0
        buf = bytearray(CHUNK)
        with conn:
            while n := conn.recv_into(buf):
                total += n
            conn.sendall(str(total).encode())

    threading.Thread(target=serve, daemon=True).start()
    return listener, listener.getsockname()[1]


def _send(port: int, total: int) -> float:
    """Send `total` bytes, half-close, wait for the sink's count; bytes per second."""
    payload = b"\x5a" * CHUNK
    with socket.create_connection(("127.0.0.1", port)) as sock:
        start = time.perf_counter()
        sent = 0
        while sent < total:
            sock.sendall(payload)
            sent += len(payload)
        sock.shutdown(socket.SHUT_WR)
        reply = b""
        while data := sock.recv(64):
            reply += data
        elapsed = time.perf_counter() - start
    assert int(reply) == sent, (reply, sent)
    return sent / elapsed


def _api(address: str, method: str, path: str, body: object = None) -> object:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://{address}{path}", data=data, method=method)
    with urllib.request.urlopen(request, timeout=10) as response:
        raw = response.read()
    return json.loads(raw) if raw else None


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mib", type=int, default=512, help="MiB sent per measurement")
    parser.add_argument(
        "--rounds", type=int, default=3, help="measurements of each; the best is kept"
    )
    args = parser.parse_args()
    total = args.mib * 1024 * 1024

    listener, sink_port = _sink_server()
    proc = subprocess.Popen(
        [sys.executable, "-m", "rabbitry", "faultproxy", "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        address = proc.stdout.readline().split()[1]
        proxy = _api(
            address,
            "POST",
            "/proxies",
            {"name": "bench", "upstream": f"127.0.0.1:{sink_port}", "listen": "127.0.0.1:0"},
        )
        proxy_port = int(proxy["listen"].rpartition(":")[2])  # type: ignore[index]
        direct, proxied = [], []
        for _ in range(args.rounds):  # interleaved, so drift hits both alike
            direct.append(_send(sink_port, total))
            proxied.append(_send(proxy_port, total))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
        listener.close()

    best_direct, best_proxied = max(direct), max(proxied)
    ratio = best_proxied / best_direct
    print(
        f"direct loopback : {best_direct / 1e6:9.1f} MB/s  (best of {args.rounds}, {args.mib} MiB each)"
    )
    print(f"through proxy   : {best_proxied / 1e6:9.1f} MB/s")
    print(f"ratio           : {ratio:9.2f}  (goal >= 0.80: {'met' if ratio >= 0.8 else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
