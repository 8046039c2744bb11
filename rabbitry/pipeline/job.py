"""The exactly-once dedup job: ordinary RDD/DataFrame code; the cluster logic is rabbitry.spark.

    input (JSON lines or Parquet of {id, payload})
      -> zipWithIndex: line numbers               (so a reject names its line)
      -> parse and check each line                (rejects to <output>.rejects.jsonl)
      -> per partition: rabbitry.spark.claims     (require_running, revoked, SET NX + WAIT)
      -> Parquet: id, payload, node, partition, line

The counts come from accumulators updated inside the write's own stage: Spark merges a task's
accumulator updates once, from the attempt that succeeded, so retries do not inflate them.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rabbitry.pipeline.inputs import (
    DEFAULT_MAX_PAYLOAD,
    JSONL,
    Message,
    Reject,
    check_message,
    check_paths,
    parse_line,
    rejects_path,
)
from rabbitry.spark.claims import DEFAULT_BATCH, DEFAULT_TTL, DUPLICATE, PROCESS, Claimer

OUTPUT_COLUMNS = ("id", "payload", "node", "partition", "line")


@dataclass
class PipelineOptions:
    """How to run: see `rabbitry pipeline run --help` for each."""

    run_id: str | None = None
    max_payload: int = DEFAULT_MAX_PAYLOAD
    batch: int = DEFAULT_BATCH
    partitions: int | None = None
    overwrite: bool = False
    claim_ttl: int = DEFAULT_TTL
    # Wait this long for a paused node before failing the attempt (0 on multi-executor
    # masters, where another executor takes the task; local masters get a few seconds).
    pause_wait: float | None = None
    # The benchmark baseline: plain SET NX on this fixed Redis ("host:port"), no rabbitry.
    plain_redis: str | None = None


@dataclass
class PipelineSummary:
    run_id: str
    input: str
    output: str
    messages: int = 0
    rejected: int = 0
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    rejects_file: str | None = None
    processed: int = 0
    duplicates_skipped: int = 0
    revoked_skipped: int = 0
    retried: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        rate = self.processed / self.seconds if self.seconds else 0.0
        out = [
            f"run {self.run_id}: {self.messages} messages in {self.seconds:.1f} s ({rate:.0f}/s)",
            f"  processed           {self.processed}",
            f"  duplicates skipped  {self.duplicates_skipped}",
            f"  revoked skipped     {self.revoked_skipped}",
            f"  retried (attempts)  {self.retried}",
            f"  rejected            {self.rejected}"
            + (f"  -> {self.rejects_file}" if self.rejected else ""),
        ]
        for reason, count in sorted(self.rejected_by_reason.items(), key=lambda kv: -kv[1])[:5]:
            out.append(f"      {count:>8}  {reason}")
        out.append(f"  output              {self.output}")
        return out


def default_run_id(source: Path, partitions: int | None = None) -> str:
    """Stable for the same input file and partitioning: a rerun after a crash re-finds its own
    claims (each partition owns what it claimed), so the rerun's output is the same, not
    empty. Claims belong to partitions, so another partitioning is another run."""
    info = source.stat()
    text = f"{source}:{info.st_size}:{info.st_mtime_ns}:{partitions}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _reason_key(reason: str) -> str:
    """Group reasons for the summary ("malformed JSON: Expecting value: line 1..." ->
    "malformed JSON")."""
    return reason.split(":", 1)[0]


def run_pipeline(
    spark: Any,
    input_path: str,
    output_path: str,
    options: PipelineOptions | None = None,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
) -> PipelineSummary:
    """Run the job on `spark` (a SparkSession configured with rabbitry.spark.configure, unless
    options.plain_redis is set) and return the summary. Paths are checked first."""
    opts = options or PipelineOptions()
    source, target, fmt = check_paths(input_path, output_path, opts.overwrite)
    run_id = opts.run_id or default_run_id(source, opts.partitions)
    summary = PipelineSummary(run_id=run_id, input=str(source), output=str(target))
    sc = spark.sparkContext
    master = sc.master
    pause_wait = opts.pause_wait
    if pause_wait is None:
        pause_wait = (
            30.0 if master.startswith("local") and not master.startswith("local-cluster") else 0.0
        )
    group = f"rabbitry-pipeline-{run_id}-{time.time_ns()}"
    sc.setJobGroup(group, f"rabbitry pipeline {run_id}")
    watcher = ProgressWatcher(sc, group, on_progress) if on_progress else None
    started = time.monotonic()
    if watcher:
        watcher.start()
    try:
        parsed = _parse(spark, source, fmt, opts)
        parsed.persist()
        summary.messages, rejects = _collect_rejects(parsed, rejects_path(target))
        summary.rejected = sum(rejects.values())
        summary.rejected_by_reason = dict(rejects)
        summary.rejects_file = str(rejects_path(target)) if summary.rejected else None
        counters = {k: sc.accumulator(0) for k in ("processed", "duplicate", "revoked", "retried")}
        if watcher:
            watcher.counters = counters
        job = _PartitionJob(run_id, opts, pause_wait, counters)
        messages = parsed.filter(lambda m: isinstance(m, Message))
        rows = messages.mapPartitionsWithIndex(job)
        frame = spark.createDataFrame(rows, schema=_schema())
        frame.write.mode("overwrite" if opts.overwrite else "errorifexists").parquet(str(target))
        parsed.unpersist()
        summary.processed = counters["processed"].value
        summary.duplicates_skipped = counters["duplicate"].value
        summary.revoked_skipped = counters["revoked"].value
        summary.retried = counters["retried"].value
    finally:
        summary.seconds = time.monotonic() - started
        if watcher:
            watcher.stop()
    return summary


def _schema() -> Any:
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    return StructType(
        [
            StructField("id", StringType(), False),
            StructField("payload", StringType(), False),
            StructField("node", StringType(), False),
            StructField("partition", IntegerType(), False),
            StructField("line", LongType(), False),
        ]
    )


def _parse(spark: Any, source: Path, fmt: str, opts: PipelineOptions) -> Any:
    max_payload = opts.max_payload
    if fmt == JSONL:
        lines = spark.sparkContext.textFile(str(source), minPartitions=opts.partitions or 2)
        return (
            lines.zipWithIndex()
            .map(lambda pair: parse_line(pair[1] + 1, pair[0], max_payload))
            .filter(lambda item: item is not None)
        )
    frame = spark.read.parquet(str(source))
    if opts.partitions:
        frame = frame.repartition(opts.partitions)

    def check_row(pair: tuple[Any, int]) -> Message | Reject:
        data = pair[0].asDict(recursive=True)
        return check_message(pair[1] + 1, data, json.dumps(data, default=str), max_payload)

    return frame.rdd.zipWithIndex().map(check_row)


def _collect_rejects(parsed: Any, path: Path) -> tuple[int, Counter[str]]:
    """One pass: count the messages, stream the rejects to the reject file (never to memory:
    a wrong input can be all rejects)."""

    def per_partition(items: Iterator[Any]) -> Iterator[Any]:
        good = 0
        for item in items:
            if isinstance(item, Message):
                good += 1
            else:
                yield item
        yield good

    messages, reasons = 0, Counter()
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as out:
        for item in parsed.mapPartitions(per_partition).toLocalIterator():
            if isinstance(item, int):
                messages += item
            else:
                reasons[_reason_key(item.reason)] += 1
                out.write(item.to_json() + "\n")
    if reasons:
        tmp.replace(path)
    else:
        tmp.unlink()
        path.unlink(missing_ok=True)
    return messages, reasons


class _PartitionJob:
    """The function run per partition on the executors (pickled by Spark, so plain data)."""

    def __init__(
        self, run_id: str, opts: PipelineOptions, pause_wait: float, counters: dict
    ) -> None:
        self.run_id = run_id
        self.batch = opts.batch
        self.ttl = opts.claim_ttl
        self.plain_redis = opts.plain_redis
        self.pause_wait = pause_wait
        self.counters = counters

    def _claimer(self, index: int) -> tuple[Claimer, str]:
        owner = f"{self.run_id}:{index}"
        if self.plain_redis:
            import redis

            host, _, port = self.plain_redis.rpartition(":")
            client = redis.Redis(host=host, port=int(port))
            return Claimer(client, self.run_id, owner, batch=self.batch, ttl=self.ttl), "-"
        import rabbitry.spark as rs

        wait = self.pause_wait
        claimer = Claimer(
            rs.redis(),
            self.run_id,
            owner,
            check=lambda: rs.require_running(wait),
            revoked=rs.revoked_ids,
            batch=self.batch,
            ttl=self.ttl,
        )
        return claimer, rs.node_name()

    def __call__(self, index: int, messages: Iterator[Message]) -> Iterator[tuple]:
        from pyspark import TaskContext

        context = TaskContext.get()
        claimer, node = self._claimer(index)
        counts = Counter()
        for claim in claimer.claim(messages, key=lambda m: m.id):
            counts[claim.verdict] += 1
            if claim.verdict == PROCESS:
                m = claim.item
                yield (m.id, m.payload, node, index, m.line)
        self.counters["processed"].add(counts[PROCESS])
        self.counters["duplicate"].add(counts[DUPLICATE])
        self.counters["revoked"].add(counts["revoked"])
        self.counters["retried"].add(context.attemptNumber() if context else 0)


class ProgressWatcher:
    """Polls Spark's status tracker for the job group's tasks and reports them: the driver's
    progress without a listener (PySpark has no Python task listener)."""

    def __init__(self, sc: Any, group: str, report: Callable[[dict[str, Any]], None]) -> None:
        self.sc, self.group, self.report = sc, group, report
        self.counters: dict[str, Any] = {}  # the job's accumulators, once they exist
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pipeline-progress", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._poll()

    def _poll(self) -> None:
        tracker = self.sc.statusTracker()
        done = total = failed = active = 0
        for job_id in tracker.getJobIdsForGroup(self.group):
            job = tracker.getJobInfo(job_id)
            if job is None:
                continue
            for stage_id in job.stageIds:
                stage = tracker.getStageInfo(stage_id)
                if stage is None:
                    continue
                done += stage.numCompletedTasks
                total += stage.numTasks
                failed += stage.numFailedTasks
                active += stage.numActiveTasks
        state = {"done": done, "total": total, "failed": failed, "active": active}
        # Driver-side values: the sum over finished tasks (a task's counts arrive at its end).
        state.update({name: acc.value for name, acc in self.counters.items()})
        self.report(state)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self._poll()
            except Exception:  # the JVM may be going away; progress is best effort
                return
