"""Spark pipeline benchmark: the exactly-once job on embedded executor nodes, next to the same
job with no rabbitry at all, in one run.

Both run the same pipeline code (rabbitry.pipeline.run_pipeline) over the same generated input
on `local-cluster[2,1,1024]`, alternating rounds so drift in machine load hits both alike:

- embedded: executors embed a node each (rabbitry.spark.configure); every batch checks the
  node runs, reads the revoked set, and claims through FailoverRedis on the failover set's
  master with WAIT for 1 replica (the stack of rabbitry.demo.stack: 3 redis-servers, the
  RCS/RCC tree, 3 core nodes).
- plain (the baseline): a SparkSession with no rabbitry configuration (no daemon module, no
  sidecar), claiming with plain SET NX on the same master through redis-py, no WAIT, no node.

Each figure is the median over --rounds of the whole job's wall time (parse passes included,
identical in both), after one warm-up run of each, so JVM class loading counts for neither.
The ratio printed is plain_time / embedded_time: the embedded job's throughput relative to
the baseline (goal >= 0.9).

Then the recovery figure: a run on the embedded stack where the Redis master is SIGKILLed
once claiming has begun. Printed: the failover time (kill -> the new master in this host's
master file) and the time from the kill to the pipeline claiming again: the new master's key
count growing by more than one batch past what it held at the kill (polled every 5 ms).

    python benchmarks/spark.py [--messages 200000] [--rounds 3] [--partitions 32]
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


def throughput(stack: DemoStack, data: Any, work: Path, args: argparse.Namespace) -> None:
    master = stack.redis_master()
    assert master is not None
    runs: dict[str, list[float]] = {"embedded": [], "plain": []}
    n = 0

    def options(plain: bool) -> PipelineOptions:
        nonlocal n
        n += 1
        return PipelineOptions(
            partitions=args.partitions,
            run_id=f"bench-{time.time_ns()}-{n}",
            overwrite=True,
            plain_redis=master if plain else None,
        )

    # One session at a time (one SparkContext per process): embedded rounds, then plain
    # rounds, then embedded again, so both halves of the run see the machine's drift.
    for phase in ("embedded", "plain", "embedded", "plain"):
        plain = phase == "plain"
        spark = _plain_session() if plain else stack.start_spark()
        if not plain:
            stack.warm_up(executors=2)
        _timed(spark, data, work / "warm", options(plain))  # JVM and worker warm-up
        for _ in range((args.rounds + 1) // 2):
            seconds, summary = _timed(spark, data, work / "out", options(plain))
            runs[phase].append(seconds)
            print(f"  {phase:9s} {seconds:6.2f} s  processed {summary.processed}", flush=True)
        spark.stop()
        stack.spark = None
    embedded = statistics.median(runs["embedded"])
    plain = statistics.median(runs["plain"])
    rate = data.messages / embedded
    print(
        f"pipeline throughput, {data.messages} messages: embedded {rate:,.0f} msg/s "
        f"({embedded:.2f} s), plain SET NX {data.messages / plain:,.0f} msg/s ({plain:.2f} s); "
        f"ratio embedded/plain = {plain / embedded:.2f} (goal >= 0.9)"
    )


def _dbsize(address: str) -> int:
    import redis

    host, _, port = address.rpartition(":")
    return int(redis.Redis(host=host, port=int(port), socket_timeout=1).dbsize())


def recovery(stack: DemoStack, data: Any, work: Path, args: argparse.Namespace) -> None:
    """Kill the master once claiming has begun; time the switch in the master file, and the
    first new claims on the new master: its key count (frozen while it was a replica cut off
    from its dead master) grows past what it had at the kill by more than one batch."""
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
        before = {a: _dbsize(a) for a in stack.redis.addresses if a != old}
        stack.kill_redis_master()
        marks["killed"] = time.monotonic()
        while stack.redis_master() in (old, None):
            time.sleep(0.005)
        marks["switched"] = time.monotonic()
        new = stack.redis_master()
        assert new is not None
        deadline = time.monotonic() + 60
        while _dbsize(new) <= before[new] + batch and time.monotonic() < deadline:
            time.sleep(0.005)
        marks["claiming"] = time.monotonic()

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    opts = PipelineOptions(partitions=args.partitions, run_id=f"rec-{time.time_ns()}")
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3, help="timed runs per system")
    parser.add_argument("--partitions", type=int, default=32)
    parser.add_argument("--part", choices=("all", "throughput", "recovery"), default="all")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="rabbitry-bench-spark-") as tmp:
        work = Path(tmp)
        data = generate_messages(work / "in.jsonl", args.messages)
        stack = DemoStack(work / "stack", master=MASTER)
        try:
            stack.start(spark=False)
            if args.part in ("all", "throughput"):
                throughput(stack, data, work, args)
            if args.part in ("all", "recovery"):
                recovery(stack, data, work, args)
        finally:
            stack.stop()


if __name__ == "__main__":
    main()
