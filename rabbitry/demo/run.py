"""`rabbitry demo`: the exactly-once pipeline through a Redis failover and a partition.

1. start the stack (rabbitry.demo.stack): 3 redis-servers, the RCS/RCC tree, 3 core nodes
   (pause_minority), and Spark with a node in each executor;
2. generate the messages (duplicates included) and revoke some ids through gossip;
3. run the pipeline; once it is claiming, kill the Redis master, and once the new master is in
   the master file, cut one executor's node off for a few seconds (it pauses, and its tasks
   are retried on the other executor);
4. show it live, then check exactly-once on the output and write demo-report.json and
   demo-timeline.png.

Everything started is stopped on exit, Ctrl-C and SIGTERM included.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from rabbitry.demo.data import generate_messages
from rabbitry.demo.logs import DemoLog
from rabbitry.demo.names import short_name
from rabbitry.demo.report import check_exactly_once, summary_lines, write_report
from rabbitry.demo.stack import DemoStack
from rabbitry.demo.timeline import (
    PARTITION_END,
    PARTITION_START,
    REDIS_MASTER_CHANGED,
    REDIS_MASTER_KILLED,
    Timeline,
)
from rabbitry.demo.view import DemoState, DemoView, NodeStatus
from rabbitry.spark.startup import SparkStartError, explain

T = TypeVar("T")

REPORT_FILE = "demo-report.json"
PLOT_FILE = "demo-timeline.png"
LOG_FILE = "demo.log"  # everything logged, and the JVM's output
SAMPLE_INTERVAL = 0.25


@dataclass
class DemoOptions:
    quick: bool = False
    messages: int | None = None  # default: 200,000 (quick: 30,000)
    master: str = "local-cluster[2,1,1024]"
    out_dir: Path = field(default_factory=Path.cwd)
    work_dir: Path | None = None  # default: a temporary directory, removed at the end
    partition_seconds: float = 4.0
    faults: bool = True

    @property
    def message_count(self) -> int:
        if self.messages is not None:
            return self.messages
        return 30_000 if self.quick else 200_000

    @property
    def partitions(self) -> int:
        return max(8, min(64, self.message_count // 5000))


class _Run:
    """The state the sampler, the fault thread and the view share."""

    def __init__(self, stack: DemoStack, timeline: Timeline, view: DemoView) -> None:
        self.stack, self.timeline, self.view = stack, timeline, view
        self.lock = threading.Lock()
        self.state = DemoState(phase="starting")
        self.progress: dict[str, Any] = {}
        self.events: list[str] = []
        self.done = threading.Event()
        self.job_done = threading.Event()  # no fault starts after the job has finished
        self.master: str | None = None
        self.executors: list[str] = []

    def event(self, kind: str, detail: str = "") -> None:
        entry = self.timeline.event(kind, detail)
        shown = short_name(detail) if "@" in detail else detail  # the report keeps it whole
        with self.lock:
            self.events.append(f"{entry.t:6.1f}s {kind.replace('_', ' ')} {shown}".rstrip())
            self.events = self.events[-8:]

    def note(self, text: str) -> None:
        """A line for the view's event list only (a warning from the log, say)."""
        with self.lock:
            self.events.append(f"{self.timeline.now():6.1f}s {text}")
            self.events = self.events[-8:]

    def phase(self, text: str) -> None:
        with self.lock:
            self.state.phase = text
        self.refresh()

    def on_progress(self, progress: dict[str, Any]) -> None:
        with self.lock:
            self.progress = progress

    def refresh(self) -> None:
        views = self.stack.views() if self.stack.launcher is not None else []
        master = self.stack.redis_master()
        if master != self.master and self.master is not None and master is not None:
            self.event(REDIS_MASTER_CHANGED, master)
        self.master = master or self.master
        processed = int(self.progress.get("processed", 0))
        self.timeline.sample({v.name: v.state for v in views}, master, processed)
        rates = self.timeline.throughput(window=1.0)
        with self.lock:
            state = DemoState(
                nodes={v.name: NodeStatus(v.role, v.state) for v in views},
                redis_master=master,
                done_tasks=int(self.progress.get("done", 0)),
                total_tasks=self.progress.get("total") or None,
                processed=processed,
                throughput=rates[-1][1] if rates else 0.0,
                phase=self.state.phase,
                events=list(self.events),
            )
            self.state = state
        self.view.update(state)

    def sampler(self) -> None:
        while not self.done.wait(SAMPLE_INTERVAL):
            with contextlib.suppress(Exception):  # a sample lost to a dying stack is harmless
                self.refresh()


