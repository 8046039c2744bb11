"""Availability under a hostile or broken neighbour (issue 25). Every figure is printed next
to the same measurement with no attack, in the same run, with the ratio and the goal.

The attacked node is a real `rabbitry node start` process (dist, control API, /metrics).
Under each attack, from the same address (127.0.0.1):

- join: a fresh right-cookie NetKernel in this process connects to it (median of N tries;
  goal: at most 1.5x the no-attack join);
- status: `GET /status` on the control API (median; it must answer);
- threads and RSS of the attacked process (from /proc), at the end of the attack.

Attacks: a stale-cookie neighbour retrying in a loop (as a Spark executor with an old cookie
file would); 50 parallel wrong-cookie guessers; 200 silent sockets on the dist port; 500
silent sockets on the control port; 200 slowloris clients on the control port.

Then the guesses per second the tarpit lets through: 50 parallel guessers against an
in-process node for 5 s, counted by the node's own tarpit (goal: at most 10/s).

Usage: python benchmarks/hostile.py [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from monitors.dist import NetKernel
from monitors.dist.handshake import Connector
from rabbitry.control import ControlClient
from rabbitry.testing.launcher import Launcher, NodeSpec

COOKIE = b"hostile-benchmark-cookie-0123456789"
READY = r"^READY (?P<node>\S+) (?P<address>\S+) control=(?P<control>\S+) metrics=(?P<metrics>\S+)"


def _proc(pid: int) -> tuple[int, float]:
    """(threads, RSS in MiB) of a process."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return int(fields["Threads"]), int(fields["VmRSS"].split()[0]) / 1024


