"""The exactly-once dedup job: ordinary DataFrame code; the cluster logic is rabbitry.spark.

    input (JSON lines or Parquet of {id, payload}), read by the JVM
      -> mapInArrow, one Python pass per partition, a claim batch at a time: parse and check
         the lines (rabbitry.pipeline.chunks: Arrow's JSON reader and Arrow compute, or the
         row-at-a-time rules for a slice they cannot vouch for), claim them
         (rabbitry.spark.claims: require_running, revoked, one script call for the batch,
         HMGET then HSET on the run's claim hash, with its WAIT: one round trip; up to
         claims_in_flight batches at once), Arrow batches of verdicts out, numbered by line
         within the partition, and last a row with the partition's line count and its
         verdicts per kind; cached
      -> those last rows, collected (_tally: the ONE Spark job that runs the pass)
      -> Parquet: id, payload, node, partition, line  (the verdicts "process", each line
         number moved by the lines of the partitions before it; JVM only, from the cache)
      -> the rejects to <output>.rejects.jsonl (from the cache)

The line numbers are the file's, exact under retries and speculation: a partition numbers its
own lines, and the driver adds the lines of the partitions before it once the pass has counted
them. (An earlier version counted them first, in a JVM job that read the whole input before the
pass: seconds of "0 messages" at the start of every run, issue 27.)

Python touches the data once, on Arrow batches, and column by column: no pickled rows, no
second pass, no Python object per message except the id's string for the claim. The counts
come from the last row of each partition's cached output, written by the attempt whose
verdicts are cached, so retried attempts (which Spark does not keep) never inflate them. Live progress: each batch's script also records the
partition's processed count in a Redis hash, which the driver polls (ProgressWatcher).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rabbitry.pipeline.chunks import (
    LINES,
    REJECT,
    lines_columns,
    parse_chunk,
    reject_columns,
    verdict_columns,
)
from rabbitry.pipeline.inputs import (
    DEFAULT_MAX_PAYLOAD,
    JSONL,
    Reject,
    check_paths,
    rejects_path,
)
from rabbitry.spark.claims import (
    DEFAULT_BATCH,
    DEFAULT_TTL,
    DUPLICATE,
    PROCESS,
    PROCESS_CODE,
    REVOKED,
    VERDICTS,
    Claimer,
    progress_key,
    read_progress,
)

DEFAULT_IN_FLIGHT = 4
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
    # How claims sit in Redis (rabbitry.spark.claims): "hash", one hash per run (two calls
    # per batch), or "keys", a key per id (the layout before; the benchmark compares them).
    claim_layout: str = "hash"
    # Wait this long for a paused node before failing the attempt (0 on multi-executor
    # masters, where another executor takes the task; local masters get a few seconds).
    pause_wait: float | None = None
    # Claim batches of a partition in flight at once (each on its own connection), while the
    # next slices are parsed (_ClaimQueue).
    claims_in_flight: int = DEFAULT_IN_FLIGHT
    # The benchmark baseline: plain SET NX on this fixed Redis ("host:port"), no rabbitry.
    plain_redis: str | None = None
    # The benchmark's limit: read, parse, check and write the same data, claiming nothing.
    no_claims: bool = False
    # A directory on the executors' hosts: each partition writes a cProfile of its Python
    # worker there (<run>-<partition>-<attempt>.prof), what it spent from its first batch to
    # its last, Spark's Arrow reading and writing included (benchmarks/spark.py --profile).
    profile_dir: str | None = None


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
    nonce = str(time.time_ns())
    group = f"rabbitry-pipeline-{run_id}-{nonce}"
    sc.setJobGroup(group, f"rabbitry pipeline {run_id}")
    progress = progress_key(run_id, nonce)
    watcher = (
        ProgressWatcher(sc, group, on_progress, _progress_reader(sc, opts, progress))
        if on_progress
        else None
    )
    started = time.monotonic()
    if watcher:
        watcher.start()
    saved = _split_size(spark, source, opts.partitions)
    try:
        frame = _read(spark, source, fmt, opts)
        retried, finished = sc.accumulator(0), sc.accumulator(0)
        if watcher:
            watcher.finished = finished
        job = _BatchJob(
            run_id,
            opts,
            pause_wait=pause_wait,
            fmt=fmt,
            progress=progress,
            retried=retried,
            finished=finished,
        )
        verdicts = frame.mapInArrow(job, schema=_verdict_schema()).persist()
        try:
            # The one pass that runs Python (parse, check, claim) fills the cache as it counts;
            # the output and the rejects then read the cache, in the JVM.
            counts, offsets = _tally(verdicts)
            (
                _numbered(verdicts.filter(verdicts.kind == PROCESS), offsets)
                .select(*OUTPUT_COLUMNS)
                .write.mode("overwrite" if opts.overwrite else "errorifexists")
                .parquet(str(target))
            )
            summary.processed = counts.get(PROCESS, 0)
            summary.duplicates_skipped = counts.get(DUPLICATE, 0)
            summary.revoked_skipped = counts.get(REVOKED, 0)
            summary.messages = (
                summary.processed + summary.duplicates_skipped + summary.revoked_skipped
            )
            summary.rejected = counts.get(REJECT, 0)
            reasons = _write_rejects(
                _numbered(verdicts.filter(verdicts.kind == REJECT), offsets),
                rejects_path(target),
                summary.rejected,
            )
            summary.rejected_by_reason = dict(reasons)
            summary.rejects_file = str(rejects_path(target)) if summary.rejected else None
            summary.retried = retried.value
        finally:
            verdicts.unpersist()
    finally:
        _restore_split_size(spark, saved)
        summary.seconds = time.monotonic() - started
        if watcher:
            watcher.stop()
    return summary


_SPLIT_CONF = "spark.sql.files.maxPartitionBytes"
_ADAPTIVE_CONF = "spark.sql.adaptive.enabled"


def _verdict_schema() -> Any:
    """What the Python pass returns per input line: its verdict, and what the outputs need."""
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    return StructType(
        [
            StructField("kind", StringType(), True),  # process|duplicate|revoked|reject|lines
            StructField("id", StringType(), True),
            StructField("payload", StringType(), True),  # only for PROCESS
            StructField("node", StringType(), True),
            StructField("partition", IntegerType(), True),
            StructField("line", LongType(), True),
            StructField("reason", StringType(), True),  # only for REJECT
            StructField("text", StringType(), True),
        ]
    )


def _split_size(spark: Any, source: Path, partitions: int | None) -> str | None:
    """--partitions N for a JSON lines file: split it into about N parts (what textFile's
    minPartitions did). Returns the setting it replaced."""
    if not partitions or source.is_dir() or source.suffix == ".parquet":
        return None
    saved = spark.conf.get(_SPLIT_CONF, None)
    size = max(source.stat().st_size, 1)
    spark.conf.set(_SPLIT_CONF, str(max(4096, -(-size // partitions))))
    return saved if saved is not None else ""


def _restore_split_size(spark: Any, saved: str | None) -> None:
    if saved is None:
        return
    if saved:
        spark.conf.set(_SPLIT_CONF, saved)
    else:
        spark.conf.unset(_SPLIT_CONF)


def _read(spark: Any, source: Path, fmt: str, opts: PipelineOptions) -> Any:
    """The input as a DataFrame read by the JVM: lines (`value`) or the Parquet's rows."""
    if fmt == JSONL:
        return spark.read.text(str(source))
    frame = spark.read.parquet(str(source))
    return frame.repartition(opts.partitions) if opts.partitions else frame


