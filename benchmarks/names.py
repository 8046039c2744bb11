"""Names and roles are verified (issue 24): what the checks cost, and what a duplicate costs
the cluster. Each figure is printed with its same-run baseline and the ratio.

1. A duplicate of a running node (a copied config file, only listen/control/data_dir
   changed), started against a running 3-node cluster (net_ticktime 1 s, as the tests):
   - on the same host: it stops at the name lock; time from starting the process to its exit;
   - as from another host (its own lock dir): the members refuse its handshake after the
     old link answers a ping; time from start to exit (goal: within 2 x net_ticktime of
     its first connect; the process's own start-up is in the figure).
   Baseline: the same config with a fresh name, from start to its READY line.
   Meanwhile the real node is polled every 20 ms: the time it spent paused (goal 0), and
   the NodeDown lines the other members logged for it (goal 0).
2. The handshake with the checks (the name check and a role check that asks an actor, as a
   node's does) against the same handshake with both skipped, same process, same run:
   connect + disconnect cycles, mean time per handshake and the ratio.

Usage: PYTHONPATH=$PWD python benchmarks/names.py [--rounds N] [--handshakes N]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from monitors.dist import NetKernel
from monitors.dist.name_lock import LOCK_DIR_ENV
from rabbitry.testing.cluster import ClusterFactory
from supervisors import Process

COOKIE = b"bench-cookie"
B = "b@127.0.0.1"


def _twin_config(cluster: Any, tag: str, name: str = B) -> str:
    config = json.loads(cluster.config_file(B).read_text())
    config.update(
        node=name, listen="127.0.0.1:0", control="127.0.0.1:0", data_dir=f"./data/bench-{tag}"
    )
    path = cluster.root / f"bench-{tag}.yaml"
    path.write_text(json.dumps(config))
    return str(path)


def _run(cluster: Any, path: str, lock_dir: str, until_ready: bool = False) -> float:
    """Seconds from starting `rabbitry node start` to its exit (or its READY line)."""
    env = {**os.environ, LOCK_DIR_ENV: lock_dir}
    argv = [sys.executable, "-m", "rabbitry", "node", "start", "--config", path]
    began = time.monotonic()
    proc = subprocess.Popen(
        argv, cwd=cluster.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    if until_ready:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("READY"):
                took = time.monotonic() - began
                proc.terminate()
                proc.communicate(timeout=30)
                return took
        raise RuntimeError(f"no READY: {proc.communicate()[1][-2000:]}")
    _, err = proc.communicate(timeout=60)
    took = time.monotonic() - began
    if proc.returncode != 2 or "the name is in use" not in err:
        raise RuntimeError(f"the duplicate exited {proc.returncode}: {err[-2000:]}")
    return took


class _Watch:
    """Polls the real node's `paused` every 20 ms and adds up the time it saw it paused."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.paused = 0.0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Watch:
        self._thread.start()
        return self

    def __exit__(self, *_exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(0.02):
            now = time.monotonic()
            if self.cluster.paused(B):
                self.paused += now - last
            self.samples += 1
            last = now


def duplicates(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as root:
        factory = ClusterFactory(Path(root))
        try:
            cluster = factory(3)
            same_host = str(cluster.root / "locks")
            downs_before = _downs(cluster)
            with _Watch(cluster) as watch:
                local = [
                    _run(cluster, _twin_config(cluster, f"l{i}"), same_host) for i in range(rounds)
                ]
                remote = [
                    _run(cluster, _twin_config(cluster, f"r{i}"), tempfile.mkdtemp())
                    for i in range(rounds)
                ]
            downs = _downs(cluster) - downs_before
            fresh = [
                _run(
                    cluster,
                    _twin_config(cluster, f"f{i}", f"fresh{i}@127.0.0.1"),
                    tempfile.mkdtemp(),
                    until_ready=True,
                )
                for i in range(rounds)
            ]
        finally:
            factory.close()
    base = statistics.median(fresh)
    print(f"duplicate of {B}, {rounds} rounds each (net_ticktime 1 s):")
    for label, runs in (("same host (name lock)", local), ("another host (refused)", remote)):
        med = statistics.median(runs)
        print(
            f"  {label:<24} start to exit 2: median {med:.2f} s, max {max(runs):.2f} s "
            f"({med / base:.2f}x a fresh node's start to READY)"
        )
    print(f"  baseline: a fresh name, start to READY: median {base:.2f} s")
    print(
        f"  the real node paused for {watch.paused:.3f} s in {watch.samples} samples "
        f"(goal 0); NodeDown lines for it on a and c: {downs} (goal 0)"
    )


def _downs(cluster: Any) -> int:
    return sum(
        1
        for node in ("a@127.0.0.1", "c@127.0.0.1")
        for line in cluster.proc(node).stderr()
        if f"node down: {B}" in line
    )


class _Monitor(Process):
    """Stands in for the node monitor that a node's role check asks."""

    def role_conflict(self, node: str, role: str) -> str:
        return ""


def handshakes(n: int) -> None:
    monitor = _Monitor.start()
    proxy = monitor.proxy()

    def role_check(node: str, role: str) -> str:
        return proxy.role_conflict(node, role).get(timeout=2)

    a = NetKernel.of(NetKernel.start("a@127.0.0.1", "127.0.0.1:0", COOKIE, role_check=role_check))
    b = NetKernel.of(NetKernel.start("b@127.0.0.1", "127.0.0.1:0", COOKIE, disconnect_ban=0.0))
    b.set_address(a.node, str(a.address))
    checked = a.admission.check_claim

    def run(label: str) -> float:
        took = []
        for _ in range(n):
            began = time.perf_counter()
            if not b.connect(a.node):
                raise RuntimeError(f"{label}: no connection")
            took.append(time.perf_counter() - began)
            b.disconnect(a.node)
            while a.nodes():
                time.sleep(0.0005)
        return statistics.mean(took)

    try:
        results: dict[str, list[float]] = {"with": [], "without": []}
        for _ in range(3):  # interleaved, so that drift hits both alike
            a.admission.check_claim = lambda *_args: ("", "", "")  # type: ignore[method-assign]
            results["without"].append(run("without"))
            a.admission.check_claim = checked  # type: ignore[method-assign]
            results["with"].append(run("with"))
    finally:
        a.actor_ref.stop()
        b.actor_ref.stop()
        monitor.stop()
    with_checks = statistics.median(results["with"])
    without = statistics.median(results["without"])
    print(f"handshake, {n} x 3 connects each way (connect to NodeUp, loopback, one process):")
    print(f"  with the name and role checks: {with_checks * 1e3:.3f} ms")
    print(f"  without them (same run):       {without * 1e3:.3f} ms")
    print(f"  ratio: {with_checks / without:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="duplicates started per kind")
    parser.add_argument("--handshakes", type=int, default=300, help="handshakes per batch")
    parser.add_argument("--skip-duplicates", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    os.environ.setdefault(LOCK_DIR_ENV, tempfile.mkdtemp(prefix="rabbitry-bench-names-"))
    handshakes(args.handshakes)
    if not args.skip_duplicates:
        duplicates(args.rounds)


if __name__ == "__main__":
    main()
