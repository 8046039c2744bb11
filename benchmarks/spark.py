"""Spark pipeline benchmark: the exactly-once job on embedded executor nodes, next to the same
job claiming nothing (the limit), in one run and one session.

Both run the same pipeline code (rabbitry.pipeline.run_pipeline) over the same generated input
on `local-cluster[2,1,1024]`, alternating rounds so drift in machine load hits both alike:

- embedded: executors embed a node each (rabbitry.spark.configure); every batch checks the
  node runs, reads the revoked set, and claims through FailoverRedis on the failover set's
  master with WAIT for 1 replica (the stack of rabbitry.demo.stack: 3 redis-servers, the
  RCS/RCC tree, 3 core nodes).
- limit (the baseline): the same job with `no_claims`: it reads, parses, checks and writes
  the same data through the same Arrow path, and claims nothing. No claim path can beat it.
- spark alone: the JVM reads the same lines and writes them as Parquet, one pass, no Python:
  the floor under the limit (what Spark itself costs on this machine); and the skeleton: the
  limit's Spark jobs (the job that fills the cached verdicts and collects each partition's
  closing row, then the Parquet) with a constant verdict instead of the Python pass: what the
  limit costs before any Python runs.
- with --plain: also plain SET NX through redis-py on the same master (no rabbitry), in its
  own SparkSession without the embedding (the old baseline).

Each figure is the median over --rounds of the whole job's wall time, after one warm-up run of
each, so JVM class loading counts for neither. The ratio printed is limit_time /
embedded_time: the embedded job's throughput as a fraction of the limit.

Where each job's CPU goes, per run (median): the machine's busy CPU seconds (/proc/stat, both
cores), and each kind of process's (the JVMs, the Python workers, the redis-servers, this
driver, the nodes and the rest, by psutil). On a 2-core machine every part shares the cores,
so what the claims cost anywhere, Redis included, comes off the job's pace. Then the Redis
master's own time inside each command per claiming run (INFO commandstats).

--profile: one more embedded run and one more limit run with a cProfile of every
partition's Python worker (PipelineOptions.profile_dir), summed, its main thread and its
claim threads apart: where an executor's Python time goes.

Then the recovery figure: a run on the embedded stack where the Redis master is SIGKILLed
once claiming has begun. Printed: the failover time (kill -> the new master in this host's
master file) and the time from the kill to the pipeline claiming again: the new master's claim
count growing by more than one batch past what it held at the kill (polled every 5 ms).

    python benchmarks/spark.py [--messages 200000] [--rounds 3] [--partitions 16] [--profile]
        [--part all|throughput|claims|recovery] [--json]

--json (with --part throughput): the last line printed is one JSON object for checking from
outside: {"ours": embedded msg/s, "baseline": the limit's msg/s in the same run, "ratio":
ours/baseline, "unit": "msg/s", ...} with the load averages at start and end; on a failure,
the same object with "error" (and null figures) instead of a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Run as a script, this directory comes first on sys.path, and its failover.py would shadow
# the failover package the stack imports: drop it.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

from rabbitry.demo.data import generate_messages  # noqa: E402
from rabbitry.demo.stack import DemoStack  # noqa: E402
from rabbitry.pipeline import PipelineOptions, run_pipeline  # noqa: E402

MASTER = "local-cluster[2,1,1024]"


def _timed(spark: Any, data: Any, out: Path, opts: PipelineOptions) -> tuple[float, Any]:
    started = time.monotonic()
    summary = run_pipeline(spark, str(data.path), str(out), opts)
    return time.monotonic() - started, summary


CPU_KINDS = ("machine", "jvm", "python workers", "redis", "driver", "nodes and other")


def _cpu_kind(proc: Any) -> str:
    """Which part of the run a process is: where the run's CPU goes (--cpu)."""
    if proc.pid == os.getpid():
        return "driver"
    name = proc.info["name"] or ""
    if name == "java":
        return "jvm"
    if name.startswith("redis-server"):
        return "redis"
    if "pyspark" in " ".join(proc.info["cmdline"] or ()):
        return "python workers"
    return "nodes and other"


