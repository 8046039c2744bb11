"""The pipeline on embedded executors through a Redis master kill and a partition of one
executor's node: every id is processed exactly once (revoked ones never)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.waiting import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(300)]


def _inject(stack: Any, progress: dict[str, Any], log: list[str], stop: threading.Event) -> None:
    while not stop.is_set() and not progress.get("processed"):
        stop.wait(0.05)
    if stop.is_set():
        return
    killed = stack.kill_redis_master()
    log.append(f"killed {killed}")
    deadline = time.monotonic() + 30
    while stack.redis_master() in (killed, None) and time.monotonic() < deadline:
        stop.wait(0.05)
    log.append(f"new master {stack.redis_master()}")
    stack.partition(stack.executors[0], 3.0)
    log.append(f"partitioned {stack.executors[0]}")


def test_exactly_once_through_a_failover_and_a_partition(spark_stack: Any, tmp_path: Path) -> None:
    from rabbitry.demo.data import generate_messages
    from rabbitry.demo.report import check_exactly_once
    from rabbitry.pipeline import PipelineOptions, run_pipeline

    stack = spark_stack
    data = generate_messages(tmp_path / "in.jsonl", 30_000, duplicate_ratio=0.15, seed=11)
    stack.revoke(list(data.revoked))
    stack.wait_revoked(len(data.revoked))
    progress: dict[str, Any] = {}
    log: list[str] = []
    stop = threading.Event()
    faults = threading.Thread(target=_inject, args=(stack, progress, log, stop), daemon=True)
    faults.start()
    try:
        summary = run_pipeline(
            stack.spark,
            str(data.path),
            str(tmp_path / "out.parquet"),
            PipelineOptions(partitions=12, batch=200, run_id=f"t{time.time_ns()}"),
            on_progress=progress.update,
        )
    finally:
        stop.set()
        faults.join(40)
    assert log[:1] and log[0].startswith("killed"), f"the faults did not run: {log}"
    ids = [r.id for r in stack.spark.read.parquet(str(tmp_path / "out.parquet")).collect()]
    check = check_exactly_once(data.expected_ids(), data.revoked, ids)
    assert check.ok, (check, log)
    assert summary.processed == len(ids) == check.expected
    assert summary.revoked_skipped >= len(data.revoked)
    assert summary.duplicates_skipped + summary.revoked_skipped + summary.processed == data.messages
    wait_until(
        lambda: all(v.state == "running" for v in stack.views()), "every node running again", 40
    )