def _tally(verdicts: Any) -> tuple[dict[str, int], list[int]]:
    """The verdicts per kind, and per partition the number of lines before it, from the rows
    that end each partition (chunks.lines_columns): the ONE job that runs the Python pass,
    fills the cache and brings back a row per partition.

    One job, where a groupBy over the verdicts took three (with adaptive execution: the cache
    filled as a query stage of its own, then the partial counts and a shuffle, then the one
    reduce task). Adaptive execution is off for this action only, as it plans the cache as a
    stage of its own; a filter over the cached verdicts needs no other plan. The counts are
    as exact as before: the lines row is the last row of the same attempt's output as the
    verdicts it counts, and lands in the same cached block."""
    spark = verdicts.sparkSession
    saved = spark.conf.get(_ADAPTIVE_CONF, None)
    spark.conf.set(_ADAPTIVE_CONF, "false")
    try:
        rows = verdicts.filter(verdicts.kind == LINES).select("partition", "line", "text").collect()
    finally:
        if saved is None:
            spark.conf.unset(_ADAPTIVE_CONF)
        else:
            spark.conf.set(_ADAPTIVE_CONF, saved)
    counts: dict[str, int] = {}
    lines: dict[int, int] = {}
    for row in rows:
        lines[row["partition"]] = row["line"]
        for kind, count in json.loads(row["text"]).items():
            counts[kind] = counts.get(kind, 0) + count
    offsets, total = [], 0
    for index in range(max(lines, default=-1) + 1):
        offsets.append(total)
        total += lines.get(index, 0)
    return counts, offsets