def _faults(run: _Run, options: DemoOptions) -> None:
    """Kill the Redis master once claiming has begun; partition an executor once the new
    master is in place."""
    stack = run.stack
    # A tenth of the messages first, so that the plot shows the rate before the faults.
    first = max(1, options.message_count // 10)
    while not run.job_done.is_set() and int(run.progress.get("processed", 0)) < first:
        run.job_done.wait(0.05)
    if run.job_done.is_set():
        return
    killed = stack.kill_redis_master()
    run.event(REDIS_MASTER_KILLED, killed)
    deadline = time.monotonic() + 30
    while stack.redis_master() in (killed, None) and time.monotonic() < deadline:
        if run.done.wait(0.05):
            return
    if run.job_done.is_set():
        return
    victim = run.executors[0] if run.executors else stack.core_name(stack.cores - 1)
    run.event(PARTITION_START, victim)
    try:
        stack.partition(victim, options.partition_seconds)
    except Exception as exc:  # the node may be restarting; the demo goes on
        run.event("partition_failed", f"{victim}: {exc}")
        return
    run.done.wait(options.partition_seconds)
    run.event(PARTITION_END, victim)


def run_demo(options: DemoOptions, view: DemoView | None = None) -> dict[str, Any]:
    """Run the demo; return the report (also written to options.out_dir)."""
    out_dir = Path(options.out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    own_work = options.work_dir is None
    work = Path(options.work_dir or tempfile.mkdtemp(prefix="rabbitry-demo-")).resolve()
    view = view or DemoView()
    log_file = out_dir / LOG_FILE
    stack = DemoStack(work / "stack", master=options.master, spark_log=log_file)
    run = _Run(stack, Timeline(), view)
    previous = signal.getsignal(signal.SIGTERM)
    main_thread = threading.current_thread() is threading.main_thread()
    if main_thread:
        signal.signal(signal.SIGTERM, _interrupt)
    try:
        with DemoLog(log_file, run.note) as demo_log:
            try:
                with view:

                    def body() -> dict[str, Any]:
                        data = _prepare(run, options, work)
                        output, summary = _execute(run, options, data, work)
                        return _check(run, data, output, summary, out_dir)

                    report = _interruptible(body)
            except SparkStartError as exc:
                raise DemoFailed(f"{exc}; the full log: {log_file}") from None
            except KeyboardInterrupt:
                raise
            except Exception as exc:
                logging.getLogger("rabbitry.demo").error("the demo failed", exc_info=True)
                tail = "\n".join(demo_log.tail(20))
                raise DemoFailed(
                    f"{tail}\nthe demo failed: {explain(exc)}; the full log: {log_file}"
                ) from None
            finally:  # while the log is the file: the shutdown's lines go there too
                run.done.set()
                stack.stop()
        for line in summary_lines(report):
            view.console.print(line)
        view.console.print(
            f"report: {out_dir / REPORT_FILE}   plot: {out_dir / PLOT_FILE}   log: {log_file}"
        )
        return report
    finally:
        run.done.set()
        stack.stop()
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
        if own_work:
            shutil.rmtree(work, ignore_errors=True)


class DemoFailed(RuntimeError):
    """The demo could not run to its check; the message says what, and where the log is."""


def _interruptible(body: Callable[[], T]) -> T:
    """Run `body` on a thread of its own while this thread waits in 0.1 s steps.

    Ctrl-C is a signal to the process: the kernel may hand it to any of its threads, and
    Python runs the handler only when the main thread next runs Python code. A main thread
    inside a JVM call (py4j reads its socket with no timeout) did not see it until the Spark
    job ended, 40 s later in one run, and the demo ran on through its faults. Waiting here, it
    sees it within 0.1 s, and the body's SparkContext, made off the main thread, leaves
    Python's own SIGINT handler in place (PySpark's would call the JVM before raising).
    """
    outcome: dict[str, Any] = {}

    def run_body() -> None:
        try:
            outcome["value"] = body()
        except BaseException as exc:  # handed to the waiting thread, which raises it
            outcome["error"] = exc

    worker = threading.Thread(target=run_body, name="demo-body", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.1)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _prepare(run: _Run, options: DemoOptions, work: Path) -> Any:
    """Start everything, generate the input, revoke, and warm the executors up."""
    stack = run.stack
    run.phase("starting Redis, the failover tree and 3 nodes")
    stack.start(spark=False)
    threading.Thread(target=run.sampler, name="demo-sampler", daemon=True).start()
    run.phase(f"generating {options.message_count:,} messages")
    data = generate_messages(work / "messages.jsonl", options.message_count)
    stack.revoke(list(data.revoked))
    run.event("revoked", f"{len(data.revoked)} ids")
    run.phase("starting Spark (executors embed a node each)")
    stack.start_spark()
    run.executors = stack.warm_up(executors=2 if "cluster" in options.master else 1)
    stack.wait_revoked(len(data.revoked))
    return data


def _execute(run: _Run, options: DemoOptions, data: Any, work: Path) -> tuple[Path, Any]:
    """The pipeline, with the faults injected from their own thread."""
    from rabbitry.pipeline import PipelineOptions, run_pipeline

    run.phase("running the pipeline")
    run.event("job_started")
    faults = threading.Thread(target=_faults, args=(run, options), name="demo-faults", daemon=True)
    if options.faults:
        faults.start()
    output = work / "output.parquet"
    summary = run_pipeline(
        run.stack.spark,
        str(data.path),
        str(output),
        PipelineOptions(
            partitions=options.partitions,
            run_id=f"demo-{time.time_ns()}",
            overwrite=True,
        ),
        on_progress=run.on_progress,
    )
    run.event("job_finished")
    run.job_done.set()
    if faults.is_alive():  # the partition outlasted the job: sample it to its end
        run.phase("healing the partition")
        faults.join(options.partition_seconds + 30)
    run.done.set()
    run.refresh()
    return output, summary


def _check(run: _Run, data: Any, output: Path, summary: Any, out_dir: Path) -> dict[str, Any]:
    """Exactly-once on the output; the report and the plot."""
    run.phase("checking exactly-once")
    spark = run.stack.spark
    ids = [row.id for row in spark.read.parquet(str(output)).select("id").collect()]
    check = check_exactly_once(data.expected_ids(), data.revoked, ids)
    timeline = run.timeline
    report = write_report(
        out_dir / REPORT_FILE,
        messages=data.messages,
        distinct_ids=data.distinct_ids,
        revoked=data.revoked,
        check=check,
        failover_seconds=timeline.failover_seconds(),
        pause_seconds=timeline.pause_seconds(),
        timeline=timeline,
        extra={
            "pipeline": summary.to_dict(),
            "executors": run.executors,
            "first_message": timeline.first_message(),
        },
    )
    try:
        timeline.plot(out_dir / PLOT_FILE)
    except Exception as exc:  # the report stands without the picture
        run.event("plot_failed", str(exc))
    run.phase("done")
    return report


def _interrupt(*_: Any) -> None:
    raise KeyboardInterrupt
