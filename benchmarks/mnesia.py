"""mnesia_like benchmarks: the disc log, and the store's transactions and dirty writes.

1. Appends per second with fsync per commit: `TableLog.append_commit` of one small entry per
   commit under fsync="commit", next to Redis `SET` with `appendonly yes, appendfsync always`,
   on a redis-server this script starts on a free port with its AOF in the same directory tree
   (so both fsync on the same file system). Both are sequential: the next commit (SET) is
   issued when the previous one is durable (acknowledged), which is what one writer sees.
   Redis also pays a loopback round trip and redis-py per SET; ours is an in-process call.
   Rounds alternate ours / Redis so that drift in machine load hits both alike; figures are
   medians; the ratio is ours/redis (our aim >= 1.0: the issue names Redis as the baseline, no goal).
2. Start-up load time of a 100,000-record disc table, from a snapshot plus a log tail of 1,000
   commits (the state just before Mnesia's default dump threshold), and, for contrast, from a
   log of 100,000 one-record commits and no snapshot (a table that was never dumped). Files
   are in the page cache (they were just written): this is the CPU side of a start, not the
   disc's read speed.

3. Transactions per second with p50/p99 latency (part "tx"), with 1 and with 3 disc replicas:
   1 or 3 stores (`Mnesia`), each on its own NetKernel on loopback, all in this one process
   (one GIL for the three stores and the clients: a real cluster has one store per OS
   process). The table has disc copies on every node, fsync="commit". Each transaction is a
   counter increment: read one small record, write it back + 1. Each client thread has its
   own keys, so there are no lock conflicts unless --shared-keys is given; restarts are
   counted (fn runs once per attempt). Clients all call node a (the coordinator). Next to it,
   Redis `SET` (appendfsync always) with the same number of client threads, measured in the
   same round (rounds alternate ours / Redis). A client issues its next request when the
   previous one was answered; the figures are medians over rounds, the latencies are the
   percentiles of the round with the median rate.
4. dirty_write per second (part "dirty"), 1 and 3 disc replicas, same set-up and baseline.
   A dirty_write is answered once this node's disc copy has it (fsynced); the other replicas
   get it asynchronously. So with 3 replicas the run also waits until every replica has the
   last write of every client, and reports the rate up to then as "replicated".

5. Against a replicated anchor (part "etcd"): the transactions of figure 3 on 3 disc
   replicas next to a 3-member etcd cluster (Raft, WAL fsync per commit; Debian's
   etcd-server, found on PATH or installed with apt-get, see etcd_anchor.py) on loopback, driven
   through its HTTP/JSON gateway with the same client threads, each with its own keep-alive
   connection to the leader: etcd `put` (its write rate, the anchor) and a counter increment
   as etcd does one (range, then a txn that puts value + 1 if the mod_revision is unchanged,
   retried on a conflict). Ratios are ours/etcd (our aim >= 1.0 with p99 no worse). Our
   stores run in two layouts side by side: "1 process" (the three stores and the clients in
   this process, one GIL) and "3 processes" (b and c in processes of their own,
   mnesia_replica.py, as etcd's members are). `--blind`: our transaction only writes one
   record, as a put does. Each line gives the CPU time per operation of every process
   involved, and ours the fsyncs and socket writes per transaction in this process.

--json (with --part etcd and one client count, given as --clients N or --etcd-clients N): the
last line printed is one JSON object for checking from outside: {"ours": our tx/s (the first
layout run, "1 process" by default), "baseline": etcd put/s in the same run, "ratio":
ours/baseline, "unit": "tx/s", ...} with p99s, CPU per operation, every layout and the load
averages; if etcd cannot be had or the run fails, the same object with "error" instead.

Parts: appends, load, tx, dirty, etcd (default: all but etcd). Ratios are ours/Redis (our aim >= 1.0: the issue names Redis as the baseline, no goal).

Usage: python benchmarks/mnesia.py [--quick] [--part appends|load|tx|dirty] [--rounds 3]
           [--commits 2000] [--records 100000] [--seconds 3] [--clients 1,4]
           [--replicas 1,3] [--shared-keys 0] [--etcd-clients 1,4,16] [--wread]
           [--blind] [--layout "1 process"|"3 processes"] [--commit parallel|classic]
           [--profile out.prof]
           [--dir /path/on/the/disc/to/measure]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import os
import pstats
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pykka
import redis
from etcd_anchor import EtcdCluster, etcd_cluster, find_etcd
from etcd_anchor import version as etcd_version

from mnesia_like import Mnesia, Schema
from mnesia_like.disc_log import TableLog
from monitors.dist import NetKernel
from monitors.dist.connection import _Writer


def free_port() -> int:
    """A port nothing listens on now (the kernel's choice)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def entry(i: int) -> dict[str, Any]:
    """A small entry shaped like the core's: a queue record and its Lamport stamp."""
    return {"v": {"name": f"q{i}", "vhost": "/", "durable": True}, "ts": [i, "a@127.0.0.1"]}


@contextlib.contextmanager
def redis_always(workdir: Path) -> Iterator[redis.Redis]:
    """A redis-server with appendonly yes and appendfsync always, stopped on exit."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not on PATH (apt install redis-server)")
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    args = ["--port", str(port), "--bind", "127.0.0.1", "--appendonly", "yes"]
    args += ["--appendfsync", "always", "--dir", str(workdir), "--save", ""]
    with open(workdir / "out.log", "ab") as out:
        proc = subprocess.Popen([binary, *args], stdout=out, stderr=subprocess.STDOUT)
    client = redis.Redis(port=port, socket_timeout=5)
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(redis.RedisError):
                if client.ping():
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start: see {workdir / 'out.log'}")
            time.sleep(0.01)
        yield client
    finally:
        client.close()
        proc.terminate()
        proc.wait(timeout=10)


def our_append_rate(directory: Path, commits: int, table: str) -> float:
    """Commits per second, one put per commit, fsync before each append_commit returns."""
    with TableLog.open(directory, table, fsync="commit", dump_records=10**9) as t:
        entries = [entry(i) for i in range(commits)]
        append = t.append_commit
        start = time.perf_counter()
        for i in range(commits):
            append(i + 1, [("put", f"k{i}", entries[i])])
        elapsed = time.perf_counter() - start
        t.delete_files()
    return commits / elapsed


def redis_set_rate(client: redis.Redis, commits: int) -> float:
    """SETs per second: each reply comes after Redis has fsynced its AOF."""
    values = [json.dumps(entry(i), separators=(",", ":")) for i in range(commits)]
    client.flushall()
    start = time.perf_counter()
    for i in range(commits):
        client.set(f"k{i}", values[i])
    elapsed = time.perf_counter() - start
    assert client.dbsize() == commits
    return commits / elapsed


def build_table(directory: Path, table: str, records: int, tail: int, dump: bool) -> None:
    """A disc table of `records` entries: bulk commits then a dump and `tail` one-record
    commits (dump=True), or `records` one-record commits and no dump (dump=False)."""
    with TableLog.open(directory, table, fsync="none", dump_records=10**9) as t:
        tid = 0
        if dump:
            for start in range(0, records - tail, 1000):
                tid += 1
                stop = min(start + 1000, records - tail)
                t.append_commit(tid, [("put", f"k{i}", entry(i)) for i in range(start, stop)])
            t.dump()
            first = records - tail
        else:
            first = 0
        for i in range(first, records):
            tid += 1
            t.append_commit(tid, [("put", f"k{i}", entry(i))])


def load_seconds(directory: Path, table: str, records: int) -> float:
    """Seconds for TableLog.open to load the table (snapshot, then the log on top)."""
    start = time.perf_counter()
    t = TableLog.open(directory, table)
    elapsed = time.perf_counter() - start
    assert len(t) == records, (len(t), records)
    t.close()
    return elapsed


def median(fn: Callable[[], float], rounds: int) -> float:
    return statistics.median(fn() for _ in range(rounds))


def bench_appends(root: Path, client: redis.Redis, rounds: int, commits: int) -> None:
    """Figure 1: fsync-per-commit appends next to Redis SET with appendfsync always."""
    ours: list[float] = []
    theirs: list[float] = []
    for r in range(rounds):
        ours.append(our_append_rate(root / "tables", commits, f"append{r}"))
        theirs.append(redis_set_rate(client, commits))
    o, t = statistics.median(ours), statistics.median(theirs)
    print(f"append, fsync per commit ({commits:,} x 1 record): ours {o:,.0f}/s")
    print(f"redis SET, appendfsync always ({commits:,} SETs): {t:,.0f}/s")
    print(f"  ratio ours/redis = {o / t:.2f}  (aim >= 1.00)  [{rounds} rounds]")


def bench_load(root: Path, rounds: int, records: int, tail: int = 1000) -> None:
    """Figure 2: start-up load time of a disc table of `records` entries."""
    directory = root / "tables"
    build_table(directory, "snap", records, tail, dump=True)
    seconds = median(lambda: load_seconds(directory, "snap", records), rounds)
    size = sum(p.stat().st_size for p in directory.glob("snap.*"))
    print(
        f"load {records:,} records (snapshot + {tail:,}-commit log tail, {size / 1e6:.1f} MB): "
        f"{seconds * 1000:,.0f} ms ({records / seconds:,.0f} records/s)"
    )
    build_table(directory, "logonly", records, tail, dump=False)
    seconds = median(lambda: load_seconds(directory, "logonly", records), rounds)
    size = (directory / "logonly.log").stat().st_size
    print(
        f"load {records:,} records (log of {records:,} commits, no snapshot, {size / 1e6:.1f} MB): "
        f"{seconds * 1000:,.0f} ms ({records / seconds:,.0f} records/s)"
    )


# ----------------------------------------------------------------- the store: tx and dirty

COOKIE = b"bench-mnesia-cookie"
TABLE = "bench"
STORE_OPTIONS = {"startup_timeout": 0.3, "reconnect_interval": 0.2, "load_timeout": 5.0}


@dataclass
class Run:
    """One timed run of client threads: operations, wall seconds, per-op latencies (s)."""

    ops: int
    seconds: float
    latencies: list[float]
    restarts: int = 0
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.ops / self.seconds

    def pct(self, q: float) -> float:
        lat = sorted(self.latencies)
        return lat[min(len(lat) - 1, int(q * len(lat)))] if lat else float("nan")


FSYNCS = [0]  # fdatasync calls in this process (the stores' disc logs), see count_fsyncs


@contextlib.contextmanager
def count_fsyncs() -> Iterator[None]:
    """Count os.fdatasync calls (instrumentation only: each call still goes through)."""
    real = os.fdatasync

    def counted(fd: int) -> None:
        FSYNCS[0] += 1  # a lost increment under a race only makes the count a little low
        real(fd)

    os.fdatasync = counted
    try:
        yield
    finally:
        os.fdatasync = real


def cpu_seconds(pids: list[int]) -> tuple[float, float]:
    """CPU time (user + system, s) of this process (the clients, and the stores that run
    here), and of the processes `pids` together (servers in processes of their own)."""
    here = os.times()
    there = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            t = psutil.Process(pid).cpu_times()
            there += t.user + t.system
    return here.user + here.system, there


WRITES = [0]  # writes of frames to dist sockets in this process, see count_writes


@contextlib.contextmanager
def count_writes() -> Iterator[None]:
    """Count the writes of dist frames (one or more frames each) to peers' connections in
    this process (instrumentation only: each write still goes through). Frames coalesced per
    peer show as fewer writes than messages."""
    real = _Writer.write

    def counted(self: _Writer, data: bytes, block: bool = True) -> bool:
        WRITES[0] += 1  # a lost increment under a race only makes the count a little low
        return real(self, data, block)

    _Writer.write = counted  # type: ignore[method-assign]
    try:
        yield
    finally:
        _Writer.write = real  # type: ignore[method-assign]


def run_clients(
    threads: int, seconds: float, op: Callable[[int, int], None], pids: list[int] | None = None
) -> Run:
    """`threads` client threads call op(thread, i) back to back for `seconds`; each
    thread issues its next call when the previous one returned. The CPU time this process
    and the processes `pids` spent meanwhile goes in `extra` ("cpu_here", "cpu_there")."""
    barrier = threading.Barrier(threads + 1)
    stop = threading.Event()
    lats: list[list[float]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []

    def client(t: int) -> None:
        mine = lats[t]
        clock = time.perf_counter
        barrier.wait()
        i = 0
        try:
            while not stop.is_set():
                start = clock()
                op(t, i)
                mine.append(clock() - start)
                i += 1
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=client, args=(t,), daemon=True) for t in range(threads)]
    for w in workers:
        w.start()
    fsyncs, writes = FSYNCS[0], WRITES[0]
    barrier.wait()
    start = time.perf_counter()
    cpu0 = cpu_seconds(pids or [])
    time.sleep(seconds)
    stop.set()
    for w in workers:
        w.join(60)
    elapsed = time.perf_counter() - start
    cpu1 = cpu_seconds(pids or [])
    if errors:
        raise RuntimeError(f"a client failed: {errors[0]!r}") from errors[0]
    merged = [x for lat in lats for x in lat]
    run = Run(len(merged), elapsed, merged)
    run.extra["fsyncs"] = FSYNCS[0] - fsyncs
    run.extra["writes"] = WRITES[0] - writes
    run.extra["cpu_here"] = cpu1[0] - cpu0[0]
    run.extra["cpu_there"] = cpu1[1] - cpu0[1]
    return run


def redis_set_run(client: redis.Redis, threads: int, seconds: float) -> Run:
    """Redis SET (appendfsync always: each reply after the AOF fsync) from `threads` clients,
    each with its own connection from the client's pool."""
    client.flushall()
    values = [json.dumps(entry(i), separators=(",", ":")) for i in range(100)]
    return run_clients(
        threads, seconds, lambda t, i: client.set(f"k{t}-{i % 1000}", values[i % 100])
    )


@contextlib.contextmanager
def store_cluster(
    root: Path, replicas: int, procs: bool = False, prefix: str = "", pids: list[int] | None = None
) -> Iterator[list[Schema]]:
    """`replicas` stores, each on its own NetKernel on loopback (in this process), with a
    table TABLE of disc copies on all of them (fsync per commit). Stopped on exit.

    With `procs`, only the first store (the one the clients call) runs here; the others run
    in their own OS processes (mnesia_replica.py), as in a real cluster, and the list holds
    only the first store's Schema. `prefix` goes before the node names (a, b, c), so that
    two clusters can run side by side. The replica processes' pids are added to `pids`."""
    names = [f"{prefix}{x}@127.0.0.1" for x in "abc"[:replicas]]
    kernels: list[NetKernel] = []
    stores: list[Any] = []
    children: list[subprocess.Popen[str]] = []
    data = Path(tempfile.mkdtemp(prefix=f"store{replicas}-", dir=root))
    try:
        for name in names[: 1 if procs else replicas]:
            ref = NetKernel.start(name, "127.0.0.1:0", COOKIE, net_ticktime=8.0)
            kernels.append(NetKernel.of(ref))
        if procs:
            children = _replica_processes(kernels[0], names[1:], data)
            if pids is not None:
                pids.extend(child.pid for child in children)
        for k in kernels:
            for other in kernels:
                if other is not k:
                    k.set_address(other.node, other.address)
        for name, k in zip(names, kernels, strict=False):
            extra = [n for n in names if n != name]
            stores.append(
                Mnesia.start(
                    k.actor_ref,
                    data / name,
                    extra_db_nodes=extra,
                    fsync="commit",
                    **STORE_OPTIONS,
                )
            )
        dbs = [Schema(ref, timeout=30.0) for ref in stores]
        deadline = time.monotonic() + 20
        while any(len(db.system_info("running_db_nodes")) < replicas for db in dbs):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the {replicas} stores did not see each other in 20 s")
            time.sleep(0.02)
        dbs[0].create_table(TABLE, attributes=["key", "value"], disc_copies=names)
        for db in dbs:
            db.wait_for_tables([TABLE], timeout=20)
        yield dbs
    finally:
        for ref in stores:
            with contextlib.suppress(pykka.ActorDeadError):
                ref.stop()
        for k in kernels:
            with contextlib.suppress(pykka.ActorDeadError):
                k.actor_ref.stop()
        for child in children:
            _stop_child(child)
        shutil.rmtree(data, ignore_errors=True)


def _replica_processes(
    first: NetKernel, names: list[str], data: Path
) -> list[subprocess.Popen[str]]:
    """Start the stores `names` in their own processes (mnesia_replica.py) on free ports,
    each knowing every other's address; `first` (in this process) learns theirs too."""
    addresses = {first.node: first.address}
    addresses |= {name: f"127.0.0.1:{free_port()}" for name in names}
    script = Path(__file__).with_name("mnesia_replica.py")
    children = []
    for name in names:
        peers = [f"{n}={a}" for n, a in addresses.items() if n != name]
        port = addresses[name].rsplit(":", 1)[1]
        args = [sys.executable, str(script), name, port, str(data / name), COOKIE.decode()]
        children.append(
            subprocess.Popen(args + peers, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        )
    for child, name in zip(children, names, strict=True):
        assert child.stdout is not None
        if child.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the replica process {name} did not start (exit {child.poll()})")
        first.set_address(name, addresses[name])
    return children


def _stop_child(child: subprocess.Popen[str]) -> None:
    """Close its stdin (it stops its store and exits); kill it if it does not."""
    with contextlib.suppress(OSError):
        assert child.stdin is not None
        child.stdin.close()
    try:
        child.wait(10)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait(5)


def tx_run(
    db: Schema,
    threads: int,
    seconds: float,
    shared_keys: int,
    base: int,
    *,
    wread: bool = False,
    blind: bool = False,
    pids: list[int] | None = None,
) -> Run:
    """Counter increments as transactions: read one record, write it back + 1 (with `wread`,
    the read takes the write lock, Mnesia's idiom for a read-modify-write: one lock round).
    With `blind`, a transaction only writes one record (no read: what an etcd put does), to
    keys of their own ("w...", left out of the counter check)."""
    attempts = [0] * threads

    def op(t: int, i: int) -> None:
        key = f"s{i % shared_keys}" if shared_keys else f"c{base + t}-{i % 50}"

        def bump(tx: Any) -> None:
            attempts[t] += 1
            row = tx.wread(TABLE, key) if wread else tx.read(TABLE, key)
            tx.write(TABLE, {"key": key, "value": (row["value"] if row else 0) + 1})

        def put(tx: Any) -> None:
            attempts[t] += 1
            tx.write(TABLE, {"key": f"w{base + t}-{i % 50}", "value": i})

        db.transaction(put if blind else bump)

    run = run_clients(threads, seconds, op, pids)
    run.restarts = sum(attempts) - run.ops
    return run


def dirty_run(dbs: list[Schema], threads: int, seconds: float, base: int) -> Run:
    """dirty_write of one small record per call, on node a; then (several replicas) wait
    until every replica has every client's last write."""
    last: dict[str, int] = {}

    def op(t: int, i: int) -> None:
        key = f"d{base + t}-{i % 50}"
        dbs[0].dirty_write(TABLE, {"key": key, "value": i})
        last[key] = i  # only thread t writes its keys

    start = time.perf_counter()
    run = run_clients(threads, seconds, op)
    if len(dbs) > 1:
        deadline = time.monotonic() + 120
        for db in dbs[1:]:
            for key, value in last.items():
                while (db.dirty_read(TABLE, key) or {}).get("value") != value:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"replica missing {key}={value} after 120 s")
                    time.sleep(0.005)
        # Each client's last write of a key is the last one a replica applies for it, and
        # a replica's dirty messages from a arrive in order, so all writes are in by now.
        run.extra["replicated_rate"] = run.ops / (time.perf_counter() - start)
    return run


def check_counters(dbs: list[Schema], committed: int) -> None:
    """Every replica's counters add up to the committed transactions (none lost, none twice)."""
    for db in dbs:
        rows = db.dirty_match(TABLE, {})
        total = sum(r["value"] for r in rows if str(r["key"])[:1] not in ("d", "w"))
        if total != committed:
            raise AssertionError(f"counters add up to {total}, expected {committed}")


def ms(x: float) -> str:
    return f"{x * 1000:.2f} ms"


def verdict(ratio: float) -> str:
    if ratio >= 1.0:
        return "aim met"
    if ratio >= 0.5:
        return "below the aim"
    return "POOR: well below the aim"


def report(label: str, ours: list[Run], theirs: list[Run], what: str) -> None:
    """Median rate of our rounds and of Redis's, the latencies of the median round, ratios."""
    o = sorted(ours, key=lambda r: r.rate)[len(ours) // 2]
    t = sorted(theirs, key=lambda r: r.rate)[len(theirs) // 2]
    restarts = sum(r.restarts for r in ours)
    ops = sum(r.ops for r in ours)
    line = f"{label}: {o.rate:,.0f}/s  p50 {ms(o.pct(0.5))}  p99 {ms(o.pct(0.99))}"
    if what == "tx":
        line += f"  restarts {restarts} in {ops:,} tx"
    fsyncs = sum(r.extra["fsyncs"] for r in ours)
    line += f"  fdatasync/op {fsyncs / max(ops, 1):.1f}"
    print(line)
    if "replicated_rate" in o.extra:
        rep = statistics.median(r.extra["replicated_rate"] for r in ours)
        print(
            f"    until every replica has them: {rep:,.0f}/s  (ratio to redis {rep / t.rate:.2f})"
        )
    print(
        f"    redis SET, same clients: {t.rate:,.0f}/s  p50 {ms(t.pct(0.5))}  p99 {ms(t.pct(0.99))}"
    )
    ratio = o.rate / t.rate
    print(
        f"    ratio ours/redis = {ratio:.2f} ({verdict(ratio)}); "
        f"latency p50 x{o.pct(0.5) / t.pct(0.5):.1f}, p99 x{o.pct(0.99) / t.pct(0.99):.1f}"
    )


def load_note() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min)"


def bench_store(
    root: Path,
    client: redis.Redis,
    what: str,
    *,
    rounds: int,
    seconds: float,
    clients: list[int],
    replicas: list[int],
    shared_keys: int,
    wread: bool = False,
) -> None:
    """Figures 3 (what="tx") and 4 (what="dirty"): rounds alternate ours / Redis SET."""
    print(f"-- {what}: {load_note()} at start")
    for n in replicas:
        with store_cluster(root, n) as dbs:
            base = 0
            committed = 0
            for threads in clients:  # warm up: connections, first fsyncs, code paths
                if what == "tx":
                    committed += tx_run(dbs[0], threads, 0.3, shared_keys, base, wread=wread).ops
                else:
                    dirty_run(dbs, threads, 0.3, base)
            ours: dict[int, list[Run]] = {c: [] for c in clients}
            theirs: dict[int, list[Run]] = {c: [] for c in clients}
            for _ in range(rounds):
                for threads in clients:
                    base += threads
                    if what == "tx":
                        ours[threads].append(
                            tx_run(dbs[0], threads, seconds, shared_keys, base, wread=wread)
                        )
                    else:
                        ours[threads].append(dirty_run(dbs, threads, seconds, base))
                    theirs[threads].append(redis_set_run(client, threads, seconds))
            if what == "tx":
                committed += sum(r.ops for runs in ours.values() for r in runs)
                check_counters(dbs, committed)
            for threads in clients:
                kind = (
                    f"tx ({'wread' if wread else 'read'} + write 1 record)"
                    if what == "tx"
                    else "dirty_write (1 record)"
                )
                report(
                    f"{kind}, {n} disc replica{'s' if n > 1 else ''}, {threads} client"
                    f"{'s' if threads > 1 else ''}",
                    ours[threads],
                    theirs[threads],
                    what,
                )
    print(f"-- {what}: {load_note()} at end  [{rounds} rounds of {seconds:g} s]")


def etcd_put_run(etcd: EtcdCluster, threads: int, seconds: float, base: int) -> Run:
    """etcd puts of one small value per call (acknowledged once a quorum fsynced it)."""
    values = [json.dumps(entry(i), separators=(",", ":")) for i in range(100)]
    return run_clients(
        threads,
        seconds,
        lambda t, i: etcd.client().put(f"k{base + t}-{i % 50}", values[i % 100]),
        etcd.pids,
    )


def etcd_tx_run(etcd: EtcdCluster, threads: int, seconds: float, base: int) -> Run:
    """Counter increments as etcd does them: range, then a compare-on-revision txn."""
    attempts = [0] * threads

    def op(t: int, i: int) -> None:
        attempts[t] += etcd.client().increment(f"c{base + t}-{i % 50}")

    run = run_clients(threads, seconds, op, etcd.pids)
    run.restarts = sum(attempts) - run.ops
    return run


def _median_run(runs: list[Run]) -> Run:
    return sorted(runs, key=lambda r: r.rate)[len(runs) // 2]


def report_etcd(label: str, ours: dict[str, list[Run]], put: list[Run], txn: list[Run]) -> None:
    """Our median rounds (per layout) against etcd's put and increment: rates, p50/p99,
    ratios."""
    p, t = _median_run(put), _median_run(txn)
    print(f"{label}:")
    for name, theirs in (("put", p), ("increment (range + txn)", t)):
        print(
            f"    etcd {name}: {theirs.rate:,.0f}/s  p50 {ms(theirs.pct(0.5))}"
            f"  p99 {ms(theirs.pct(0.99))}; {_cpu_note(theirs, 'the members')}"
        )
    for layout, runs in ours.items():
        o = _median_run(runs)
        restarts = sum(r.restarts for r in runs)
        print(
            f"    ours, {layout}: {o.rate:,.0f} tx/s  p50 {ms(o.pct(0.5))}  p99 {ms(o.pct(0.99))}"
            f"  restarts {restarts} in {sum(r.ops for r in runs):,} tx,"
            f" {o.extra['fsyncs'] / max(o.ops, 1):.2f} fsyncs and"
            f" {o.extra['writes'] / max(o.ops, 1):.1f} socket writes/tx here;"
            f" {_cpu_note(o, 'b and c' if o.extra['cpu_there'] else '')}"
        )
        for name, theirs in (("put", p), ("increment", t)):
            ratio = o.rate / theirs.rate
            print(
                f"        ratio to etcd {name} = {ratio:.2f} ({verdict(ratio)}),"
                f" p99 x{o.pct(0.99) / theirs.pct(0.99):.1f}"
            )


def _cpu_note(run: Run, there: str) -> str:
    """CPU ms per operation: all of it, and the part of the processes named `there`."""
    here, away = run.extra["cpu_here"], run.extra["cpu_there"]
    per = 1000 / max(run.ops, 1)
    note = f"CPU {(here + away) * per:.2f} ms/op"
    if there:
        note += f" ({there} {away * per:.2f}, this process {here * per:.2f})"
    return note + f", {(here + away) / run.seconds:.2f} cores"


LAYOUTS = {
    "1 process": False,  # the three stores and the clients share this process (one GIL)
    "3 processes": True,  # b and c in their own processes, as etcd's members are
}


class EtcdMissing(RuntimeError):
    """etcd is not on PATH and could not be installed: the etcd part cannot run."""


def bench_etcd(
    root: Path,
    *,
    rounds: int,
    seconds: float,
    clients: list[int],
    wread: bool = False,
    blind: bool = False,
    layouts: list[str] | None = None,
) -> dict[int, dict[str, Any]]:
    """Figure 5: our transactions on 3 disc replicas against a 3-member etcd cluster; rounds
    alternate ours (in each layout) / etcd put / etcd increment. Returns the figures per client
    count (for --json); raises RuntimeError when etcd cannot be had."""
    try:
        binary = find_etcd()
    except RuntimeError as exc:
        print(f"-- etcd: skipped: {exc}")
        raise EtcdMissing(str(exc)) from exc
    layouts = layouts or list(LAYOUTS)
    print(f"-- etcd: {etcd_version(binary)}, 3 members; {load_note()} at start")
    with contextlib.ExitStack() as stack:
        pids: dict[str, list[int]] = {layout: [] for layout in layouts}
        clusters = {
            layout: stack.enter_context(
                store_cluster(root, 3, procs=LAYOUTS[layout], prefix=f"l{i}", pids=pids[layout])
            )
            for i, layout in enumerate(layouts)
        }
        etcd = stack.enter_context(etcd_cluster(root / "etcd", 3))
        base = 1000
        committed = dict.fromkeys(clusters, 0)
        for threads in clients:  # warm up both
            for layout, dbs in clusters.items():
                run = tx_run(dbs[0], threads, 0.3, 0, base, wread=wread, blind=blind)
                committed[layout] += 0 if blind else run.ops
            etcd_put_run(etcd, threads, 0.3, base)
            etcd_tx_run(etcd, threads, 0.3, base)
            base += threads
        ours: dict[int, dict[str, list[Run]]] = {c: {x: [] for x in clusters} for c in clients}
        put: dict[int, list[Run]] = {c: [] for c in clients}
        txn: dict[int, list[Run]] = {c: [] for c in clients}
        for _ in range(rounds):
            for threads in clients:
                base += threads
                for layout, dbs in clusters.items():
                    run = tx_run(
                        dbs[0],
                        threads,
                        seconds,
                        0,
                        base,
                        wread=wread,
                        blind=blind,
                        pids=pids[layout],
                    )
                    ours[threads][layout].append(run)
                    committed[layout] += 0 if blind else run.ops
                put[threads].append(etcd_put_run(etcd, threads, seconds, base))
                txn[threads].append(etcd_tx_run(etcd, threads, seconds, base))
        for layout, dbs in clusters.items():
            check_counters(dbs, committed[layout])
        what = f"{'wread' if wread else 'read'} + write 1 record"
        figures = {c: etcd_figures(ours[c], put[c], txn[c]) for c in clients}
        for threads in clients:
            report_etcd(
                f"tx ({'write 1 record, no read' if blind else what}), 3 disc replicas, "
                f"{threads} client"
                f"{'s' if threads > 1 else ''}",
                ours[threads],
                put[threads],
                txn[threads],
            )
    print(f"-- etcd: {load_note()} at end  [{rounds} rounds of {seconds:g} s]")
    return figures


def _cpu_ms(run: Run) -> float:
    return round((run.extra["cpu_here"] + run.extra["cpu_there"]) * 1000 / max(run.ops, 1), 3)


def etcd_figures(ours: dict[str, list[Run]], put: list[Run], txn: list[Run]) -> dict[str, Any]:
    """The JSON figures of one client count: ours (first layout) over etcd put, same run."""
    p, t = _median_run(put), _median_run(txn)
    layouts = {}
    for layout, runs in ours.items():
        o = _median_run(runs)
        layouts[layout] = {
            "rate": round(o.rate, 1),
            "p99_ms": round(o.pct(0.99) * 1000, 3),
            "cpu_ms_per_op": _cpu_ms(o),
            "ratio": round(o.rate / p.rate, 4),
            "p99_ratio": round(o.pct(0.99) / p.pct(0.99), 3),
        }
    first = layouts[next(iter(ours))]
    return {
        "ours": first["rate"],
        "baseline": round(p.rate, 1),
        "ratio": first["ratio"],
        "unit": "tx/s",
        "layout": next(iter(ours)),
        "p99_ms": first["p99_ms"],
        "baseline_p99_ms": round(p.pct(0.99) * 1000, 3),
        "p99_ratio": first["p99_ratio"],
        "cpu_ms_per_op": first["cpu_ms_per_op"],
        "baseline_cpu_ms_per_op": _cpu_ms(p),
        "layouts": layouts,
        "etcd_increment": round(t.rate, 1),
    }


def profile_tx(root: Path, replicas: int, seconds: float, out: Path | None) -> None:
    """cProfile of every thread (stores, kernels, connections, the client) while 1 client runs
    transactions: each thread started from here on gets its own profiler, merged at the end."""
    profiles: list[cProfile.Profile] = []

    def start_profiler(*_: Any) -> None:
        sys.setprofile(None)
        prof = cProfile.Profile()
        profiles.append(prof)
        prof.enable()

    threading.setprofile(start_profiler)
    try:
        with store_cluster(root, replicas) as dbs:
            tx_run(dbs[0], 1, 0.3, 0, 900)
            run = tx_run(dbs[0], 1, seconds, 0, 901)
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]
    print(
        f"-- profile: {replicas} disc replica(s), 1 client, {run.rate:,.0f} tx/s under cProfile "
        f"({len(profiles)} threads profiled; {load_note()})"
    )
    stats = pstats.Stats(*profiles)
    if out is not None:
        stats.dump_stats(str(out))
        print(f"   stats in {out} (python -m pstats {out})")
    stats.sort_stats("tottime").print_stats(30)


PARTS = ("appends", "load", "tx", "dirty", "etcd")
DEFAULT_PARTS = ("appends", "load", "tx", "dirty")  # etcd: asked for by name


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds (a smoke run)")
    parser.add_argument("--part", choices=PARTS, action="append", help="run only this part")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--commits", type=int, default=2000, help="commits (SETs) per round")
    parser.add_argument("--records", type=int, default=100_000, help="records in the loaded table")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of a tx/dirty run")
    parser.add_argument(
        "--clients",
        type=ints,
        default=None,
        help="client threads, e.g. 1,4 (default 1,4; the etcd part too when --etcd-clients is"
        " not given)",
    )
    parser.add_argument("--replicas", type=ints, default=[1, 3], help="disc replicas, e.g. 1,3")
    parser.add_argument(
        "--shared-keys", type=int, default=0, help="tx: all clients bump these N keys (conflicts)"
    )
    parser.add_argument(
        "--etcd-clients",
        type=ints,
        default=None,
        help="etcd part: client threads (default: --clients if given, else 1,4,16)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="etcd part, one client count: print its figures as one JSON object, the last line",
    )
    parser.add_argument(
        "--layout",
        choices=list(LAYOUTS),
        action="append",
        help="etcd part: where our stores run (default: both, alternating)",
    )
    parser.add_argument(
        "--commit",
        choices=["parallel", "classic"],
        default="parallel",
        help="how our stores commit: parallel (the default: one fsync, the prepares', on a "
        "commit's path) or classic (a decision log, then the replicas' commits)",
    )
    parser.add_argument(
        "--parallel-commit",
        dest="commit",
        action="store_const",
        const="parallel",
        help="the same as --commit parallel (the default now; kept for older scripts)",
    )
    parser.add_argument(
        "--blind",
        action="store_true",
        help="etcd part: our transaction only writes one record (no read), as a put does",
    )
    parser.add_argument(
        "--wread",
        action="store_true",
        help="tx and etcd parts: read with the write lock (Mnesia's wread): one lock round",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="instead of the parts: cProfile the tx path (1 client, --replicas) into this file",
    )
    parser.add_argument(
        "--dir", type=Path, default=None, help="where to write (default: a tmp dir)"
    )
    args = parser.parse_args()
    STORE_OPTIONS["parallel_commit"] = args.commit == "parallel"
    # for the replica processes (mnesia_replica.py)
    os.environ["RABBITRY_BENCH_PARALLEL_COMMIT"] = "1" if args.commit == "parallel" else "0"
    etcd_clients = args.etcd_clients or args.clients or [1, 4, 16]
    args.clients = args.clients or [1, 4]
    if args.json and (args.part != ["etcd"] or len(etcd_clients) != 1):
        parser.error("--json reports one etcd run: use --part etcd with one --clients value")
    if args.json:
        return _json_main(args, etcd_clients[0])
    _run(args, etcd_clients)
    return 0


def _json_main(args: argparse.Namespace, clients: int) -> int:
    """Run the etcd part and print its figures as the last line; an error (no etcd, a failed
    run) comes out in the same object, never as a traceback."""
    load_start = [round(x, 2) for x in os.getloadavg()]
    result: dict[str, Any] = {"ours": None, "baseline": None, "ratio": None, "unit": "tx/s"}
    code = 0
    try:
        figures = _run(args, [clients])
        result.update(figures[clients])
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
        code = 1
    result.update(
        clients=clients,
        replicas=3,
        load_start=load_start,
        load_end=[round(x, 2) for x in os.getloadavg()],
    )
    result["parallel_commit"] = args.commit == "parallel"
    print(json.dumps(result), flush=True)
    return code


def _run(args: argparse.Namespace, etcd_clients: list[int]) -> dict[int, dict[str, Any]]:
    """The parts asked for; returns the etcd part's figures (empty without it)."""
    figures: dict[int, dict[str, Any]] = {}
    rounds, commits = (1, 300) if args.quick else (args.rounds, args.commits)
    seconds = min(args.seconds, 1.0) if args.quick else args.seconds
    parts = args.part or list(DEFAULT_PARTS)
    root = Path(tempfile.mkdtemp(prefix="bench-mnesia-", dir=args.dir))
    version = subprocess.run(
        ["redis-server", "--version"], capture_output=True, text=True, check=False
    ).stdout.split()
    print(f"python {sys.version.split()[0]}, {' '.join(version[:3])}, files in {root}")
    print(f"{os.cpu_count()} cpus, {load_note()}")
    try:
        if args.profile is not None:
            for n in args.replicas:
                profile_tx(root, n, seconds, args.profile.with_suffix(f".{n}.prof"))
            return figures
        with contextlib.ExitStack() as stack:
            stack.enter_context(count_fsyncs())
            stack.enter_context(count_writes())
            client = None
            if {"appends", "tx", "dirty"} & set(parts):
                client = stack.enter_context(redis_always(root / "redis"))
            if "appends" in parts:
                bench_appends(root, client, rounds, commits)
            if "load" in parts:
                bench_load(root, rounds, args.records)
            if "etcd" in parts:
                with contextlib.suppress(*(() if args.json else (EtcdMissing,))):
                    figures = bench_etcd(
                        root,
                        rounds=rounds,
                        seconds=seconds,
                        clients=etcd_clients,
                        wread=args.wread,
                        blind=args.blind,
                        layouts=args.layout,
                    )
            for what in ("tx", "dirty"):
                if what in parts:
                    bench_store(
                        root,
                        client,
                        what,
                        rounds=rounds,
                        seconds=seconds,
                        clients=args.clients,
                        replicas=args.replicas,
                        shared_keys=args.shared_keys,
                        wread=args.wread,
                    )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return figures


if __name__ == "__main__":
    raise SystemExit(main())
