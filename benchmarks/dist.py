"""Distribution-layer benchmarks (issue 3). Each figure is printed next to a plain-socket
baseline measured in the same run, with the ratio and the goal.

1. call round trip p50/p99 between two nodes (goal: p50 <= 0.5 ms), against a plain TCP echo
   of the same JSON frame (sendall + recv, no framework);
2. one-way send throughput (goal: >= 50k msg/s), against a plain socket sending the same
   frames one sendall each to a thread that decodes them;
3. time to NodeDown for a SIGKILLed peer process (goal: <= 0.2 s; baseline: the plain socket
   seeing EOF) and for a SIGSTOPped one (goal: <= net_ticktime + 0.5 s; plain TCP never
   notices), with net_ticktime 1 s and 4 s.

1 and 2 run twice: two nodes in this process (one GIL for both), and two processes on
loopback (the peer is this script with --serve, started by rabbitry.testing.launcher).

4. dist over mutual TLS 1.3 (issue 16) next to plain dist, same run, same processes' setup:
   call p50/p99 and one-way msg/s (goals: TLS throughput >= 0.7x plain, call p50 <= 0.5 ms).

Usage: python benchmarks/dist.py [--quick] [--skip-nodedown] [--only-tls]
"""

from __future__ import annotations

import argparse
import json
import logging
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from monitors.dist import Message, NetKernel, NodeDown
from monitors.tls import TlsContexts, TlsFiles
from rabbitry.testing.launcher import Launcher, NodeSpec
from supervisors import Process

COOKIE = b"bench-cookie"
HEADER = struct.Struct(">I")
PAYLOAD = {"op": "echo", "n": 12345, "text": "a message of typical size"}


# ------------------------------------------------------------------ the serving side


class Echo(Process):
    def on_receive(self, message: Any) -> Any:
        return message.msg if isinstance(message, Message) else None


class Sink(Process):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Message) and message.msg.get("op") == "count":
            return self.count
        self.count += 1
        return None


def _recv_exact(sock: socket.socket, size: int, buf: bytearray) -> bool:
    while len(buf) < size:
        chunk = sock.recv(262144)
        if not chunk:
            return False
        buf += chunk
    return True


def _plain_server(handler) -> str:
    server = socket.create_server(("127.0.0.1", 0))

    def accept() -> None:
        while True:
            conn, _ = server.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=handler, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return f"127.0.0.1:{server.getsockname()[1]}"


def _plain_echo(conn: socket.socket) -> None:
    """Read one frame, decode it, send it back encoded: what a call does, minus rabbitry."""
    buf = bytearray()
    while _recv_exact(conn, 4, buf):
        (size,) = HEADER.unpack_from(buf)
        if not _recv_exact(conn, 4 + size, buf):
            return
        body = json.loads(bytes(buf[4 : 4 + size]))
        del buf[: 4 + size]
        out = json.dumps(body).encode()
        conn.sendall(HEADER.pack(len(out)) + out)


def _plain_sink(conn: socket.socket) -> None:
    """Decode frames, count them; answer b"k" on {"done": ...}."""
    buf = b""
    count = 0
    while True:
        chunk = conn.recv(262144)
        if not chunk:
            return
        buf += chunk
        pos = 0
        while len(buf) - pos >= 4:
            (size,) = HEADER.unpack_from(buf, pos)
            if len(buf) - pos - 4 < size:
                break
            body = json.loads(buf[pos + 4 : pos + 4 + size])
            pos += 4 + size
            count += 1
            if "done" in body:
                conn.sendall(b"k")
        buf = buf[pos:]


def tls_for(directory: str | None, name: str) -> TlsContexts | None:
    """The TLS contexts of node `name` from a `rabbitry tls gen` directory (None: plain)."""
    if directory is None:
        return None
    short = name.partition("@")[0]
    root = Path(directory)
    files = TlsFiles(root / f"{short}.pem", root / f"{short}-key.pem", root / "ca.pem")
    return TlsContexts(files, name)


def serve(name: str, net_ticktime: float, tls_dir: str | None = None) -> tuple[Any, str, str]:
    """Start a node with "echo" and "sink", and the two plain servers."""
    ref = NetKernel.start(
        name, "127.0.0.1:0", COOKIE, net_ticktime=net_ticktime, tls=tls_for(tls_dir, name)
    )
    kernel = NetKernel.of(ref)
    kernel.register("echo", Echo.start())
    kernel.register("sink", Sink.start())
    return kernel, _plain_server(_plain_echo), _plain_server(_plain_sink)