def _numbered(frame: Any, offsets: list[int]) -> Any:
    """`frame` with each partition's own line numbers turned into the file's."""
    from pyspark.sql import functions as F

    if not offsets or not any(offsets):
        return frame
    before = F.element_at(F.array(*[F.lit(o) for o in offsets]), F.col("partition") + 1)
    return frame.withColumn("line", F.col("line") + before)


def _write_rejects(rejects: Any, path: Path, count: int) -> Counter[str]:
    """The rejects (verdict rows, numbered as in the file), in line order, to the reject file
    (streamed when there are many: a wrong input can be all rejects)."""
    reasons: Counter[str] = Counter()
    if not count:
        path.unlink(missing_ok=True)
        return reasons
    rows = rejects.select("line", "reason", "text")
    ordered = rows.orderBy("line")
    source = ordered.collect() if count <= 100_000 else ordered.toLocalIterator()
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as out:
        for row in source:
            reasons[_reason_key(row["reason"])] += 1
            out.write(Reject(row["line"], row["reason"], row["text"]).to_json() + "\n")
    tmp.replace(path)
    return reasons


def _progress_reader(sc: Any, opts: PipelineOptions, key: str) -> Callable[[], int] | None:
    """How the driver reads the live processed count: from the Redis the claims go to (the
    master file configure() gave the executors; none: finished tasks' counts only)."""
    if opts.no_claims:
        return None
    if opts.plain_redis:
        import redis

        host, _, port = opts.plain_redis.rpartition(":")
        plain = redis.Redis(host=host, port=int(port), socket_timeout=2)
        return lambda: read_progress(plain, key)
    from rabbitry.spark.settings import ENV_SETTINGS, EmbedSettings

    raw = sc.getConf().get(f"spark.executorEnv.{ENV_SETTINGS}", None)
    settings = EmbedSettings.from_json(raw) if raw else None
    if settings is None or not settings.master_file:
        return None
    from failover import FailoverRedis

    client = FailoverRedis(
        settings.master_file, system=settings.system, failover_timeout=1.0, retry_interval=0.2
    )
    return lambda: read_progress(client, key)


