"""Membership at scale (issue 13): 3 core nodes and N ephemeral nodes, each an OS process.

For each N (default 0, 16, 32, 64) a fresh core of 3 nodes under pause_minority, with gossip on
the local Redis, and N more nodes, then:

- attach: the time from launching the N processes until core node a lists all N (as
  ephemeral members; with --design full, as running members);
- dist connections per ephemeral node and per core node (ESTABLISHED TCP links to dist ports
  and to the fault proxies in front of them), measured with psutil;
- idle CPU: the core nodes' CPU seconds per second over a quiet window, and its ratio to N = 0;
- gossip: the messages per second the broker delivers (broadcasts on the exchange, counted by a
  subscriber of our own, times the number of subscribed nodes);
- silent cut: core node c is cut from a and b (a fault proxy drops bytes); the time until it
  pauses, and its ratio to N = 0 (goal: at most 1.2 at N = 64);
- half SIGKILL: N/2 of the extra nodes are SIGKILLed at once; whether any core node pauses, and
  the time until every core node has forgotten all of them (goal: within
  forget_ephemeral_after + 2 s; the full-member design never forgets them).

`--design full` runs the same with the extra nodes as full members joined through
`rabbitry cluster join` (today's executors, with ephemeral=False). Timing on a shared machine
is noisy: the load average is printed next to the figures, and ratios are against N = 0 of
the same run.

Usage: python benchmarks/membership.py [--n 0,16,32,64] [--design ephemeral|full|both]
                                       [--forget SECONDS] [--window SECONDS]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
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

from rabbitry.testing.cluster import HOST, Cluster, ClusterFactory, faultproxy_available

REDIS_URL = "redis://127.0.0.1:6379/0"
CORE = ("a@127.0.0.1", "b@127.0.0.1", "c@127.0.0.1")
NET_TICKTIME = 2.0


@dataclass
class Row:
    design: str
    n: int
    attach_s: float | None = None
    conns_extra: tuple[float, int] | None = None  # mean, max per extra node
    conns_core: float | None = None
    core_cpu: float | None = None  # CPU seconds per second, mean of the 3 core nodes
    deliveries: float | None = None  # broker deliveries per second
    publishes: float | None = None
    cut_pause_s: float | None = None
    kill_paused: bool | None = None
    forgotten_s: float | None = None  # None: not forgotten within the wait
    notes: list[str] = field(default_factory=list)


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f}/{five:.1f}"


def _connections(pid: int, dist: set[int], own: int | None) -> int:
    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
        conns = [c for p in procs for c in p.net_connections(kind="tcp")]
    except psutil.Error:
        return 0
    count = 0
    for c in conns:
        if c.status != psutil.CONN_ESTABLISHED or not c.raddr:
            continue
        if c.raddr.port in dist or (own is not None and c.laddr.port == own):
            count += 1
    return count


def _cpu(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
    return total


class BusCounter:
    """Counts the broadcasts on the gossip exchange (one subscriber of our own)."""

    def __init__(self, exchange: str) -> None:
        self.count = 0
        self._client = redis.Redis.from_url(REDIS_URL)
        self._pubsub = self._client.pubsub(ignore_subscribe_messages=True)
        self._pubsub.psubscribe(f"{exchange}:bc:*")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._pubsub.get_message(timeout=0.2) is not None:
                self.count += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self._pubsub.close()
        self._client.close()


def _known(c: Cluster, node: str) -> set[str]:
    members = c.client(node).ephemeral()
    return set(members["up"]) | set(members["down"])


def _attach(c: Cluster, design: str, n: int, gossip: dict[str, Any]) -> list[str]:
    """Start n extra nodes and wait until core node a counts them in (ephemeral: listed up;
    full: running members)."""
    if design == "ephemeral":
        extra = c.add_ephemeral(n, gossip)
        c.wait_for(lambda: len(c.status("a")["ephemeral"]) == n, 600, f"{n} ephemeral attached")
        return extra
    extra = c.add_ephemeral(n, {**gossip, "role": "core"}, prefix="f")
    address = f"{HOST}:{c.dist_ports['a@127.0.0.1']}"
    for x in extra:
        c.wait_for(lambda x=x: c.client(x).join("a@127.0.0.1", address), 300, f"{x} to join")
    c.wait_for(lambda: len(c.status("a")["running"]) == 3 + n, 600, f"{n} members running")
    return extra


def _measure_idle(c: Cluster, row: Row, extra: list[str], counter: BusCounter, window: float):
    dist = set(c.dist_ports.values())
    dist |= {int(a.rpartition(":")[2]) for a in c.proxies.values()}
    listen = {
        x: int(json.loads(c.config_file(x).read_text())["listen"].rpartition(":")[2]) for x in extra
    }
    dist |= set(listen.values())
    counts = [_connections(c.proc(x).pid, dist, listen[x]) for x in extra]
    if counts:
        row.conns_extra = (sum(counts) / len(counts), max(counts))
    per_core = [_connections(c.proc(m).pid, dist, c.dist_ports[m]) for m in CORE]
    row.conns_core = sum(per_core) / len(CORE)
    pids = [c.proc(m).pid for m in CORE]
    before, seen, t0 = _cpu(pids), counter.count, time.monotonic()
    time.sleep(window)
    elapsed = time.monotonic() - t0
    row.core_cpu = (_cpu(pids) - before) / elapsed / len(CORE)
    row.publishes = (counter.count - seen) / elapsed
    row.deliveries = row.publishes * (3 + len(extra))  # every node PSUBSCRIBEs the exchange


def _silent_cut(c: Cluster, row: Row) -> None:
    """Cut core node c from a and b (both ways, bytes dropped): the time until c pauses. In
    the full-member design c may keep a majority through the other members, and never pause."""
    t0 = time.monotonic()
    c.partition(["c"], ["a", "b"])
    try:
        c.wait_for(lambda: c.status("c")["paused"], 6 * NET_TICKTIME + 10, "c to pause")
        row.cut_pause_s = time.monotonic() - t0
    except AssertionError:
        row.notes.append("cut from the other core nodes, c kept running (a majority of members)")
    c.heal()

    def whole() -> bool:
        return all(
            not c.status(m)["paused"] and set(CORE) <= set(c.status(m)["running"]) for m in CORE
        )

    c.wait_for(whole, 120, "the core to run again after the cut")


def _half_kill(c: Cluster, row: Row, design: str, extra: list[str], forget: float) -> None:
    killed = extra[: len(extra) // 2]
    for x in killed:
        c.kill(x)
    t0 = time.monotonic()
    row.kill_paused = False
    while time.monotonic() - t0 < forget + 10.0:
        statuses = [c.status(m) for m in CORE]
        row.kill_paused = row.kill_paused or any(s["paused"] for s in statuses)
        if design == "ephemeral":
            left = [x for m in CORE for x in killed if x in _known(c, m)]
        else:  # full members stay members, down, until `rabbitry cluster forget`
            left = [x for s in statuses for x in killed if x in s["all"]]
        if not left:
            row.forgotten_s = time.monotonic() - t0
            return
        time.sleep(0.1)


def run_one(factory: ClusterFactory, design: str, n: int, args: argparse.Namespace) -> Row:
    row = Row(design, n)
    exchange = f"bench-membership-{uuid.uuid4().hex[:8]}"
    gossip = {"bus": REDIS_URL, "gossip": {"exchange": exchange}}
    core_config = {"cluster": {"forget_ephemeral_after": args.forget}, **gossip}
    c = factory(3, "pause_minority", net_ticktime=NET_TICKTIME, config=core_config)
    counter = BusCounter(exchange)
    try:
        extra: list[str] = []
        if n:
            t0 = time.monotonic()
            extra = _attach(c, design, n, gossip)
            row.attach_s = time.monotonic() - t0
        time.sleep(args.settle)
        _measure_idle(c, row, extra, counter, args.window)
        _silent_cut(c, row)
        if n:
            _half_kill(c, row, design, extra, args.forget)
    finally:
        counter.close()
        c.close()
    return row


def _fmt(v: Any, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def table(rows: list[Row], forget: float) -> str:
    lines = [
        "| design | N | attach s | dist conns per extra node (mean/max) | per core node | "
        "core CPU s/s | ratio to N=0 | bus deliveries/s | silent cut: pause s | ratio to N=0 | "
        f"half SIGKILL: core paused | forgotten after s (goal <= {forget + 2:g}) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    base: dict[str, Row] = {r.design: r for r in rows if r.n == 0}
    for r in rows:
        b = base.get(r.design)
        cpu_ratio = r.core_cpu / b.core_cpu if b and b.core_cpu and r.core_cpu else None
        cut_ratio = r.cut_pause_s / b.cut_pause_s if b and b.cut_pause_s and r.cut_pause_s else None
        extra = "-" if r.conns_extra is None else f"{r.conns_extra[0]:.1f}/{r.conns_extra[1]}"
        if not r.n or r.kill_paused is None:  # N = 0, or the run broke before the kill
            forgotten = "-"
        else:
            forgotten = "never" if r.forgotten_s is None else f"{r.forgotten_s:.1f}"
        lines.append(
            f"| {r.design} | {r.n} | {_fmt(r.attach_s, '.1f')} | {extra} | "
            f"{_fmt(r.conns_core, '.1f')} | {_fmt(r.core_cpu, '.4f')} | {_fmt(cpu_ratio)} | "
            f"{_fmt(r.deliveries, '.1f')} | {_fmt(r.cut_pause_s)} | {_fmt(cut_ratio)} | "
            f"{'-' if r.kill_paused is None else ('YES' if r.kill_paused else 'no')} | "
            f"{forgotten} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", default="0,16,32,64", help="extra node counts, comma separated")
    ap.add_argument("--design", default="both", choices=("ephemeral", "full", "both"))
    ap.add_argument("--forget", type=float, default=5.0, help="forget_ephemeral_after, s")
    ap.add_argument("--window", type=float, default=10.0, help="idle window, s")
    ap.add_argument("--settle", type=float, default=3.0, help="pause before measuring, s")
    args = ap.parse_args(argv)
    if not faultproxy_available():
        print("no fault proxy (python -m rabbitry faultproxy): cannot cut links", file=sys.stderr)
        return 2
    ns = [int(x) for x in args.n.split(",")]
    designs = ["ephemeral", "full"] if args.design == "both" else [args.design]
    rows: list[Row] = []
    root = Path(tempfile.mkdtemp(prefix="rabbitry-bench-membership-"))
    print(
        f"membership benchmark: 3 core nodes, pause_minority, net_ticktime {NET_TICKTIME} s, "
        f"forget_ephemeral_after {args.forget} s; {_load()} at start; {os.cpu_count()} CPUs"
    )
    for design in designs:
        for n in ns:
            factory = ClusterFactory(root / f"{design}-{n}")
            try:
                row = run_one(factory, design, n, args)
            except Exception as exc:  # a design that breaks at this N: say where, go on
                row = Row(design, n, notes=[f"{type(exc).__name__}: {str(exc)[:200]}"])
            finally:
                factory.close()
            rows.append(row)
            print(f"  {design} N={n}: done ({_load()}) {'; '.join(row.notes)}", flush=True)
    print()
    print(table(rows, args.forget))
    for r in rows:
        for note in r.notes:
            print(f"note {r.design} N={r.n}: {note}")
    print(f"\n{_load()} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