def cpu_snapshot() -> dict[int, tuple[str, float]]:
    """CPU seconds (user + system) of every process now, by pid, with its kind; and the whole
    machine's busy seconds (all cores, from /proc/stat) under pid -1."""
    import psutil

    seen: dict[int, tuple[str, float]] = {}
    for proc in psutil.process_iter(["name", "cmdline", "cpu_times"]):
        times = proc.info["cpu_times"]
        if times is not None:
            seen[proc.pid] = (_cpu_kind(proc), times.user + times.system)
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    seen[-1] = ("machine", (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK"))
    return seen


def cpu_spent(before: dict[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds per kind since `before` (a process that ended in between is not counted;
    PySpark reuses its workers, so they live through a run)."""
    after = cpu_snapshot()
    spent = dict.fromkeys(CPU_KINDS, 0.0)
    for pid, (kind, seconds) in after.items():
        spent[kind] += seconds - before.get(pid, (kind, 0.0))[1]
    return spent


def _plain_session() -> Any:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(MASTER)
        .appName("rabbitry-bench-plain")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def throughput(stack: DemoStack, data: Any, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The embedded job against the limit (and the JVM-only floors), rounds alternating.
    Returns the figures for --json."""
    master = stack.redis_master()
    assert master is not None
    runs: dict[str, list[float]] = {
        k: [] for k in ("embedded", "limit", "keys", "plain", *JVM_ONLY)
    }
    cpu: dict[str, list[dict[str, float]]] = {k: [] for k in runs}
    n = 0

    def options(kind: str, **extra: Any) -> PipelineOptions:
        nonlocal n
        n += 1
        return PipelineOptions(
            partitions=args.partitions,
            batch=args.batch,
            run_id=f"bench-{time.time_ns()}-{n}",
            overwrite=True,
            plain_redis=master if kind == "plain" else None,
            no_claims=kind == "limit",
            claim_layout="keys" if kind == "keys" else "hash",
            **extra,
        )

    def measure(spark: Any, kinds: tuple[str, ...]) -> None:
        for kind in kinds:  # JVM and worker warm-up
            if kind in JVM_ONLY:
                JVM_ONLY[kind](spark, data, work / "warm", args.partitions)
            else:
                _timed(spark, data, work / "warm", options(kind))
        for _ in range(args.rounds):
            for kind in kinds:
                if kind in JVM_ONLY:
                    seconds = JVM_ONLY[kind](spark, data, work / "out", args.partitions)
                    print(f"  {kind:9s} {seconds:6.2f} s  (JVM only)", flush=True)
                else:
                    before = cpu_snapshot()
                    seconds, summary = _timed(spark, data, work / "out", options(kind))
                    cpu[kind].append(cpu_spent(before))
                    print(
                        f"  {kind:9s} {seconds:6.2f} s  processed {summary.processed}", flush=True
                    )
                runs[kind].append(seconds)

    spark = stack.start_spark()
    stack.warm_up(executors=2)
    commands_before = _commandstats(master)
    measure(spark, ("embedded", "limit", *(("keys",) if args.keys else ()), *JVM_ONLY))
    commands = _commandstats(master, commands_before)
    if args.profile:
        for kind in ("embedded", "limit"):
            folder = work / f"profile-{kind}"
            profile(spark, data, work, options(kind, profile_dir=str(folder)))
    spark.stop()
    stack.spark = None
    embedded = statistics.median(runs["embedded"])
    limit = statistics.median(runs["limit"])
    alone = statistics.median(runs["spark"])
    skeleton = statistics.median(runs["skeleton"])
    print(
        f"pipeline throughput, {data.messages} messages: embedded {data.messages / embedded:,.0f}"
        f" msg/s ({embedded:.2f} s), limit (same job, no claims) {data.messages / limit:,.0f}"
        f" msg/s ({limit:.2f} s); ratio embedded/limit = {limit / embedded:.2f}"
    )
    _print_floors(data.messages, limit, alone, skeleton)
    _print_cpu(cpu, ("embedded", "limit"))
    _print_commands(commands, args.rounds + 1 + (args.rounds + 1 if args.keys else 0), data)
    if args.keys:
        keys = statistics.median(runs["keys"])
        print(
            f"embedded with a key per claim (the layout before the claim hash)"
            f" {data.messages / keys:,.0f} msg/s ({keys:.2f} s); ratio keys/limit ="
            f" {limit / keys:.2f}; hash/keys = {keys / embedded:.2f}"
        )
    if args.plain:
        spark = _plain_session()
        measure(spark, ("plain",))
        spark.stop()
        plain = statistics.median(runs["plain"])
        print(
            f"plain SET NX (no rabbitry) {data.messages / plain:,.0f} msg/s ({plain:.2f} s); "
            f"ratio embedded/plain = {plain / embedded:.2f}"
        )
    return {
        "ours": round(data.messages / embedded, 1),
        "baseline": round(data.messages / limit, 1),
        "ratio": round(limit / embedded, 4),
        "unit": "msg/s",
        "what": "exactly-once pipeline (embedded) over the same job without claims (limit)",
        "messages": data.messages,
        "rounds": args.rounds,
        "seconds": {"embedded": round(embedded, 3), "limit": round(limit, 3)},
        "spark_alone": round(data.messages / alone, 1),
        **(
            {"keys_layout": round(data.messages / statistics.median(runs["keys"]), 1)}
            if args.keys
            else {}
        ),
        "skeleton": round(data.messages / skeleton, 1),
    }


def _print_floors(messages: int, limit: float, alone: float, skeleton: float) -> None:
    """The limit against what Spark alone costs on this machine (see the module docstring)."""
    print(
        f"spark alone (read the lines, write them as Parquet; no Python, one pass)"
        f" {messages / alone:,.0f} lines/s ({alone:.2f} s); ratio limit/spark alone ="
        f" {alone / limit:.2f}"
    )
    print(
        f"the limit's Spark jobs without its Python pass {messages / skeleton:,.0f} lines/s"
        f" ({skeleton:.2f} s); ratio limit/skeleton = {skeleton / limit:.2f}"
    )


def _print_cpu(cpu: dict[str, list[dict[str, float]]], kinds: tuple[str, str]) -> None:
    """Where each job's CPU went (medians over its rounds, in CPU seconds per run): on a
    2-core machine the JVMs, the workers and Redis share the cores, so what the claims add
    anywhere is taken from the job's own pace."""
    print("CPU seconds per run (median):  " + "  ".join(f"{k:>9s}" for k in kinds))
    for part in CPU_KINDS:
        values = [statistics.median(r[part] for r in cpu[k]) for k in kinds]
        print(f"  {part:28s} " + "  ".join(f"{v:9.2f}" for v in values))


def _commandstats(
    address: str, before: dict[str, tuple[int, int]] | None = None
) -> dict[str, tuple[int, int]]:
    """The master's calls and microseconds per command (INFO commandstats), since `before`."""
    import redis

    host, _, port = address.rpartition(":")
    stats = redis.Redis(host=host, port=int(port)).info("commandstats")
    now = {
        name.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"]))
        for name, v in stats.items()
    }
    if before is None:
        return now
    return {
        name: (calls - before.get(name, (0, 0))[0], usec - before.get(name, (0, 0))[1])
        for name, (calls, usec) in now.items()
    }


def _print_commands(commands: dict[str, tuple[int, int]], runs: int, data: Any) -> None:
    """The master's own time per claiming run, by command (the busiest first): what Redis
    spends inside commands, without the network and parsing around them."""
    busy = sorted(commands.items(), key=lambda kv: -kv[1][1])[:6]
    total = sum(usec for _, usec in commands.values()) / runs
    print(
        f"redis master, inside commands per claiming run: {total / 1e6:.3f} s"
        f" ({total / data.messages:.2f} µs per message; wall time inside the command, so a"
        " busy machine inflates it)"
    )
    for name, (calls, usec) in busy:
        print(f"  {name:14s} {calls / runs:9.0f} calls  {usec / runs / 1e6:7.3f} s")


def _spark_alone(spark: Any, data: Any, out: Path, partitions: int) -> float:
    """The floor under any job over this input on this machine: the JVM reads the lines and
    writes them as Parquet, in as many partitions as the pipeline uses; no Python at all."""
    size = max(data.path.stat().st_size, 1)
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(max(4096, -(-size // partitions))))
    started = time.monotonic()
    try:
        spark.read.text(str(data.path)).write.mode("overwrite").parquet(str(out))
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
    return time.monotonic() - started


def _skeleton(spark: Any, data: Any, out: Path, partitions: int) -> float:
    """The limit's JVM part without its Python: the pipeline's Spark jobs on the same lines
    (one job that fills the cache of verdicts and brings back each partition's closing row,
    with adaptive execution off as job._tally has it; then the Parquet from the cache), with
    a constant verdict where mapInArrow's Python pass would be."""
    from pyspark.sql import functions as F

    size = max(data.path.stat().st_size, 1)
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(max(4096, -(-size // partitions))))
    started = time.monotonic()
    try:
        frame = spark.read.text(str(data.path))
        verdicts = frame.withColumn("kind", F.lit("process")).persist()
        spark.conf.set("spark.sql.adaptive.enabled", "false")
        verdicts.filter(verdicts.kind == "lines").collect()
        spark.conf.unset("spark.sql.adaptive.enabled")
        verdicts.filter(verdicts.kind == "process").select("value").write.mode("overwrite").parquet(
            str(out)
        )
        verdicts.unpersist()
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
    return time.monotonic() - started


def profile(spark: Any, data: Any, work: Path, opts: PipelineOptions) -> None:
    """One run with every partition's Python worker profiled; print where it went. The
    worker has the main thread (Spark's Arrow in and out, the parse, the output columns) and
    its claim threads (the claims, up to PipelineOptions.claims_in_flight batches in flight
    while the next are parsed), each profiled on its own and the claim threads summed; their
    times overlap."""
    import pstats

    seconds, _ = _timed(spark, data, work / "prof", opts)
    folder = Path(opts.profile_dir or "")
    main_files = sorted(str(p) for p in folder.glob("*.prof"))
    claim_files = sorted(str(p) for p in folder.glob("*.claims"))
    if not main_files:
        print("profile: no profiles were written (executors on another host?)")
        return
    kind = "limit (no claims)" if opts.no_claims else "embedded"
    print(f"profile of {len(main_files)} partitions' Python workers, {kind} ({seconds:.2f} s run):")
    main = pstats.Stats(*main_files)
    _report(
        main,
        "main thread",
        (
            ("parse and check (Arrow's JSON reader + compute)", "cumulative", ("parse_chunk",)),
            ("  of which the row-at-a-time fallback", "cumulative", ("_slow",)),
            (
                "output columns (verdicts, rejects)",
                "cumulative",
                ("verdict_columns", "reject_columns"),
            ),
            ("waiting for the claim threads' answers", "cumulative", ("_take",)),
            (
                "ids to Python strings, sorted out (revoked, repeats)",
                "cumulative",
                ("submit",),
            ),
            ("  of which the revoked set", "cumulative", ("revoked_ids",)),
        ),
    )
    if claim_files:
        _report(
            pstats.Stats(*claim_files),
            "claim threads",
            (
                ("claims sent (check, script call + WAIT)", "cumulative", ("send",)),
                (
                    "  of which the node's check (require_running)",
                    "cumulative",
                    ("require_running",),
                ),
                ("  of which sending (redis-py)", "own", ("method 'sendall'",)),
                (
                    "  of which waiting for Redis (script, replica, WAIT)",
                    "own",
                    ("method 'recv'", "method 'recv_into'"),
                ),
            ),
        )
    main.sort_stats("tottime").print_stats(10)


def _report(stats: Any, title: str, rows: tuple[tuple[str, str, tuple[str, ...]], ...]) -> None:
    table = stats.stats  # {(file, line, function): (calls, ncalls, own, cumulative, callers)}
    total = sum(v[2] for v in table.values())

    def value(how: str, names: tuple[str, ...]) -> float:
        if how == "own":  # built-ins are named "<method 'recv' of ...>"
            return sum(v[2] for (_, _, f), v in table.items() if any(n in f for n in names))
        # the outermost call of each name (nested calls are inside it)
        return sum(
            max((v[3] for (_, _, f), v in table.items() if f == n), default=0.0) for n in names
        )

    print(f"  {title}: {total:.2f} s over all partitions")
    for label, how, names in rows:
        print(f"    {label:58s} {value(how, names):7.2f} s")


def claims_alone(stack: DemoStack, args: argparse.Namespace) -> None:
    """The claim path without Spark: one Claimer (the job's, batches of --batch) through a
    FailoverRedis on the stack's master with WAIT for 1 replica, as an executor claims, over
    fresh ids; then two such clients at once (the two executors). The ceiling of claims on
    this machine; beside it, the same script on the master without WAIT."""
    from failover import FailoverRedis
    from rabbitry.demo.stack import SYSTEM
    from rabbitry.spark.claims import Claimer

    count = args.messages
    ids = [f"claim-{n:08d}" for n in range(count)]

    def run(wait: int, clients: int, layout: str = "hash") -> float:
        tag = f"alone-{time.time_ns()}"

        def one(part: list[str], index: int) -> None:
            client = FailoverRedis(str(stack.master_file), system=SYSTEM, wait_replicas=wait)
            claimer = Claimer(client, tag, f"{tag}:{index}", batch=args.batch, layout=layout)
            for start in range(0, len(part), args.batch):
                claimer.claim_ids(part[start : start + args.batch])
            client.close()

        parts = [ids[i::clients] for i in range(clients)]
        threads = [threading.Thread(target=one, args=(p, i)) for i, p in enumerate(parts)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return count / (time.monotonic() - started)

    # the two layouts alternate, so drift in the machine's load hits both alike
    hashed: dict[str, list[float]] = {"one": [], "two": [], "none": []}
    keyed: dict[str, list[float]] = {"one": [], "two": [], "none": []}
    for _ in range(args.rounds):
        for layout, into in (("hash", hashed), ("keys", keyed)):
            into["one"].append(run(1, 1, layout))
            into["two"].append(run(1, 2, layout))
            into["none"].append(run(0, 1, layout))
    for layout, got in (("hash", hashed), ("keys", keyed)):
        one_wait, two_wait, no_wait = (statistics.median(got[k]) for k in ("one", "two", "none"))
        print(
            f"claims alone (no Spark), layout {layout}, batches of {args.batch}: {one_wait:,.0f}"
            f" claims/s from one client with WAIT 1, {two_wait:,.0f} from two at once;"
            f" {no_wait:,.0f} without WAIT (ratio WAIT/no WAIT = {one_wait / no_wait:.2f})"
        )
    ratio = statistics.median(hashed["one"]) / statistics.median(keyed["one"])
    print(
        f"  ratio hash/keys, one client with WAIT = {ratio:.2f}"
        f"  [load average {os.getloadavg()[0]:.2f}]"
    )
    redis_cost(stack, ids, args.batch, lambda: run(1, 2, "hash"))


def redis_cost(stack: DemoStack, ids: list[str], batch: int, claim: Callable[[], Any]) -> None:
    """What the claims cost the redis-servers in CPU (master and replicas apart), against the
    same number of hash fields written with plain HSET, `batch` fields a call, then one WAIT:
    the floor for one field per id, which exactly-once needs. Medians of 3, alternated."""
    import psutil
    import redis

    master = stack.redis_master()
    assert master is not None
    host, _, port = master.rpartition(":")
    assert stack.redis is not None
    servers = {
        pid: ("master" if address == master else "replica", psutil.Process(pid))
        for address, pid in stack.redis.pids().items()
    }
    plain = redis.Redis(host=host, port=int(port))

    def hset() -> None:
        key = f"bench:plain:{time.time_ns()}"
        for start in range(0, len(ids), batch):
            fields: list[str] = []
            for mid in ids[start : start + batch]:
                fields += (mid, "o")
            plain.execute_command("HSET", key, *fields)
        plain.execute_command("WAIT", 1, 5000)
        plain.delete(key)

    def spent(fn: Callable[[], Any]) -> dict[str, float]:
        def now() -> dict[int, float]:
            return {pid: sum(proc.cpu_times()[:2]) for pid, (_, proc) in servers.items()}

        before = now()
        fn()
        after = now()
        out = {"master": 0.0, "replica": 0.0}
        for pid, (role, _) in servers.items():
            out[role] += after[pid] - before[pid]
        return out

    got: dict[str, list[dict[str, float]]] = {"claims": [], "plain HSET": []}
    for _ in range(3):
        got["claims"].append(spent(claim))
        got["plain HSET"].append(spent(hset))
    per = 1000 / len(ids)
    for what, runs in got.items():
        m = statistics.median(r["master"] for r in runs) * per * 1000
        r = statistics.median(r["replica"] for r in runs) * per * 1000
        print(
            f"redis CPU per 1,000 ids, {what}: master {m:.2f} ms, the replicas {r:.2f} ms"
            f" together ({len(servers)} servers)"
        )


def _claims(address: str, run_id: str) -> int:
    """The claims of the run on this Redis: the fields of its claim hash."""
    import redis

    from rabbitry.spark.claims import claim_hash_key

    host, _, port = address.rpartition(":")
    return int(
        redis.Redis(host=host, port=int(port), socket_timeout=1).hlen(claim_hash_key(run_id))
    )


def recovery(stack: DemoStack, data: Any, work: Path, args: argparse.Namespace) -> None:
    """Kill the master once claiming has begun; time the switch in the master file, and the
    first new claims on the new master: its count of the run's claims (frozen while it was a
    replica cut off from its dead master) grows past what it had at the kill by more than one
    batch."""
    spark = stack.start_spark()
    stack.warm_up(executors=2)
    _timed(spark, data, work / "warm", PipelineOptions(partitions=args.partitions, overwrite=True))
    progress: dict[str, Any] = {}
    marks: dict[str, float] = {}
    batch = PipelineOptions().batch

    def killer() -> None:
        while not progress.get("processed"):
            time.sleep(0.01)
        old = stack.redis_master()
        assert stack.redis is not None and old is not None
        before = {a: _claims(a, run_id) for a in stack.redis.addresses if a != old}
        stack.kill_redis_master()
        marks["killed"] = time.monotonic()
        while stack.redis_master() in (old, None):
            time.sleep(0.005)
        marks["switched"] = time.monotonic()
        new = stack.redis_master()
        assert new is not None
        deadline = time.monotonic() + 60
        while _claims(new, run_id) <= before[new] + batch and time.monotonic() < deadline:
            time.sleep(0.005)
        marks["claiming"] = time.monotonic()

    run_id = f"rec-{time.time_ns()}"
    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    opts = PipelineOptions(partitions=args.partitions, run_id=run_id)
    summary = run_pipeline(
        spark, str(data.path), str(work / "rec"), opts, on_progress=progress.update
    )
    thread.join(60)
    spark.stop()
    stack.spark = None
    if "claiming" not in marks:
        print("recovery: no claims on the new master before the job ended; use more --messages")
        return
    switch = marks["switched"] - marks["killed"]
    claiming = marks["claiming"] - marks["killed"]
    print(
        f"Redis master kill: new master in the master file after {switch:.2f} s; the pipeline "
        f"claiming on the new master after {claiming:.2f} s; processed {summary.processed}, "
        f"retried attempts {summary.retried}"
    )


# Baselines that run no Python: Spark's own floor on this machine.
JVM_ONLY = {"spark": _spark_alone, "skeleton": _skeleton}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3, help="timed runs per system")
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--profile", action="store_true", help="profile the executors' Python")
    parser.add_argument("--plain", action="store_true", help="also plain SET NX, no rabbitry")
    parser.add_argument("--batch", type=int, default=PipelineOptions().batch)
    parser.add_argument(
        "--keys",
        action="store_true",
        help="also the embedded job with a key per claim (the claim layout before the hash)",
    )
    parser.add_argument(
        "--part", choices=("all", "throughput", "claims", "recovery"), default="all"
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the throughput figures as one JSON object, the last line (needs the"
        " throughput part)",
    )
    args = parser.parse_args()
    if args.json and args.part not in ("all", "throughput"):
        parser.error("--json reports the throughput part: use --part throughput (or all)")
    logging.basicConfig(level=logging.ERROR)
    load_start = _load()
    result: dict[str, Any] = {}
    try:
        _run(args, result)
    except Exception as exc:  # with --json, the object still comes out, with the error
        if not args.json:
            raise
        result = {"error": f"{type(exc).__name__}: {exc}"}
    if args.json:
        empty = {"ours": None, "baseline": None, "ratio": None, "unit": "msg/s"}
        result = {**empty, **result, "load_start": load_start, "load_end": _load()}
        print(json.dumps(result), flush=True)
        if "error" in result:
            raise SystemExit(1)


def _load() -> list[float]:
    """The 1, 5 and 15 min load averages, printed with every figure (shared machines)."""
    return [round(x, 2) for x in os.getloadavg()]


def _run(args: argparse.Namespace, result: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory(prefix="rabbitry-bench-spark-") as tmp:
        work = Path(tmp)
        data = generate_messages(work / "in.jsonl", args.messages)
        stack = DemoStack(work / "stack", master=MASTER, spark_log=work / "spark.log")
        try:
            stack.start(spark=False)
            if args.part in ("all", "claims"):
                claims_alone(stack, args)
            if args.part in ("all", "throughput"):
                result.update(throughput(stack, data, work, args))
            if args.part in ("all", "recovery"):
                recovery(stack, data, work, args)
        finally:
            stack.stop()


if __name__ == "__main__":
    main()
