"""Metrics scrape time (issue 17): GET /metrics of one node in clusters of 3 and 30 members.

For each size it starts that many `rabbitry node start` processes (every one lists every
other, partition_handling ignore), waits until the first sees them all running, then times
sequential scrapes of the first node's /metrics, and, as the same-run baseline, sequential
GET /status calls on its control API (the cheapest existing read of the same node, one actor
ask). Then it freezes one peer (SIGSTOP, sockets open: a hung peer) and scrapes again.

The goal: a scrape reads the node's own state within 100 ms, hung peers or not.

Usage: python benchmarks/metrics.py [--quick] [--sizes 3,30] [--scrapes 100]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import http.client
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rabbitry.control import ControlClient, ControlError
from rabbitry.testing.cluster import reserved_ports
from rabbitry.testing.launcher import Launcher, NodeSpec

COOKIE = b"benchmark-metrics-cookie-0123456789"
GOAL = 0.100  # seconds, p95 of a scrape
FORM_TIMEOUT = 180.0


def start_cluster(launcher: Launcher, root: Path, n: int) -> tuple[list, ControlClient, str]:
    names = [f"n{i:02d}@127.0.0.1" for i in range(n)]
    cookie = root / "cookie"
    cookie.write_bytes(COOKIE)
    os.chmod(cookie, 0o600)
    tree = root / "app.yaml"
    tree.write_text(
        "supervisor:\n  children:\n    - id: idle\n      start: 'rabbitry.examples_workers:Idle'\n"
    )
    with reserved_ports(n + 2) as ports:
        dist = dict(zip(names, ports[:n], strict=True))
        control_port, metrics_port = ports[n], ports[n + 1]
    specs = []
    for i, name in enumerate(names):
        config = {
            "node": name,
            "listen": f"127.0.0.1:{dist[name]}",
            "cookie_file": "./cookie",
            "data_dir": f"./data/{i}",
            "net_ticktime": 4.0,
            "partition_handling": "ignore",
            "tree": str(tree),
            "cluster": {"nodes": {p: f"127.0.0.1:{dist[p]}" for p in names if p != name}},
        }
        if i == 0:
            config["control"] = f"127.0.0.1:{control_port}"
            config["metrics"] = f"127.0.0.1:{metrics_port}"
        path = root / f"{i}.yaml"
        path.write_text(json.dumps(config))
        argv = [sys.executable, "-m", "rabbitry", "node", "start", "--config", str(path)]
        argv += ["--log-level", "warning"]
        specs.append(NodeSpec(f"n{i:02d}", argv, cwd=str(root), ready_timeout=120.0))
    procs = []
    for first in range(0, n, 5):  # in batches: 30 at once overload a shared 2-core machine
        procs += launcher.start(*specs[first : first + 5])
    client = ControlClient("127.0.0.1", control_port, COOKIE, timeout=2)
    deadline = time.monotonic() + FORM_TIMEOUT
    running: list[str] = []
    while time.monotonic() < deadline:  # 30 nodes on 2 cores: the first may be slow to answer
        with contextlib.suppress(ControlError):
            running = client.status()["running"]
            if sorted(running) == names:
                break
        time.sleep(0.5)
    else:  # measured all the same: the scrape must answer whatever the cluster does
        print(f"  (after {FORM_TIMEOUT:.0f} s, n00 saw {len(running)} of {n} running)")
    return procs, client, f"127.0.0.1:{metrics_port}"


def time_scrapes(address: str, n: int) -> tuple[list[float], int, collections.Counter[str]]:
    """Scrape times, the last body's size, and how often each part was missing."""
    host, _, port = address.rpartition(":")
    times, size, missing = [], 0, collections.Counter()
    for _ in range(n):
        started = time.perf_counter()
        connection = http.client.HTTPConnection(host, int(port), timeout=10)
        connection.request("GET", "/metrics")
        response = connection.getresponse()
        body = response.read()
        connection.close()
        times.append(time.perf_counter() - started)
        assert response.status == 200
        size = len(body)
        missing.update(re.findall(rb'rabbitry_scrape_part_up\{part="(\w+)"\} 0', body))
    return times, size, collections.Counter({k.decode(): v for k, v in missing.items()})


def time_status(client: ControlClient, n: int) -> list[float]:
    """GET /status times; one that fails (no answer within the client's 2 s) counts as 2 s."""
    times = []
    for _ in range(n):
        started = time.perf_counter()
        with contextlib.suppress(ControlError):
            client.status()
        times.append(time.perf_counter() - started)
    return times


def p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] * 1000


def report(
    label: str,
    scrapes: list[float],
    baseline: list[float],
    size: int,
    missing: collections.Counter[str],
) -> None:
    ratio = statistics.median(scrapes) / statistics.median(baseline)
    verdict = "ok" if p(scrapes, 95) <= GOAL * 1000 else "ABOVE GOAL"
    gaps = ", ".join(f"{part} {count}x" for part, count in sorted(missing.items())) or "none"
    print(
        f"  {label:<22} scrape p50 {p(scrapes, 50):6.1f} ms  p95 {p(scrapes, 95):6.1f} ms  "
        f"max {max(scrapes) * 1000:6.1f} ms  ({size} bytes) | baseline GET /status p50 "
        f"{p(baseline, 50):5.1f} ms  p95 {p(baseline, 95):6.1f} ms  ratio {ratio:4.1f}x | "
        f"goal p95 <= 100 ms: {verdict} | parts missing: {gaps}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="sizes 3 and 10, 50 scrapes")
    parser.add_argument("--sizes", default="3,30", help="cluster sizes (default: 3,30)")
    parser.add_argument("--scrapes", type=int, default=100)
    args = parser.parse_args()
    sizes = [3, 10] if args.quick else [int(s) for s in args.sizes.split(",")]
    scrapes = 50 if args.quick else args.scrapes
    print(f"metrics scrape time, {scrapes} sequential scrapes of one node per line")
    for n in sizes:
        launcher = Launcher(grace=5.0)
        with tempfile.TemporaryDirectory(prefix="bench-metrics-") as tmp:
            try:
                procs, client, address = start_cluster(launcher, Path(tmp), n)
                time_scrapes(address, 5)  # warm-up: lazy imports, first proxies
                baseline = time_status(client, scrapes)
                times, size, missing = time_scrapes(address, scrapes)
                report(f"{n} members", times, baseline, size, missing)
                procs[-1].pause()  # a hung peer: SIGSTOP, its sockets stay open
                try:
                    baseline = time_status(client, scrapes)
                    times, size, missing = time_scrapes(address, scrapes)
                    report(f"{n} members, 1 hung", times, baseline, size, missing)
                finally:
                    procs[-1].resume()
            finally:
                launcher.stop_all()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
