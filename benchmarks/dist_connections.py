"""What N dist connections cost one node (issue 26: one I/O loop per NetKernel): threads and
idle CPU of a process holding a NetKernel with N authenticated peers, nothing else.

The node is a child process running only a NetKernel at net_ticktime 2 s. The peers are raw
sockets in this process: each does the cookie handshake (the pure Connector core), then ticks
every net_ticktime / 4 and reads what the node sends, all on one selector thread, as a real
peer's ticks would. Per N: the time to connect all N (one after another), the node's OS
threads (psutil), and its CPU seconds per second over a quiet window. Membership, gossip and
the node monitor are left out (benchmarks/membership.py measures those with real nodes).

Usage: python benchmarks/dist_connections.py [--n 0,100,300,1000] [--window 10]
The node runs the tree of the current directory (`python -c` puts it first on sys.path): to
measure another tree, cd there and give this script's path.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import selectors
import socket
import subprocess
import sys
import threading
import time

import psutil

from monitors.dist.frames import TICK
from monitors.dist.handshake import Connector, Established

COOKIE = b"bench-dist-connections"
NET_TICKTIME = 2.0

_CHILD = """
import sys, time
from monitors.dist import NetKernel
k = NetKernel.of(NetKernel.start("core@127.0.0.1", "127.0.0.1:0", %r, net_ticktime=%r,
                                 max_handshakes=4096))
print(k.address, flush=True)
for line in sys.stdin:
    print(len(k.nodes()), flush=True)
"""


class Peers:
    """N raw peers of the node, ticking from one thread."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.target = (host, int(port))
        self.socks: list[socket.socket] = []
        self._sel = selectors.DefaultSelector()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def add(self, i: int) -> None:
        sock = socket.create_connection(self.target, timeout=30)
        core = Connector(
            COOKIE, f"peer{i}@127.0.0.1", 1000 + i, "core@127.0.0.1", nonce=os.urandom(32)
        )
        core.start()
        while True:
            step = core.feed(sock.recv(4096))
            if step.out:
                sock.sendall(step.out)
            if step.verdict is not None:
                if not isinstance(step.verdict, Established):
                    raise RuntimeError(f"peer{i}: {step.verdict}")
                break
        sock.setblocking(False)
        self.socks.append(sock)
        self._sel.register(sock, selectors.EVENT_READ)

    def _run(self) -> None:
        next_tick = time.monotonic()
        while not self._stop.is_set():
            for key, _ in self._sel.select(0.05) if self.socks else []:
                with contextlib.suppress(OSError):
                    key.fileobj.recv(65536)  # type: ignore[union-attr]
            if not self.socks:
                time.sleep(0.05)
            now = time.monotonic()
            if now >= next_tick:
                next_tick = now + NET_TICKTIME / 4
                for sock in list(self.socks):
                    with contextlib.suppress(OSError):
                        sock.send(TICK)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for sock in self.socks:
            sock.close()


def one(n: int, window: float) -> dict[str, float]:
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD % (COOKIE, NET_TICKTIME)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        address = child.stdout.readline().strip()
        peers = Peers(address)
        t0 = time.monotonic()
        for i in range(n):
            peers.add(i)
        while True:
            child.stdin.write("count\n")
            child.stdin.flush()
            if int(child.stdout.readline()) >= n:
                break
            time.sleep(0.1)
        attach = time.monotonic() - t0
        time.sleep(2.0)
        proc = psutil.Process(child.pid)
        threads = proc.num_threads()
        before, t1 = proc.cpu_times(), time.monotonic()
        time.sleep(window)
        after, elapsed = proc.cpu_times(), time.monotonic() - t1
        cpu = (after.user + after.system - before.user - before.system) / elapsed
        child.stdin.write("count\n")
        child.stdin.flush()
        still = int(child.stdout.readline())
        peers.close()
        return {"attach": attach, "threads": threads, "cpu": cpu, "up": still}
    finally:
        child.kill()
        child.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", default="0,100,300,1000", help="peer counts, comma separated")
    ap.add_argument("--window", type=float, default=10.0, help="idle window, s")
    args = ap.parse_args()
    one_min, five_min, _ = os.getloadavg()
    print(f"dist connections: net_ticktime {NET_TICKTIME} s; load {one_min:.1f}/{five_min:.1f}")
    print("| N | connect all s | node threads | node CPU s/s | still up | load 1/5 min |")
    print("|---|---|---|---|---|---|")
    for n in [int(x) for x in args.n.split(",")]:
        row = one(n, args.window)
        one_min, five_min, _ = os.getloadavg()
        print(
            f"| {n} | {row['attach']:.1f} | {row['threads']:.0f} | {row['cpu']:.4f} | "
            f"{row['up']:.0f} | {one_min:.1f}/{five_min:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
