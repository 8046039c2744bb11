"""`rabbitry pipeline run`: the exactly-once dedup job on Spark, with embedded executor nodes."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from rabbitry.cli import HelpFormatter, add_log_level, configure_logging

DEFAULT_MASTER = "local[2,4]"

RUN_EPILOG = """\
examples:
  rabbitry pipeline run --input msgs.jsonl --output out.parquet \\
      --node-config spark-node.yaml --join a@127.0.0.1=127.0.0.1:7001 \\
      --master-file /var/run/rabbitry/redis-master --wait-replicas 1
  rabbitry pipeline run --input msgs.parquet --output out.parquet --master local-cluster[2,1,1024] ...

Input: JSON lines or Parquet of {"id": ..., "payload": ...}. Each message is claimed with
SET NX (+ WAIT) on the current Redis master, skipped if its id is revoked or already claimed,
and written to the output as Parquet (id, payload, node, partition, line). Bad lines go to
<output>.rejects.jsonl with their line numbers. Spark's own output (its warnings, the JVM's
log) goes to <output>.log (--log-file), and a failure is one line that names the cause. On
local masters the executors run this command's Python (rabbitry is there), whatever python3
is first on PATH. See docs/pipeline.md.

exit codes: 0 done, 1 the job failed, 2 bad usage, paths or config"""


def register(commands: Any) -> None:
    group = commands.add_parser(
        "pipeline",
        help="the exactly-once dedup job on Spark (rabbitry.pipeline)",
        description="Run the exactly-once dedup pipeline on Spark. See docs/pipeline.md.",
        formatter_class=HelpFormatter,
    )
    group.set_defaults(help_parser=group)
    sub = group.add_subparsers(title="pipeline commands", metavar="COMMAND")
    run = sub.add_parser(
        "run",
        help="run the job over an input file and write the results as Parquet",
        description="Process every message of INPUT exactly once and write OUTPUT.",
        epilog=RUN_EPILOG,
        formatter_class=HelpFormatter,
    )
    run.add_argument("--input", required=True, help="JSON lines file, or Parquet file/directory")
    run.add_argument("--output", required=True, help="where the Parquet results go")
    run.add_argument(
        "--master",
        help=f"the Spark master URL (default: spark-submit's --master when submitted with "
        f"rabbitry/pipeline/submit.py, else {DEFAULT_MASTER})",
    )
    run.add_argument(
        "--node-config",
        help="node config template for the executors' nodes (YAML/TOML; see docs/spark.md)",
    )
    run.add_argument(
        "--join",
        action="append",
        default=[],
        metavar="NODE=HOST:PORT",
        help="a seed node the executors join through (repeat for more)",
    )
    run.add_argument("--master-file", help="the Redis master file kept by this host's RCC")
    run.add_argument("--system", default="system", help="the failover set's name in that file")
    run.add_argument("--wait-replicas", type=int, default=1, help="replicas each claim must reach")
    run.add_argument("--data-root", help="where executor nodes keep their data dirs")
    run.add_argument("--run-id", help="claim namespace (default: derived from the input file)")
    run.add_argument(
        "--max-payload-bytes", type=int, default=256 * 1024, help="larger payloads are rejected"
    )
    run.add_argument("--batch", type=int, default=1000, help="claims per Redis round trip")
    run.add_argument("--partitions", type=int, help="input partitions (default: Spark's)")
    run.add_argument("--overwrite", action="store_true", help="replace an existing output")
    run.add_argument(
        "--plain-redis",
        metavar="HOST:PORT",
        help="no rabbitry: plain SET NX on this fixed Redis (the benchmark baseline)",
    )
    run.add_argument("--log-file", help="where Spark's output and this run's log go (<output>.log)")
    run.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_log_level(run)
    run.set_defaults(handler=_run, help_parser=run)


def _parse_join(items: list[str]) -> dict[str, str]:
    seeds = {}
    for item in items:
        name, sep, address = item.partition("=")
        if not sep or "@" not in name or ":" not in address:
            raise ValueError(
                f"--join {item!r}: expected NODE=HOST:PORT, such as a@h=127.0.0.1:7001"
            )
        seeds[name] = address
    return seeds


def _run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    from rabbitry.pipeline import PipelineInputError, PipelineOptions, check_paths

    try:
        check_paths(args.input, args.output, args.overwrite)
        seeds = _parse_join(args.join)
        for flag, value, least in (
            ("--batch", args.batch, 1),
            ("--max-payload-bytes", args.max_payload_bytes, 1),
            ("--partitions", args.partitions, 1),
            ("--wait-replicas", args.wait_replicas, 0),
        ):
            if value is not None and value < least:
                raise ValueError(f"{flag} must be at least {least}, got {value}")
        if not args.plain_redis and not args.node_config:
            raise ValueError(
                "--node-config is required (the executors' node template), unless --plain-redis"
            )
    except (PipelineInputError, ValueError) as exc:
        print(f"rabbitry pipeline run: {exc}", file=sys.stderr)
        return 2
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        print(
            "rabbitry pipeline run: pyspark is not installed: pip install 'rabbitry[spark]'",
            file=sys.stderr,
        )
        return 2
    builder = _builder(SparkSession, args.master)
    if not args.plain_redis:
        from rabbitry.spark import SparkEmbedError, configure

        try:
            configure(
                builder,
                args.node_config,
                join=seeds,
                master_file=args.master_file,
                system=args.system,
                wait_replicas=args.wait_replicas,
                data_root=args.data_root,
            )
        except (SparkEmbedError, OSError, ValueError) as exc:
            print(f"rabbitry pipeline run: {exc}", file=sys.stderr)
            return 2
    options = PipelineOptions(
        run_id=args.run_id,
        max_payload=args.max_payload_bytes,
        batch=args.batch,
        partitions=args.partitions,
        overwrite=args.overwrite,
        plain_redis=args.plain_redis,
    )
    from rabbitry.spark.startup import SparkStartError, check_executors, explain, start_session

    log_file = Path(args.log_file or f"{Path(args.output).resolve()}.log")
    _log_to(log_file)
    try:
        spark = start_session(builder, log_file)
    except SparkStartError as exc:
        print(f"rabbitry pipeline run: {exc}; the full log: {log_file}", file=sys.stderr)
        return 1
    try:
        if not args.plain_redis:
            check_executors(spark)
        summary = _run_with_progress(spark, args, options)
    except KeyboardInterrupt:
        print("rabbitry pipeline run: interrupted", file=sys.stderr)
        return 130
    except SparkStartError as exc:
        print(f"rabbitry pipeline run: {exc}; the full log: {log_file}", file=sys.stderr)
        return 1
    except Exception as exc:
        logging.getLogger("rabbitry.pipeline").error("the job failed", exc_info=True)
        print(
            f"rabbitry pipeline run: the job failed: {explain(exc)}; the full log: {log_file}",
            file=sys.stderr,
        )
        return 1
    finally:
        spark.stop()
    if args.json:
        print(json.dumps(summary.to_dict(), indent=2))
    else:
        print("\n".join(summary.lines()))
    return 0


def _builder(session: Any, master: str | None) -> Any:
    """The session builder; its master is --master, else spark-submit's (not set here, so
    that spark-submit's holds), else DEFAULT_MASTER."""
    builder = session.builder.appName("rabbitry-pipeline").config(
        "spark.ui.showConsoleProgress",
        "false",  # ours is on the console
    )
    master = master or (None if _submitted() else DEFAULT_MASTER)
    return builder.master(master) if master else builder


