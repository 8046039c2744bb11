"""Supervision benchmarks (issues 2 and 18). Prints each figure next to its goal and baseline.

1. tell throughput of a Process vs a plain pykka.ThreadingActor, same run (goal: ratio >= 0.8),
   and of a PooledProcess vs a Process (goal: ratio >= 1.0);
2. ask round trip p50, PooledProcess vs Process (goal: ratio <= 1.2);
3. restart latency, crash -> the new child answering an ask, p50 and p99: Process children
   (goal: <= 1 ms, <= 5 ms) and PooledProcess children (goal: <= 0.5 ms, <= 2 ms);
4. start then stop 10,000 simple_one_for_one Process children (goal: <= 5 s in all), and
   100,000 PooledProcess children (goal: <= 2 s), with memory per idle child (RSS delta / count;
   goal for PooledProcess <= 4 KB), against n bare threads started and joined;
   The 100,000 are started twice in the same run, alternating --rounds times: one start_child
   ask per child (the baseline) and one start_children(n, args) ask for the batch; printed
   with the ratio batch / one-by-one (issue 30: goal <= 2 s on a quiet machine);
5. with --million: 1,000,000 PooledProcess children, time and memory.

Usage: python benchmarks/supervision.py [--quick] [--million] [--log {file,none}]
           [--part all|many] [--rounds 1]
`--part many`: only figure 4's 100,000 PooledProcess children, one-by-one against the batch.
`--log file` (default) sends every log record, crash tracebacks included, to a temp file, as a
deployed node would; `--log none` disables logging to show the cost of the machinery alone.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import statistics
import sys
import tempfile
import threading
import time

import pykka

from supervisors import ChildSpec, PooledProcess, Process, Supervisor, SupFlags


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


class PooledCounter(PooledProcess):
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
    plain, ours, pooled = [], [], []
    for _ in range(rounds):  # interleaved so drift in machine load hits all alike
        plain.append(tell_rate(PlainCounter, n))
        ours.append(tell_rate(ProcessCounter, n))
        pooled.append(tell_rate(PooledCounter, n))
    p, o, q = statistics.median(plain), statistics.median(ours), statistics.median(pooled)
    print(f"tell throughput: Process {o:,.0f}/s, pykka.ThreadingActor {p:,.0f}/s")
    print(f"  ratio Process/pykka = {o / p:.2f}  (goal >= 0.80)  [{rounds} rounds of {n:,}]")
    print(f"tell throughput: PooledProcess {q:,.0f}/s, Process {o:,.0f}/s")
    print(f"  ratio PooledProcess/Process = {q / o:.2f}  (goal >= 1.00)")


def ask_p50(cls: type, n: int) -> float:
    ref = cls.start()
    try:
        times = []
        for _ in range(n):
            start = time.perf_counter()
            ref.ask("count?")
            times.append(time.perf_counter() - start)
        return statistics.median(times)
    finally:
        ref.stop()


def bench_ask(n: int, rounds: int) -> None:
    ours, pooled = [], []
    for _ in range(rounds):
        ours.append(ask_p50(ProcessCounter, n))
        pooled.append(ask_p50(PooledCounter, n))
    o, q = statistics.median(ours) * 1e6, statistics.median(pooled) * 1e6
    print(f"ask round trip p50: PooledProcess {q:.1f} us, Process {o:.1f} us")
    print(f"  ratio PooledProcess/Process = {q / o:.2f}  (goal <= 1.20)  [{rounds} x {n:,} asks]")


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


class PooledChild(Child, PooledProcess):
    pass


def bench_restart(samples: int, cls: type, goals: tuple[float, float]) -> None:
    sup = Supervisor.start(SupFlags("one_for_one", 10**9, 1.0), [ChildSpec("c", cls)])
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
    print(f"restart latency (crash -> new child answers), {cls.__name__}, {samples} restarts:")
    print(f"  p50 = {p50:.3f} ms (goal <= {goals[0]} ms, ratio {p50 / goals[0]:.2f})")
    print(f"  p99 = {p99:.3f} ms (goal <= {goals[1]} ms, ratio {p99 / goals[1]:.2f})")


class Leaf(Process):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n


class PooledLeaf(PooledProcess):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n


def rss() -> int:
    """Resident set size of this process, in bytes (Linux)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


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


def many(
    n: int, cls: type, batch: bool = False, cpu: list[float] | None = None
) -> tuple[float, float, float, float]:
    """Start n simple_one_for_one children of `cls` (one start_child ask each, or with
    `batch` one start_children ask for all), then stop the supervisor.
    Returns (start s, stop s, total s, RSS bytes per idle child). `cpu`, if given, gets the
    process's CPU seconds (every thread) for the start, the stop, and a gc.collect() right
    after the stop (the dead children's cycles, whoever frees them: not in the total)."""
    spec = ChildSpec("leaf", cls, restart="temporary", shutdown=5.0)
    gc.collect()
    before = rss()
    cpu0 = time.process_time()
    start = time.perf_counter()
    sup = Supervisor.start(SupFlags("simple_one_for_one", 0, 1.0), [spec])
    proxy = sup.proxy()
    if batch:  # every child gets the same extra args: n PooledLeaf(0)
        futures = [proxy.start_children(n, [0])]
    else:
        futures = [proxy.start_child([i]) for i in range(n)]
    for future in futures:
        future.get()
    started = time.perf_counter()
    cpu1 = time.process_time()
    del futures
    assert proxy.count_children().get()["active"] == n
    gc.collect()
    per_child = (rss() - before) / n
    paused = time.perf_counter() - started  # measuring is not part of the figure
    cpu2 = time.process_time()
    sup.stop()
    stopped = time.perf_counter() - paused
    cpu3 = time.process_time()
    gc.collect()
    if cpu is not None:
        cpu[:] = [cpu1 - cpu0, cpu3 - cpu2, time.process_time() - cpu3]
    return started - start, stopped - started, stopped - start, per_child


