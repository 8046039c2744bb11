"""Membership at scale (issues 13, 26): 3 core nodes and N ephemeral members from `rabbitry swarm`.

For each N (default 0, 100, 300, 1000), in one run: a fresh core of 3 node processes under
pause_minority at net_ticktime 2 s, gossip on a redis-server of our own (so the broker's
counters are ours alone), and `rabbitry swarm --count N --processes P` for the executors. Then:

- attach: from launching the swarm until it printed `READY N` (all attached and running) and
  core node a lists all N;
- threads: the OS threads of each core node process (psutil), mean and max;
- idle CPU: the core nodes' CPU seconds per second over a quiet window, its ratio to N = 0, and
  the extra CPU per executor ((cpu - cpu at N = 0) / N);
- bus, measured at the broker over the same window (Redis INFO, not computed from N): PUBLISH
  calls per second (commandstats), bytes the broker sent to its clients per second
  (total_net_output_bytes), and deliveries per second = those bytes / the mean size of one
  delivered frame (sampled by one subscriber of our own, whose share is taken off). Fitted
  slopes of deliveries/s against N, linear and quadratic, are printed;
- silent cut: core node c is SIGSTOPped; the time until core node a no longer lists it running,
  and its ratio to N = 0;
- half SIGKILL: half of the swarm's worker processes (half the members) are SIGKILLed at once; whether any
  core node pauses, and the time until every core node has forgotten them (goal: within
  forget_ephemeral_after + 5 s).

Timing on a shared machine is noisy: the load average is printed with each row, and every
ratio is against N = 0 of the same run.

The swarm runs in max(--processes, N / --per-process) worker processes.

Usage: python benchmarks/membership.py [--n 0,100,300,1000] [--processes 2] [--forget 10]
                                       [--window 10] [--no-bus]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import redis

from rabbitry.testing.cluster import HOST, Cluster, ClusterFactory, faultproxy_available, free_ports

CORE = ("a@127.0.0.1", "b@127.0.0.1", "c@127.0.0.1")
NET_TICKTIME = 2.0
SWARM = [sys.executable, "-m", "rabbitry", "swarm"]


@dataclass
class Row:
    n: int
    load: str = ""
    attach_s: float | None = None
    threads: tuple[float, int] | None = None  # mean, max per core node
    core_cpu: float | None = None  # CPU seconds per second, mean of the 3 core nodes
    publishes: float | None = None  # PUBLISH calls per second at the broker
    out_bytes: float | None = None  # bytes per second the broker sent
    deliveries: float | None = None  # out_bytes / mean frame size, ours taken off
    cut_s: float | None = None
    kill_paused: bool | None = None
    killed: int = 0
    forgotten_s: float | None = None
    notes: list[str] = field(default_factory=list)


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.1f}/{five:.1f}"


def _cpu(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
    return total


class Broker:
    """A redis-server of our own, and its counters."""

    def __init__(self, root: Path) -> None:
        self.port = free_ports(1)[0]
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("no redis-server on PATH")
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", HOST, "--save", "", "--appendonly", "no"],
            cwd=root,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.url = f"redis://{HOST}:{self.port}/0"
        self.client = redis.Redis(host=HOST, port=self.port)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def counters(self) -> tuple[int, int]:
        """(PUBLISH calls, bytes sent to clients) so far."""
        publish = self.client.info("commandstats").get("cmdstat_publish", {}).get("calls", 0)
        return int(publish), int(self.client.info("stats")["total_net_output_bytes"])

    def close(self) -> None:
        self.client.close()
        self.proc.terminate()
        self.proc.wait(10)


class FrameSampler:
    """One subscriber of our own: counts the broadcasts it gets and their size on the wire."""

    def __init__(self, url: str, exchange: str) -> None:
        self.count = 0
        self.wire_bytes = 0
        self._client = redis.Redis.from_url(url)
        self._pubsub = self._client.pubsub(ignore_subscribe_messages=True)
        self._pattern = f"{exchange}:bc:*"
        self._pubsub.psubscribe(self._pattern)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            m = self._pubsub.get_message(timeout=0.2)
            if m is None:
                continue
            self.count += 1
            self.wire_bytes += _pmessage_size(self._pattern, m["channel"], m["data"])

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self._pubsub.close()
        self._client.close()


def _pmessage_size(pattern: str, channel: bytes, data: bytes) -> int:
    """The RESP2 size of one pmessage push: *4, $8 pmessage, the pattern, channel and data."""

    def bulk(b: bytes) -> int:
        return len(f"${len(b)}\r\n") + len(b) + 2

    return 4 + bulk(b"pmessage") + bulk(pattern.encode()) + bulk(channel) + bulk(data)


class Swarm:
    """`rabbitry swarm` as a child process; `ready` is set when it printed READY."""

    def __init__(self, template: Path, n: int, processes: int, log: Path) -> None:
        self.ready = threading.Event()
        self.log = log.open("w")
        self.proc = subprocess.Popen(
            [*SWARM, "--config", str(template), "--count", str(n), "--processes", str(processes)],
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("READY"):
                self.ready.set()

    def workers(self) -> dict[int, tuple[int, int]]:
        """pid -> (first, last) member indices of each worker process."""
        out = {}
        for child in psutil.Process(self.proc.pid).children():
            with contextlib.suppress(psutil.Error):
                cmd = child.cmdline()
                if "--slice" in cmd:
                    a, b = cmd[cmd.index("--slice") + 1].split(":")[:2]
                    out[child.pid] = (int(a), int(b))
        return out

    def pids(self) -> list[int]:
        return [self.proc.pid, *self.workers()]

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(120)
        except subprocess.TimeoutExpired:
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            return None
        finally:
            self.log.close()


def _template(c: Cluster, root: Path, bus: str | None, exchange: str) -> Path:
    data: dict[str, Any] = {
        "node": "exec@127.0.0.1",
        "role": "ephemeral",
        "listen": f"{HOST}:0",
        "cookie_file": str(c.root / "cookie"),
        "data_dir": str(root / "swarm"),
        "net_ticktime": NET_TICKTIME,
        "partition_handling": "pause_minority",
        "cluster": {"nodes": {m: f"{HOST}:{c.dist_ports[m]}" for m in CORE}},
    }
    if bus:
        data.update(bus=bus, gossip={"exchange": exchange})
    path = root / "exec.yaml"
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


def _known(c: Cluster, node: str) -> set[str]:
    members = c.client(node).ephemeral()
    return set(members["up"]) | set(members["down"])


def _measure_idle(c: Cluster, row: Row, broker: Broker | None, exchange: str, window: float):
    pids = [c.proc(m).pid for m in CORE]
    threads = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            threads.append(psutil.Process(pid).num_threads())
    row.threads = (sum(threads) / len(threads), max(threads)) if threads else None
    sampler = FrameSampler(broker.url, exchange) if broker else None
    time.sleep(1.0)  # the sampler subscribed
    counters = broker.counters() if broker else (0, 0)
    seen = (sampler.count, sampler.wire_bytes) if sampler else (0, 0)
    before, t0 = _cpu(pids), time.monotonic()
    time.sleep(window)
    elapsed = time.monotonic() - t0
    row.core_cpu = (_cpu(pids) - before) / elapsed / len(CORE)
    if broker and sampler:
        publish, out = broker.counters()
        ours, our_bytes = sampler.count - seen[0], sampler.wire_bytes - seen[1]
        sampler.close()
        row.publishes = (publish - counters[0]) / elapsed
        row.out_bytes = (out - counters[1]) / elapsed
        if ours:
            frame = our_bytes / ours
            row.deliveries = max(0.0, (out - counters[1] - our_bytes) / frame / elapsed)


def _silent_cut(c: Cluster, row: Row) -> None:
    """SIGSTOP core node c: the time until a no longer lists it running."""
    t0 = time.monotonic()
    c.stop("c")
    try:
        c.wait_for(
            lambda: "c@127.0.0.1" not in c.status("a")["running"],
            6 * NET_TICKTIME + 20,
            "a to see c down",
        )
        row.cut_s = time.monotonic() - t0
    finally:
        c.cont("c")

    def whole() -> bool:
        return all(
            not c.status(m)["paused"] and set(CORE) <= set(c.status(m)["running"]) for m in CORE
        )

    c.wait_for(whole, 180, "the core to run again after the cut")


def _half_kill(c: Cluster, row: Row, swarm: Swarm, forget: float) -> None:
    workers = swarm.workers()
    if not workers:
        row.notes.append("no swarm worker to kill")
        return
    # the first half of the worker processes: half the executors, all at once
    doomed = sorted(workers.items(), key=lambda kv: kv[1])[: max(1, len(workers) // 2)]
    killed = {f"exec-{i}@127.0.0.1" for _, (first, last) in doomed for i in range(first, last)}
    row.killed = len(killed)
    for pid, _ in doomed:
        os.kill(pid, signal.SIGKILL)
    t0 = time.monotonic()
    row.kill_paused = False
    while time.monotonic() - t0 < forget + 30.0:
        row.kill_paused = row.kill_paused or any(c.status(m)["paused"] for m in CORE)
        if not any(killed & _known(c, m) for m in CORE):
            row.forgotten_s = time.monotonic() - t0
            return
        time.sleep(0.2)


def run_one(factory: ClusterFactory, n: int, args: argparse.Namespace, root: Path) -> Row:
    row = Row(n)
    exchange = f"bench-membership-{uuid.uuid4().hex[:8]}"
    broker = None if args.no_bus else Broker(root)
    bus = broker.url if broker else None
    core_config: dict[str, Any] = {"cluster": {"forget_ephemeral_after": args.forget}}
    if bus:
        core_config.update(bus=bus, gossip={"exchange": exchange})
    swarm = None
    try:
        c = factory(3, "pause_minority", net_ticktime=NET_TICKTIME, config=core_config)
        if n:
            template = _template(c, root, bus, exchange)
            t0 = time.monotonic()
            processes = max(args.processes, -(-n // args.per_process))
            swarm = Swarm(template, n, processes, root / "swarm.log")
            deadline, next_line = t0 + args.attach_timeout, t0 + 10.0
            while not swarm.ready.wait(0.5):
                if time.monotonic() >= next_line:  # progress, so a slow attach shows its shape
                    next_line += 10.0
                    with contextlib.suppress(Exception):
                        members = c.client("a").ephemeral()
                        print(
                            f"  N={n}: {time.monotonic() - t0:.0f} s: a lists "
                            f"{len(members['up'])} up, {len(members['down'])} down; "
                            f"load {_load()}",
                            flush=True,
                        )
                if swarm.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the swarm of {n} was not READY within {args.attach_timeout:g} s "
                        f"(exit {swarm.proc.poll()}); see {root / 'swarm.log'}"
                    )
            c.wait_for(lambda: len(c.status("a")["ephemeral"]) == n, 120, f"a to list {n}")
            row.attach_s = time.monotonic() - t0
        time.sleep(args.settle)
        _measure_idle(c, row, broker, exchange, args.window)
        row.load = _load()
        _silent_cut(c, row)
        if n and swarm is not None:
            _half_kill(c, row, swarm, args.forget)
    finally:
        if swarm is not None:
            swarm.stop()
        if broker is not None:
            broker.close()
    return row


def _fmt(v: Any, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def _fit(rows: list[Row]) -> str:
    """Least-squares slopes of deliveries/s against N: linear (a + bN) and quadratic (a + cN^2)."""
    pts = [(r.n, r.deliveries) for r in rows if r.deliveries is not None]
    if len(pts) < 3:  # two points fit any curve
        return f"deliveries/s measured at {len(pts)} N only: not enough points to fit a slope"

    def slope(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
        a = my - b * mx
        res = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys, strict=True))
        return a, b, res

    ns, ys = [float(n) for n, _ in pts], [float(y) for _, y in pts]
    a1, b1, r1 = slope(ns, ys)
    a2, b2, r2 = slope([n * n for n in ns], ys)
    better = "linear" if r1 <= r2 else "quadratic"
    return (
        f"deliveries/s = {a1:.1f} + {b1:.3f} N (residual {r1:.0f}); "
        f"= {a2:.1f} + {b2:.5f} N^2 (residual {r2:.0f}); the {better} fit is closer"
    )


def table(rows: list[Row], forget: float) -> str:
    lines = [
        "| N | load 1/5 min | attach+run s | core threads mean/max | core CPU s/s | ratio "
        "| CPU per executor s/s | PUBLISH/s | broker out KB/s | deliveries/s | SIGSTOP seen s "
        f"| ratio | half SIGKILL: killed, core paused | forgotten s (goal <= {forget + 5:g}) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    base = next((r for r in rows if r.n == 0), None)
    for r in rows:
        cpu_ratio = cut_ratio = per = None
        if base and base.core_cpu and r.core_cpu is not None:
            cpu_ratio = r.core_cpu / base.core_cpu
            per = (r.core_cpu - base.core_cpu) / r.n if r.n else None
        if base and base.cut_s and r.cut_s:
            cut_ratio = r.cut_s / base.cut_s
        threads = "-" if r.threads is None else f"{r.threads[0]:.0f}/{r.threads[1]}"
        if not r.n or r.kill_paused is None:
            kill = forgotten = "-"
        else:
            kill = f"{r.killed}, {'YES' if r.kill_paused else 'no'}"
            forgotten = "not within the wait" if r.forgotten_s is None else f"{r.forgotten_s:.1f}"
        kb = None if r.out_bytes is None else r.out_bytes / 1024
        lines.append(
            f"| {r.n} | {r.load} | {_fmt(r.attach_s, '.1f')} | {threads} | "
            f"{_fmt(r.core_cpu, '.4f')} | {_fmt(cpu_ratio)} | {_fmt(per, '.6f')} | "
            f"{_fmt(r.publishes, '.1f')} | {_fmt(kb, '.1f')} | {_fmt(r.deliveries, '.0f')} | "
            f"{_fmt(r.cut_s)} | {_fmt(cut_ratio)} | {kill} | {forgotten} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", default="0,100,300,1000", help="executor counts, comma separated")
    ap.add_argument("--processes", type=int, default=os.cpu_count() or 2, help="swarm processes")
    ap.add_argument("--forget", type=float, default=10.0, help="forget_ephemeral_after, s")
    ap.add_argument("--window", type=float, default=10.0, help="idle window, s")
    ap.add_argument("--settle", type=float, default=5.0, help="pause before measuring, s")
    ap.add_argument(
        "--per-process",
        type=int,
        default=250,
        help="at most this many members per swarm process (more processes for a larger N)",
    )
    ap.add_argument("--attach-timeout", type=float, default=300.0, help="READY within, s")
    ap.add_argument("--no-bus", action="store_true", help="no gossip (dist and monitor only)")
    args = ap.parse_args(argv)
    if not faultproxy_available():
        print("no fault proxy (python -m rabbitry faultproxy)", file=sys.stderr)
        return 2
    ns = [int(x) for x in args.n.split(",")]
    rows: list[Row] = []
    root = Path(tempfile.mkdtemp(prefix="rabbitry-bench-membership-"))
    print(
        f"membership benchmark: 3 core nodes, pause_minority, net_ticktime {NET_TICKTIME} s, "
        f"forget_ephemeral_after {args.forget} s, gossip {'off' if args.no_bus else 'on'}, "
        f"swarm in max({args.processes}, N / {args.per_process}) processes; load {_load()} at start; "
        f"{os.cpu_count()} CPUs"
    )
    for n in ns:
        where = root / f"n{n}"
        where.mkdir()
        factory = ClusterFactory(where)
        try:
            row = run_one(factory, n, args, where)
        except Exception as exc:  # this N is out of reach here: say where, go on
            row = Row(n, load=_load(), notes=[f"{type(exc).__name__}: {str(exc)[:300]}"])
        finally:
            factory.close()
        rows.append(row)
        print(f"  N={n}: done (load {_load()}) {'; '.join(row.notes)}", flush=True)
    print()
    print(table(rows, args.forget))
    if not args.no_bus:
        print(_fit(rows))
    for r in rows:
        for note in r.notes:
            print(f"note N={r.n}: {' '.join(note.split())}")
    print(f"\nload {_load()} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