def _submitted() -> bool:
    """Whether spark-submit started this process: it hands its JVM over through
    PYSPARK_GATEWAY_PORT, with the master and conf it was given."""
    import os

    return "PYSPARK_GATEWAY_PORT" in os.environ


def _log_to(log_file: Path) -> None:
    """Log records go to the run's log file too (Spark's tracebacks among them), so that the
    console shows progress and one line per failure."""
    handler = logging.FileHandler(log_file, mode="w")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.INFO)
    root = logging.getLogger()
    for old in list(root.handlers):  # the console keeps its level, not Spark's tracebacks
        old.setLevel(max(old.level, root.level))
        old.addFilter(lambda record: record.exc_info is None)
    root.addHandler(handler)
    root.setLevel(min(root.level or logging.INFO, logging.INFO))


def _run_with_progress(spark: Any, args: argparse.Namespace, options: Any) -> Any:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from rabbitry.pipeline import run_pipeline

    columns = (
        TextColumn("[bold]pipeline"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} tasks"),
        TextColumn("{task.fields[failed]} failed"),
        TextColumn("{task.fields[processed]:,} processed"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, transient=False) as progress:
        task = progress.add_task("tasks", total=None, failed=0, processed=0)

        def report(state: dict[str, Any]) -> None:
            progress.update(
                task,
                completed=state["done"],
                total=state["total"] or None,
                failed=state["failed"],
                processed=state.get("processed", 0),
            )

        return run_pipeline(spark, args.input, args.output, options, on_progress=report)