def serve_main(name: str, net_ticktime: float, tls_dir: str | None = None) -> None:
    logging.basicConfig(level=logging.WARNING)
    kernel, echo, sink = serve(name, net_ticktime, tls_dir)
    print(f"READY {kernel.node} {kernel.address} {echo} {sink}", flush=True)
    sys.stdin.read()  # until the launcher closes stdin or signals us


# ------------------------------------------------------------------ measurements


def _connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _percentiles(samples: list[float]) -> tuple[float, float]:
    samples = sorted(samples)
    return samples[len(samples) // 2], samples[int(len(samples) * 0.99)]


def call_latency(kernel: NetKernel, peer: str, n: int) -> tuple[float, float]:
    for _ in range(200):
        kernel.call(peer, "echo", PAYLOAD)
    samples = []
    clock = time.perf_counter
    for _ in range(n):
        start = clock()
        kernel.call(peer, "echo", PAYLOAD)
        samples.append(clock() - start)
    return _percentiles(samples)


def plain_latency(address: str, n: int) -> tuple[float, float]:
    sock = _connect(address)
    body = json.dumps(PAYLOAD).encode()
    frame = HEADER.pack(len(body)) + body
    buf = bytearray()
    samples = []
    clock = time.perf_counter
    for i in range(n + 200):
        start = clock()
        sock.sendall(frame)
        _recv_exact(sock, 4, buf)
        (size,) = HEADER.unpack_from(buf)
        _recv_exact(sock, 4 + size, buf)
        json.loads(bytes(buf[4 : 4 + size]))
        del buf[: 4 + size]
        if i >= 200:
            samples.append(clock() - start)
    sock.close()
    return _percentiles(samples)


def send_rate(kernel: NetKernel, peer: str, n: int) -> float:
    base = kernel.call(peer, "sink", {"op": "count"})
    start = time.perf_counter()
    for i in range(n):
        kernel.send(peer, "sink", {"i": i, "text": "one-way message"})
    # The call is queued behind every send: its answer means all were handled.
    got = kernel.call(peer, "sink", {"op": "count"}, timeout=120)
    elapsed = time.perf_counter() - start
    assert got - base == n, (got, base, n)
    return n / elapsed


def plain_rate(address: str, n: int) -> float:
    sock = _connect(address)
    start = time.perf_counter()
    for i in range(n):
        body = json.dumps({"i": i, "text": "one-way message"}).encode()
        sock.sendall(HEADER.pack(len(body)) + body)
    body = json.dumps({"done": True}).encode()
    sock.sendall(HEADER.pack(len(body)) + body)
    assert sock.recv(1) == b"k"
    elapsed = time.perf_counter() - start
    sock.close()
    return n / elapsed


def report_pair(label: str, kernel: NetKernel, peer: str, plain: tuple[str, str], args) -> None:
    echo, sink = plain
    n_calls = 2000 if args.quick else 10000
    n_sends = 50000 if args.quick else 200000
    p50, p99 = call_latency(kernel, peer, n_calls)
    b50, b99 = plain_latency(echo, n_calls)
    print(f"call round trip, {label}: p50 {p50 * 1e3:.3f} ms, p99 {p99 * 1e3:.3f} ms")
    print(f"  plain socket echo:        p50 {b50 * 1e3:.3f} ms, p99 {b99 * 1e3:.3f} ms")
    print(
        f"  ratio call/plain: p50 {p50 / b50:.1f}x, p99 {p99 / b99:.1f}x  "
        f"(goal p50 <= 0.5 ms: {'met' if p50 <= 0.0005 else 'MISSED'}) [{n_calls} calls]"
    )
    rates = [send_rate(kernel, peer, n_sends) for _ in range(3)]
    plains = [plain_rate(sink, n_sends) for _ in range(3)]
    rate, plain = statistics.median(rates), statistics.median(plains)
    print(f"one-way send, {label}: {rate:,.0f} msg/s")
    print(f"  plain socket, one sendall per frame: {plain:,.0f} msg/s")
    print(
        f"  ratio send/plain {rate / plain:.2f}  "
        f"(goal >= 50k msg/s: {'met' if rate >= 50000 else 'MISSED'}) [3 x {n_sends:,}]"
    )


def peer_spec(name: str, net_ticktime: float, tls_dir: str | None = None) -> NodeSpec:
    tls = ["--tls", tls_dir] if tls_dir else []
    return NodeSpec(
        name,
        [sys.executable, __file__, "--serve", name, "--net-ticktime", str(net_ticktime), *tls],
        ready=r"^READY (?P<node>\S+) (?P<address>\S+) (?P<echo>\S+) (?P<sink>\S+)",
    )


def bench_in_process(args) -> None:
    b, echo, sink = serve("b@127.0.0.1", 4.0)
    a = NetKernel.of(NetKernel.start("a@127.0.0.1", "127.0.0.1:0", COOKIE))
    a.set_address(b.node, b.address)
    try:
        report_pair("2 nodes in 1 process", a, b.node, (echo, sink), args)
    finally:
        a.actor_ref.stop()
        b.actor_ref.stop()


def bench_two_processes(args) -> None:
    with Launcher() as launcher:
        (peer,) = launcher.start(peer_spec("p@127.0.0.1", 4.0))
        ready = peer.wait_for(peer.spec.ready)
        a = NetKernel.of(NetKernel.start("a@127.0.0.1", "127.0.0.1:0", COOKIE))
        a.set_address("p@127.0.0.1", peer.address)
        try:
            report_pair("2 processes", a, "p@127.0.0.1", (ready["echo"], ready["sink"]), args)
        finally:
            a.actor_ref.stop()


def bench_tls(args) -> None:
    """Dist over TLS next to plain dist, two processes each way, rounds interleaved so that
    machine noise hits both alike."""
    from rabbitry.tls_gen import generate

    n_calls = 2000 if args.quick else 10000
    n_sends = 50000 if args.quick else 200000
    rounds = 3
    with tempfile.TemporaryDirectory() as tls_dir, Launcher() as launcher:
        generate(Path(tls_dir), ["a@127.0.0.1", "s@127.0.0.1", "p@127.0.0.1", "t@127.0.0.1"])
        plain_peer, tls_peer = launcher.start(
            peer_spec("p@127.0.0.1", 4.0), peer_spec("t@127.0.0.1", 4.0, tls_dir)
        )
        a = NetKernel.of(NetKernel.start("a@127.0.0.1", "127.0.0.1:0", COOKIE))
        s = NetKernel.of(
            NetKernel.start(
                "s@127.0.0.1", "127.0.0.1:0", COOKIE, tls=tls_for(tls_dir, "s@127.0.0.1")
            )
        )
        a.set_address("p@127.0.0.1", plain_peer.address)
        s.set_address("t@127.0.0.1", tls_peer.address)
        pairs = {"plain": (a, "p@127.0.0.1"), "tls": (s, "t@127.0.0.1")}
        calls: dict[str, list[tuple[float, float]]] = {"plain": [], "tls": []}
        rates: dict[str, list[float]] = {"plain": [], "tls": []}
        try:
            for _ in range(rounds):
                for mode, (kernel, peer) in pairs.items():
                    calls[mode].append(call_latency(kernel, peer, n_calls // rounds))
                    rates[mode].append(send_rate(kernel, peer, n_sends))
        finally:
            a.actor_ref.stop()
            s.actor_ref.stop()
    (p50, p99), (t50, t99) = (
        tuple(statistics.median(x[i] for x in calls[m]) for i in (0, 1)) for m in ("plain", "tls")
    )
    rate, trate = statistics.median(rates["plain"]), statistics.median(rates["tls"])
    print(
        f"call round trip over TLS 1.3, 2 processes: p50 {t50 * 1e3:.3f} ms, p99 {t99 * 1e3:.3f} ms"
    )
    print(
        f"  plain dist, same run:                    p50 {p50 * 1e3:.3f} ms, p99 {p99 * 1e3:.3f} ms"
    )
    print(
        f"  ratio TLS/plain: p50 {t50 / p50:.2f}x, p99 {t99 / p99:.2f}x  "
        f"(goal p50 <= 0.5 ms: {'met' if t50 <= 0.0005 else 'MISSED'}) [{rounds} x {n_calls // rounds}]"
    )
    print(f"one-way send over TLS 1.3, 2 processes: {trate:,.0f} msg/s")
    print(f"  plain dist, same run: {rate:,.0f} msg/s")
    print(
        f"  ratio TLS/plain {trate / rate:.2f}  "
        f"(goal >= 0.7: {'met' if trate >= 0.7 * rate else 'MISSED'}) [{rounds} x {n_sends:,}]"
    )


class _DownWatch(Process):
    def __init__(self, seen: dict, event: threading.Event) -> None:
        super().__init__()
        self.seen = seen
        self.event = event

    def on_receive(self, message: Any) -> None:
        if isinstance(message, NodeDown):
            self.seen["at"] = time.monotonic()
            self.seen["reason"] = message.reason
            self.event.set()


def nodedown_time(net_ticktime: float, how: str) -> tuple[float, str, float | None]:
    """Seconds from SIGKILL/SIGSTOP of a peer process to our NodeDown (and to the plain
    socket's EOF, for a kill)."""
    with Launcher(grace=2.0) as launcher:
        (peer,) = launcher.start(peer_spec("p@127.0.0.1", net_ticktime))
        ready = peer.wait_for(peer.spec.ready)
        seen: dict = {}
        event = threading.Event()
        watch = _DownWatch.start(seen, event)
        a = NetKernel.of(NetKernel.start("a@127.0.0.1", cookie=COOKIE, net_ticktime=net_ticktime))
        try:
            a.set_address("p@127.0.0.1", peer.address)
            a.monitor_nodes(watch)
            assert a.connect("p@127.0.0.1")
            plain = _connect(ready["echo"])
            eof: dict = {}

            def read_eof() -> None:
                try:
                    while plain.recv(4096):
                        pass
                except OSError:
                    pass
                eof["at"] = time.monotonic()

            reader = threading.Thread(target=read_eof, daemon=True)
            reader.start()
            time.sleep(0.3)
            start = time.monotonic()
            if how == "kill":
                peer.kill()
            else:
                peer.pause()
            event.wait(net_ticktime + 10)
            reader.join(0.5 if how == "kill" else 0)
            plain_time = eof["at"] - start if "at" in eof else None
            plain.close()
            return seen["at"] - start, seen["reason"], plain_time
        finally:
            a.actor_ref.stop()
            watch.stop()


def bench_nodedown(args) -> None:
    rounds = 1 if args.quick else 3
    for ticktime in (1.0, 4.0):
        kills = [nodedown_time(ticktime, "kill") for _ in range(rounds)]
        took = statistics.median(k[0] for k in kills)
        plain = statistics.median(k[2] for k in kills if k[2] is not None)
        print(
            f"NodeDown after SIGKILL (net_ticktime {ticktime:g} s): {took * 1e3:.1f} ms "
            f"({kills[0][1]}); plain socket EOF {plain * 1e3:.1f} ms; "
            f"ratio {took / plain:.1f}  (goal <= 200 ms: {'met' if took <= 0.2 else 'MISSED'})"
        )
        stops = [nodedown_time(ticktime, "stop") for _ in range(rounds if ticktime < 2 else 1)]
        took = statistics.median(s[0] for s in stops)
        goal = ticktime + 0.5
        print(
            f"NodeDown after SIGSTOP (net_ticktime {ticktime:g} s): {took:.3f} s "
            f"({stops[0][1]}); plain socket: never (TCP alone does not notice)  "
            f"(goal <= {goal:g} s: {'met' if took <= goal else 'MISSED'})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--skip-nodedown", action="store_true")
    parser.add_argument("--only-tls", action="store_true", help="only the TLS vs plain figures")
    parser.add_argument("--serve", metavar="NODE", help=argparse.SUPPRESS)
    parser.add_argument("--net-ticktime", type=float, default=4.0, help=argparse.SUPPRESS)
    parser.add_argument("--tls", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve_main(args.serve, args.net_ticktime, args.tls)
        return
    logging.basicConfig(level=logging.ERROR)
    print(f"python {sys.version.split()[0]}, {threading.active_count()} threads at start")
    if args.only_tls:
        bench_tls(args)
        return
    bench_tls(args)
    bench_in_process(args)
    bench_two_processes(args)
    if not args.skip_nodedown:
        bench_nodedown(args)


if __name__ == "__main__":
    main()