class _BatchJob:
    """The function mapInArrow runs per partition on the executors: Arrow batches of lines in,
    Arrow batches of verdicts out. Pickled by Spark, so plain data."""

    def __init__(
        self,
        run_id: str,
        opts: PipelineOptions,
        *,
        pause_wait: float,
        fmt: str,
        progress: str,
        retried: Any,
        finished: Any,
    ) -> None:
        self.run_id = run_id
        self.batch = opts.batch
        self.ttl = opts.claim_ttl
        self.layout = opts.claim_layout
        self.plain_redis = opts.plain_redis
        self.no_claims = opts.no_claims
        self.max_payload = opts.max_payload
        self.pause_wait = pause_wait
        self.fmt = fmt
        self.progress = progress
        self.retried = retried
        self.finished = finished  # processed, added as each partition ends (progress fallback)
        self.profile_dir = opts.profile_dir
        self.depth = opts.claims_in_flight

    def _claimer(self, index: int) -> tuple[Claimer | None, str]:
        owner = f"{self.run_id}:{index}"
        progress = (self.progress, str(index))
        if self.no_claims:
            return None, "-"
        if self.plain_redis:
            import redis

            host, _, port = self.plain_redis.rpartition(":")
            client = redis.Redis(host=host, port=int(port))
            claimer = Claimer(
                client, self.run_id, owner, batch=self.batch, ttl=self.ttl, progress=progress
            )
            return claimer, "-"
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
            progress=progress,
            layout=self.layout,
        )
        return claimer, rs.node_name()

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        if not self.profile_dir:
            yield from self._run(batches)
            return
        import cProfile

        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None, "the profiled pass runs inside a Spark task"
        name = f"{self.run_id}-{context.partitionId()}-{context.attemptNumber()}"
        profile = cProfile.Profile()
        claims = _ClaimQueue(self._claimer(context.partitionId()), self.depth, profile=True)
        profile.enable()
        try:
            yield from self._run(batches, claims)
        finally:
            profile.disable()
            Path(self.profile_dir).mkdir(parents=True, exist_ok=True)
            profile.dump_stats(str(Path(self.profile_dir) / f"{name}.prof"))
            for n, thread_profile in enumerate(claims.thread_profiles):  # the claim threads'
                thread_profile.dump_stats(str(Path(self.profile_dir) / f"{name}.{n}.claims"))

    def _run(self, batches: Iterator[Any], claims: _ClaimQueue | None = None) -> Iterator[Any]:
        from pyspark import TaskContext

        context = TaskContext.get()
        index = context.partitionId() if context else 0
        line = 0  # this partition's own numbering; the driver moves it (_numbered)
        if claims is None:
            claims = _ClaimQueue(self._claimer(index), self.depth)
        node = claims.node
        rejected = 0
        try:
            for batch in batches:
                # Parse and claim a claim batch at a time, not the whole Arrow batch (10,000
                # rows, often a whole partition) first: the live count then moves as the work
                # does, and a slice the fast parse cannot vouch for costs the slow way only
                # that slice.
                for start in range(0, batch.num_rows, self.batch):
                    part = batch.slice(start, self.batch)
                    chunk = parse_chunk(part, self.fmt, line + start + 1, self.max_payload)
                    if chunk.rejects:
                        rejected += len(chunk.rejects)
                        yield reject_columns(chunk.rejects, index)
                    if len(chunk):
                        claims.submit(chunk)
                    for done, codes in claims.ready():
                        yield verdict_columns(done, codes, node, index)
                line += batch.num_rows
            for done, codes in claims.drain():
                yield verdict_columns(done, codes, node, index)
            yield lines_columns(index, line, {**claims.tally(), REJECT: rejected})
        finally:
            claims.close()
        self.retried.add(context.attemptNumber() if context else 0)
        self.finished.add(claims.processed)


