"""Supervision benchmarks (issue 2). Prints each figure next to its goal and baseline.

1. tell throughput of a Process vs a plain pykka.ThreadingActor, same run (goal: ratio >= 0.8);
2. restart latency, crash -> the new child answering an ask: p50 and p99 (goal: <= 1 ms, <= 5 ms);
3. start then stop 10,000 simple_one_for_one children (goal: <= 5 s in all).

Usage: python benchmarks/supervision.py [--quick] [--log {file,none}]
`--log file` (default) sends every log record, crash tracebacks included, to a temp file, as a
deployed node would; `--log none` disables logging to show the cost of the machinery alone.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import threading
import time

import pykka

from supervisors import ChildSpec, Process, Supervisor, SupFlags


class PlainCounter(pykka.ThreadingActor):
    use_daemon_thread = True

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def on_receive(self, message: object) -> object:
        if message == "count?":
            return self.count
        self.count += 1
        return None


class ProcessCounter(Process):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def on_receive(self, message: object) -> object:
        if message == "count?":
            return self.count
        self.count += 1
        return None


def tell_rate(cls: type, n: int) -> float:
    ref = cls.start()
    try:
        start = time.perf_counter()
        for _ in range(n):
            ref.tell("hit")
        assert ref.ask("count?") == n
        return n / (time.perf_counter() - start)
    finally:
        ref.stop()


def bench_tell(n: int, rounds: int) -> None:
    plain, ours = [], []
    for _ in range(rounds):  # interleaved so drift in machine load hits both alike
        plain.append(tell_rate(PlainCounter, n))
        ours.append(tell_rate(ProcessCounter, n))
    p, o = statistics.median(plain), statistics.median(ours)
    print(f"tell throughput: Process {o:,.0f}/s, pykka.ThreadingActor {p:,.0f}/s")
    print(f"  ratio Process/pykka = {o / p:.2f}  (goal >= 0.80)  [{rounds} rounds of {n:,}]")


class _Slot:
    """Where each newly started child leaves its ref, so the bench sees the restart at once."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.ref: object = None


SLOT = _Slot()


class Child(Process):
    def on_start(self) -> None:
        with SLOT.cond:
            SLOT.ref = self.actor_ref
            SLOT.cond.notify_all()

    def on_receive(self, message: object) -> object:
        if message == "crash":
            raise RuntimeError("benchmark crash")
        return "pong"


def bench_restart(samples: int) -> None:
    sup = Supervisor.start(SupFlags("one_for_one", 10**9, 1.0), [ChildSpec("c", Child)])
    latencies = []
    try:
        for _ in range(samples):
            with SLOT.cond:
                old = SLOT.ref
            start = time.perf_counter()
            old.tell("crash")
            with SLOT.cond:
                SLOT.cond.wait_for(lambda old=old: SLOT.ref is not old, timeout=10)
                new = SLOT.ref
            assert new.ask("ping") == "pong"
            latencies.append(time.perf_counter() - start)
    finally:
        sup.stop()
    latencies.sort()
    p50 = latencies[len(latencies) // 2] * 1000
    p99 = latencies[int(len(latencies) * 0.99) - 1] * 1000
    print(f"restart latency (crash -> new child answers), {samples} restarts:")
    print(f"  p50 = {p50:.3f} ms (goal <= 1 ms, ratio {p50 / 1.0:.2f})")
    print(f"  p99 = {p99:.3f} ms (goal <= 5 ms, ratio {p99 / 5.0:.2f})")


class Leaf(Process):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n


def bare_threads(n: int) -> float:
    """The floor: n plain threads started (each waiting), then released and joined."""
    release = threading.Event()
    begin = time.perf_counter()
    threads = [threading.Thread(target=release.wait, daemon=True) for _ in range(n)]
    for thread in threads:
        thread.start()
    release.set()
    for thread in threads:
        thread.join()
    return time.perf_counter() - begin


def bench_many(n: int) -> None:
    """Every Process is one OS thread, so the floor is the cost of n thread lifecycles, which is
    measured right before, in the same run, because on a VM it varies several-fold by the minute."""
    floor = bare_threads(n)
    spec = ChildSpec("leaf", Leaf, restart="temporary", shutdown=5.0)
    start = time.perf_counter()
    sup = Supervisor.start(SupFlags("simple_one_for_one", 0, 1.0), [spec])
    proxy = sup.proxy()
    futures = [proxy.start_child([i]) for i in range(n)]
    for future in futures:
        future.get()
    started = time.perf_counter()
    assert proxy.count_children().get()["active"] == n
    sup.stop()
    stopped = time.perf_counter()
    total = stopped - start
    print(
        f"{n:,} simple_one_for_one children: start {started - start:.2f} s, "
        f"stop {stopped - started:.2f} s, total {total:.2f} s (goal <= 5 s, ratio {total / 5:.2f})"
    )
    print(
        f"  baseline: {n:,} bare threads started and joined in {floor:.2f} s; "
        f"ratio ours/bare = {total / floor:.2f}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller sample sizes (a smoke run)")
    parser.add_argument("--log", choices=("file", "none"), default="file")
    args = parser.parse_args()
    if args.log == "file":
        fd, log_path = tempfile.mkstemp(prefix="rabbitry-bench-", suffix=".log")
        os.close(fd)
        logging.basicConfig(filename=log_path, level=logging.INFO)
        print(f"logging INFO and up to {log_path}")
    else:
        logging.disable(logging.CRITICAL)
        print("logging disabled")
    print(f"python {sys.version.split()[0]}, pykka {_pykka_version()}")
    bench_tell(20_000 if args.quick else 200_000, 3 if args.quick else 5)
    bench_restart(200 if args.quick else 2000)
    bench_many(1_000 if args.quick else 10_000)
    return 0


def _pykka_version() -> str:
    from importlib.metadata import version

    return version("pykka")


if __name__ == "__main__":
    raise SystemExit(main())
