"""mnesia_like benchmarks. Disc figures so far (transaction figures are to come):

1. Appends per second with fsync per commit: `TableLog.append_commit` of one small entry per
   commit under fsync="commit", next to Redis `SET` with `appendonly yes, appendfsync always`,
   on a redis-server this script starts on a free port with its AOF in the same directory tree
   (so both fsync on the same file system). Both are sequential: the next commit (SET) is
   issued when the previous one is durable (acknowledged), which is what one writer sees.
   Redis also pays a loopback round trip and redis-py per SET; ours is an in-process call.
   Rounds alternate ours / Redis so that drift in machine load hits both alike; figures are
   medians; the ratio is ours/redis (goal >= 1.0).
2. Start-up load time of a 100,000-record disc table, from a snapshot plus a log tail of 1,000
   commits (the state just before Mnesia's default dump threshold), and, for contrast, from a
   log of 100,000 one-record commits and no snapshot (a table that was never dumped). Files
   are in the page cache (they were just written): this is the CPU side of a start, not the
   disc's read speed.

Usage: python benchmarks/mnesia.py [--quick] [--rounds 3] [--commits 2000] [--records 100000]
           [--dir /path/on/the/disc/to/measure]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import redis

from mnesia_like.disc_log import TableLog


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


def bench_appends(root: Path, rounds: int, commits: int) -> None:
    """Figure 1: fsync-per-commit appends next to Redis SET with appendfsync always."""
    ours: list[float] = []
    theirs: list[float] = []
    with redis_always(root / "redis") as client:
        for r in range(rounds):
            ours.append(our_append_rate(root / "tables", commits, f"append{r}"))
            theirs.append(redis_set_rate(client, commits))
    o, t = statistics.median(ours), statistics.median(theirs)
    print(f"append, fsync per commit ({commits:,} x 1 record): ours {o:,.0f}/s")
    print(f"redis SET, appendfsync always ({commits:,} SETs): {t:,.0f}/s")
    print(f"  ratio ours/redis = {o / t:.2f}  (goal >= 1.00)  [{rounds} rounds]")


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


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds (a smoke run)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--commits", type=int, default=2000, help="commits (SETs) per round")
    parser.add_argument("--records", type=int, default=100_000, help="records in the loaded table")
    parser.add_argument(
        "--dir", type=Path, default=None, help="where to write (default: a tmp dir)"
    )
    args = parser.parse_args()
    rounds, commits = (1, 300) if args.quick else (args.rounds, args.commits)
    root = Path(tempfile.mkdtemp(prefix="bench-mnesia-", dir=args.dir))
    version = subprocess.run(
        ["redis-server", "--version"], capture_output=True, text=True, check=False
    ).stdout.split()
    print(f"python {sys.version.split()[0]}, {' '.join(version[:3])}, files in {root}")
    try:
        bench_appends(root, rounds, commits)
        bench_load(root, rounds, args.records)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