def _address(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


def join_time(target: str, address: str, tries: int) -> float:
    """Median seconds for a fresh right-cookie node to connect to `target`."""
    samples = []
    for i in range(tries):
        ref = NetKernel.start(f"joiner{i}-{time.monotonic_ns()}@127.0.0.1", cookie=COOKIE)
        kernel = NetKernel.of(ref)
        kernel.set_address(target, address)
        started = time.perf_counter()
        ok = kernel.connect(target, timeout=10)
        samples.append(time.perf_counter() - started if ok else float("inf"))
        ref.stop()
    return statistics.median(samples)


def status_time(client: ControlClient, tries: int) -> float:
    samples = []
    for _ in range(tries):
        started = time.perf_counter()
        try:
            client.status()
            samples.append(time.perf_counter() - started)
        except Exception:
            samples.append(float("inf"))
    return statistics.median(samples)


# ------------------------------------------------------------------ attacks


@contextlib.contextmanager
def stale_neighbour(target: str, address: str) -> Iterator[None]:
    ref = NetKernel.start("stale@127.0.0.1", cookie=b"an old cookie from last month")
    kernel = NetKernel.of(ref)
    kernel.set_address(target, address)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            kernel.connect(target, timeout=1)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    time.sleep(3)  # let the tarpit reach a few steps
    try:
        yield
    finally:
        stop.set()
        thread.join(5)
        ref.stop()


def _guess(address: tuple[str, int], stop: threading.Event, answered: list[int]) -> None:
    """Wrong-cookie proofs, one connection at a time, until `stop`. A smart guesser: a right
    proof is answered at once (the ACK), so no answer within 0.2 s means wrong; it hangs up
    rather than wait out the tarpit's hold."""
    nonce = os.urandom(32)
    while not stop.is_set():
        try:
            with socket.create_connection(address, timeout=10) as sock:
                core = Connector(b"a wrong guess", "g@127.0.0.1", 1, "x@127.0.0.1", nonce=nonce)
                challenge = sock.recv(38)
                step = core.feed(challenge)
                sock.sendall(step.out)
                sock.settimeout(0.2)
                with contextlib.suppress(TimeoutError):
                    sock.recv(4096)
                answered.append(1)
        except OSError:
            time.sleep(0.01)


@contextlib.contextmanager
def guessers(address: str, n: int = 50) -> Iterator[list[int]]:
    stop, answered = threading.Event(), []
    threads = [
        threading.Thread(target=_guess, args=(_address(address), stop, answered), daemon=True)
        for _ in range(n)
    ]
    for thread in threads:
        thread.start()
    time.sleep(1)
    try:
        yield answered
    finally:
        stop.set()
        for thread in threads:
            thread.join(15)


@contextlib.contextmanager
def silent(address: str, n: int) -> Iterator[None]:
    socks = []
    try:
        for _ in range(n):
            socks.append(socket.create_connection(_address(address), timeout=10))
        time.sleep(0.5)
        yield
    finally:
        for sock in socks:
            sock.close()


@contextlib.contextmanager
def slowloris(address: str, n: int) -> Iterator[None]:
    stop = threading.Event()
    socks = []
    for _ in range(n):
        sock = socket.create_connection(_address(address), timeout=10)
        sock.sendall(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        socks.append(sock)

    def trickle() -> None:
        while not stop.wait(1.0):
            for sock in socks:
                with contextlib.suppress(OSError):
                    sock.sendall(b"X-a: b\r\n")

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    time.sleep(0.5)
    try:
        yield
    finally:
        stop.set()
        thread.join(5)
        for sock in socks:
            sock.close()


# ------------------------------------------------------------------ the run


def node_spec(root: Path) -> NodeSpec:
    cookie = root / "cookie"
    cookie.write_bytes(COOKIE)
    os.chmod(cookie, 0o600)
    config = root / "a.yaml"
    config.write_text(
        "node: a@127.0.0.1\nlisten: 127.0.0.1:0\ncookie_file: ./cookie\n"
        f"data_dir: {root / 'data'}\ncontrol: 127.0.0.1:0\nmetrics: 127.0.0.1:0\n"
    )
    argv = [sys.executable, "-m", "rabbitry", "node", "start", "--config", str(config)]
    return NodeSpec("a@127.0.0.1", argv, ready=READY, cwd=str(root), ready_timeout=60)


def bench_attacks(args) -> None:
    tries = 3 if args.quick else 7
    with tempfile.TemporaryDirectory() as tmp, Launcher() as launcher:
        (node,) = launcher.start(node_spec(Path(tmp)))
        ready = node.wait_for(node.spec.ready)
        target, dist, control = ready["node"], ready["address"], ready["control"]
        client = ControlClient(*_address(control), COOKIE, timeout=10)
        pid = node.popen.pid
        attacks: list[tuple[str, Callable[[], contextlib.AbstractContextManager]]] = [
            ("no attack", contextlib.nullcontext),
            ("stale-cookie neighbour", lambda: stale_neighbour(target, dist)),
            ("50 parallel guessers", lambda: guessers(dist)),
            ("200 silent dist sockets", lambda: silent(dist, 200)),
            ("500 silent control sockets", lambda: silent(control, 500)),
            ("200 slowloris on control", lambda: slowloris(control, 200)),
        ]
        print(
            f"{'attack':<28} {'join ms':>8} {'ratio':>6} {'status ms':>10} {'threads':>8} "
            f"{'RSS MiB':>8}"
        )
        join_time(target, dist, 2)  # warm up (imports, first connections) before measuring
        base_join: float | None = None
        for label, attack in attacks:
            with attack():
                join = join_time(target, dist, tries)
                status = status_time(client, tries)
                threads, rss = _proc(pid)
            if base_join is None:
                base_join = join
            ratio = join / base_join
            print(
                f"{label:<28} {join * 1000:>8.1f} {ratio:>5.2f}x {status * 1000:>10.1f} "
                f"{threads:>8d} {rss:>8.1f}",
                flush=True,
            )
        print("goal: join under attack at most 1.5x the no-attack join; status answers")


def bench_guess_rate(args) -> None:
    seconds = 3.0 if args.quick else 5.0
    ref = NetKernel.start("g@127.0.0.1", cookie=COOKIE)
    kernel = NetKernel.of(ref)
    try:
        with guessers(kernel.address) as answered:
            before = sum(e.failures for e in kernel._tarpit.gate._entries.values())
            answered_before = len(answered)
            time.sleep(seconds)
            after = sum(e.failures for e in kernel._tarpit.gate._entries.values())
            closed = len(answered) - answered_before
        rate = (after - before) / seconds
        print(
            f"tarpit: 50 parallel guessers from one address: {rate:.1f} proofs checked/s "
            f"({closed / seconds:.1f} connections/s closed on the guessers) "
            f"(goal: at most 10/s)"
        )
    finally:
        ref.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    bench_attacks(args)
    bench_guess_rate(args)


if __name__ == "__main__":
    main()