class _ClaimQueue:
    """The claims of one partition, in order, with up to `depth` batches' claims in flight
    while the next slices are parsed: their round trips (the script, the replica's copy, the
    WAIT) then overlap each other, this worker's parse and Spark's write, instead of following
    one another. One in flight was not enough: a batch's round trip (5-12 ms) is several times
    the parse of the next slice (1-2 ms), so the worker still waited on Redis most of the time.

    Nothing changes for safety: each batch is sorted out here, in order (Claimer.sort_out:
    revoked ids, this partition's repeats), so no id is in two batches in flight; each is sent
    by a claim thread (check() first, the WAIT before its answer), and a verdict is yielded
    only once its own claim has answered, in order. A claim that fails raises from drain() or
    ready(), and the attempt fails as before; later batches' claims may have run by then (up
    to depth - 1 of them), and a retry re-finds those claims as its own."""

    def __init__(
        self, claimer_node: tuple[Claimer | None, str], depth: int = 1, profile: bool = False
    ) -> None:
        from collections import deque
        from concurrent.futures import ThreadPoolExecutor

        self.claimer, self.node = claimer_node
        self.depth = max(1, depth)
        self.thread_profiles: list[Any] = []  # a cProfile per claim thread (profile=True)
        self._local = threading.local()
        self.pool = (
            ThreadPoolExecutor(
                self.depth, "claims", initializer=self._start_profile if profile else None
            )
            if self.claimer
            else None
        )
        self.pending: deque[tuple[Any, Any]] = deque()
        self.processed = 0  # messages claimed as ours (all of them with no_claims)
        self.codes = [0] * len(VERDICTS)  # the verdicts yielded, per code

    def _start_profile(self) -> None:
        import cProfile

        profile = cProfile.Profile()
        self.thread_profiles.append(profile)
        self._local.profile = profile
        profile.enable()

    def _stop_profile(self, everyone: Any) -> None:
        everyone.wait()  # so that each of the `depth` calls runs on its own thread
        self._local.profile.disable()  # a profile stops on the thread that started it

    def submit(self, chunk: Any) -> None:
        if self.pool is None or self.claimer is None:  # no_claims: every message is ours
            self.pending.append((chunk, None))
            return
        batch = self.claimer.sort_out(chunk.id_strings())
        self.pending.append((chunk, self.pool.submit(self.claimer.send, batch)))

    def ready(self) -> Iterator[tuple[Any, bytes]]:
        """Answered claims, in order: those already answered, and then as many as it takes to
        keep at most `depth` in flight."""
        limit = 0 if self.pool is None else self.depth
        while self.pending and (len(self.pending) > limit or self.pending[0][1].done()):
            yield self._take()

    def drain(self) -> Iterator[tuple[Any, bytes]]:
        while self.pending:
            yield self._take()

    def _take(self) -> tuple[Any, bytes]:
        chunk, future = self.pending.popleft()
        codes = bytes(len(chunk)) if future is None else future.result()
        for code in range(len(VERDICTS)):
            self.codes[code] += codes.count(code)
        self.processed = self.codes[PROCESS_CODE]
        return chunk, codes

    def tally(self) -> dict[str, int]:
        """The verdicts yielded so far, per kind."""
        return dict(zip(VERDICTS, self.codes, strict=True))

    def close(self) -> None:
        if self.pool is None:
            return
        if self.thread_profiles:
            everyone = threading.Barrier(self.depth)
            stops = [self.pool.submit(self._stop_profile, everyone) for _ in range(self.depth)]
            for stop in stops:
                stop.result()
        self.pool.shutdown(wait=True, cancel_futures=True)


class ProgressWatcher:
    """Polls Spark's status tracker for the job group's tasks, and the live processed count
    the executors keep in Redis (`processed`), and reports them: the driver's progress without
    a listener (PySpark has no Python task listener, and accumulators arrive at a task's end)."""

    def __init__(
        self,
        sc: Any,
        group: str,
        report: Callable[[dict[str, Any]], None],
        processed: Callable[[], int] | None = None,
    ) -> None:
        self.sc, self.group, self.report = sc, group, report
        self.processed = processed
        self.finished: Any = None  # an accumulator: processed by finished tasks (fallback)
        self._best = 0  # a failover may lose the last batches' counts: never show a drop
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pipeline-progress", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        with contextlib.suppress(Exception):
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
                if job.status == "SUCCEEDED" and not stage.numCompletedTasks:
                    continue  # skipped: its output was there already (the cached verdicts)
                done += stage.numCompletedTasks
                total += stage.numTasks
                failed += stage.numFailedTasks
                active += stage.numActiveTasks
        state: dict[str, Any] = {"done": done, "total": total, "failed": failed, "active": active}
        if self.processed is not None:
            # no master for a moment (a failover): keep the last count
            with contextlib.suppress(Exception):
                self._best = max(self._best, self.processed())
        if self.finished is not None:
            self._best = max(self._best, self.finished.value)
        state["processed"] = self._best
        self.report(state)

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            try:
                self._poll()
            except Exception:  # the JVM may be going away; progress is best effort
                return