def bench_many(n: int, goal: float, cls: type, floor: float) -> float:
    """Every Process is one OS thread, so the floor is the cost of n thread lifecycles, which is
    measured right before, in the same run, because on a VM it varies several-fold by the minute."""
    up, down, total, per_child = many(n, cls)
    print(
        f"{n:,} simple_one_for_one {cls.__name__} children: start {up:.2f} s, "
        f"stop {down:.2f} s, total {total:.2f} s (goal <= {goal:g} s, ratio {total / goal:.2f}); "
        f"{per_child / 1024:.2f} KB RSS per idle child"
    )
    print(
        f"  baseline: {n:,} bare threads started and joined in {floor:.2f} s; "
        f"ratio ours/bare = {total / floor:.2f}"
    )
    return per_child


def bench_batch(n: int, rounds: int) -> None:
    """n PooledProcess children started and stopped: one ask per child against one ask for
    the batch, alternating, same run (issue 30)."""
    one: list[tuple[float, float, float, float]] = []
    batch: list[tuple[float, float, float, float]] = []
    one_cpu: list[float] = []
    batch_cpu: list[float] = []
    for _ in range(rounds):
        one.append(many(n, PooledLeaf, cpu=one_cpu))
        batch.append(many(n, PooledLeaf, batch=True, cpu=batch_cpu))
        # CPU seconds of the whole process: unlike the wall clock, barely moved by other
        # processes on a shared machine (a GIL-bound run takes about its CPU when quiet)
        print(
            f"  round: one-by-one {one[-1][2]:.2f} s, batch {batch[-1][2]:.2f} s"
            f"  [load average {os.getloadavg()[0]:.2f}]; process CPU: one-by-one start"
            f" {one_cpu[0]:.2f} + stop {one_cpu[1]:.2f} s, batch start {batch_cpu[0]:.2f} +"
            f" stop {batch_cpu[1]:.2f} s = {batch_cpu[0] + batch_cpu[1]:.2f} s (ratio"
            f" {(batch_cpu[0] + batch_cpu[1]) / (one_cpu[0] + one_cpu[1]):.2f}); gc.collect()"
            f" after the stop: {one_cpu[2]:.2f} s, {batch_cpu[2]:.2f} s",
            flush=True,
        )
    o = sorted(one, key=lambda r: r[2])[len(one) // 2]
    b = sorted(batch, key=lambda r: r[2])[len(batch) // 2]
    print(
        f"{n:,} PooledProcess children, start_children batch: start {b[0]:.2f} s, stop"
        f" {b[1]:.2f} s, total {b[2]:.2f} s (goal <= 2 s quiet); one start_child each (same"
        f" run): start {o[0]:.2f} s, stop {o[1]:.2f} s, total {o[2]:.2f} s; ratio"
        f" batch/one-by-one = {b[2] / o[2]:.2f} (start {b[0] / o[0]:.2f})"
        f"  [load average {os.getloadavg()[0]:.2f}]"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller sample sizes (a smoke run)")
    parser.add_argument("--million", action="store_true", help="also 1,000,000 PooledProcesses")
    parser.add_argument("--log", choices=("file", "none"), default="file")
    parser.add_argument("--part", choices=("all", "many"), default="all")
    parser.add_argument("--rounds", type=int, default=1, help="alternations of figure 4's batch")
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
    if args.part == "many":
        bench_batch(10_000 if args.quick else 100_000, args.rounds)
        return 0
    bench_tell(20_000 if args.quick else 200_000, 3 if args.quick else 5)
    bench_ask(500 if args.quick else 5_000, 3 if args.quick else 5)
    bench_restart(200 if args.quick else 2000, Child, (1.0, 5.0))
    bench_restart(200 if args.quick else 2000, PooledChild, (0.5, 2.0))
    n = 1_000 if args.quick else 10_000
    floor = bare_threads(n)
    threaded = bench_many(n, 5.0, Leaf, floor)
    m = 10 * n
    pooled = bench_many(m, 2.0, PooledLeaf, floor * 10)
    print(
        f"  memory per idle child: PooledProcess {pooled / 1024:.2f} KB (goal <= 4 KB), "
        f"Process {threaded / 1024:.2f} KB; ratio {pooled / threaded:.2f}"
    )
    print(f"  (the bare-thread baseline for {m:,} is {n:,} threads measured, times 10)")
    bench_batch(m, args.rounds)
    if args.million:
        up, down, total, per_child = many(1_000_000, PooledLeaf)
        print(
            f"1,000,000 PooledProcess children: start {up:.1f} s, stop {down:.1f} s, "
            f"total {total:.1f} s; {per_child * 1_000_000 / 2**30:.2f} GB RSS "
            f"({per_child / 1024:.2f} KB each)"
        )
    return 0


def _pykka_version() -> str:
    from importlib.metadata import version

    return version("pykka")


if __name__ == "__main__":
    raise SystemExit(main())
