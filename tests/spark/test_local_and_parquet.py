"""The pipeline on `local[N,F]` through the CLI (one executor: the driver JVM's daemon embeds
the one node), and Parquet input with rejects, on the shared local-cluster stack."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.services import unactivated_venv

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(240)]


def test_cli_on_local_master_processes_once_and_reports_rejects(
    spark_stack: Any, tmp_path: Path
) -> None:
    """Run as an unactivated venv runs it, with a python3 on PATH that lacks rabbitry: the
    executors must run the driver's interpreter, not that one."""
    stack = spark_stack
    python, env = unactivated_venv(tmp_path)
    lines = [json.dumps({"id": f"m{i % 900}", "payload": f"p{i}"}) for i in range(1000)]
    lines[10] = "{not json"
    lines[20] = json.dumps({"payload": "no id"})
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    template = tmp_path / "node.yaml"
    template.write_text(json.dumps(stack.node_template()))
    first = stack.core_name(0)
    argv = [python, "-m", "rabbitry", "pipeline", "run"]
    argv += ["--input", str(tmp_path / "in.jsonl"), "--output", str(tmp_path / "out.parquet")]
    argv += ["--master", "local[2,3]", "--node-config", str(template)]
    argv += ["--join", f"{first}={stack.core_dist[first]}", "--master-file", str(stack.master_file)]
    argv += ["--system", "demo", "--wait-replicas", "1", "--data-root", str(tmp_path / "ex")]
    argv += ["--run-id", f"local-{time.time_ns()}", "--json"]
    result = subprocess.run(
        argv,
        check=False,
        capture_output=True,
        text=True,
        timeout=200,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "WARN" not in result.stderr, "Spark's output belongs in the log file"
    assert (tmp_path / "out.parquet.log").stat().st_size > 0
    summary = json.loads(result.stdout[result.stdout.index("{") :])
    assert summary["messages"] == 998 and summary["rejected"] == 2
    assert summary["processed"] == 900 and summary["duplicates_skipped"] == 98
    rejects = [
        json.loads(x) for x in (tmp_path / "out.parquet.rejects.jsonl").read_text().split("\n") if x
    ]
    assert [(r["line"], r["reason"].split(":")[0]) for r in rejects] == [
        (11, "malformed JSON"),
        (21, "missing id"),
    ]
    rows = stack.spark.read.parquet(str(tmp_path / "out.parquet")).collect()
    assert sorted(r.id for r in rows) == sorted(f"m{i}" for i in range(900))
    nodes = {r.node for r in rows}
    assert len(nodes) == 1 and nodes.pop().endswith("-driver@127.0.0.1")  # local: one node


def test_parquet_input_with_a_null_id_is_rejected_by_row_number(
    spark_stack: Any, tmp_path: Path
) -> None:
    from pyspark.sql.types import StringType, StructField, StructType

    from rabbitry.pipeline import PipelineOptions, run_pipeline

    spark = spark_stack.spark
    schema = StructType([StructField("id", StringType()), StructField("payload", StringType())])
    rows = [(f"q{i}", f"p{i}") for i in range(300)] + [(None, "orphan")] + [("q1", "again")]
    spark.createDataFrame(rows, schema).coalesce(1).write.parquet(str(tmp_path / "in.parquet"))
    summary = run_pipeline(
        spark,
        str(tmp_path / "in.parquet"),
        str(tmp_path / "out.parquet"),
        PipelineOptions(run_id=f"pq-{time.time_ns()}"),
    )
    assert (summary.messages, summary.rejected) == (301, 1)
    assert (summary.processed, summary.duplicates_skipped) == (300, 1)
    reject = json.loads((tmp_path / "out.parquet.rejects.jsonl").read_text())
    assert reject["line"] == 301 and reject["reason"] == "missing id"
