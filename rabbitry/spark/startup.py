"""Starting a Spark session whose executors embed a node: the right Python, a readable failure.

Two facts about PySpark decide what is here:

- The executors' Python is `SparkContext.pythonExec`, which PySpark takes from the driver's
  PYSPARK_PYTHON environment variable when the context starts ("python3" when unset: the first
  one on PATH). The `spark.pyspark.python` setting is read only by `spark-submit` for a Python
  application; a session started from a Python program never looks at it. A venv that is not
  activated (pipx, cron, systemd) thus gives the executors a python3 without rabbitry, and
  every executor fails to start `rabbitry.spark.daemon`.
- The master may come from the builder, from PYSPARK_SUBMIT_ARGS or from spark-defaults.conf,
  so the builder alone cannot say whether it is local; the started context can (`sc.master`).

So `configure()` points PYSPARK_PYTHON at the driver's interpreter when the master it can see
is local, and `start_session()` makes sure of it once the context exists (whatever set the
master), probes the executors, and turns any failure into one line (`SparkStartError`) that
quotes the executor's own error, leaving Spark's traceback to the log.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any

log = logging.getLogger("rabbitry.spark")

PYTHON_CONF = "spark.pyspark.python"
PYTHON_ENV = "PYSPARK_PYTHON"
_WORKER_ERROR = re.compile(r"Error from python worker:\s*\n\s*(?P<line>[^\n]+)")
_PY_ERROR = re.compile(
    r"^(?P<line>(?:[\w.]+\.)?(?:NodePaused|NodeUnavailable|RetryableTaskError|"
    r"ModuleNotFoundError|ImportError|SparkEmbedError|NoRedisMaster)\b[^\n]*)",
    re.MULTILINE,
)


class SparkStartError(RuntimeError):
    """Spark or its executors could not start; the message is one line: what, and what to do."""


def is_local_master(master: str | None) -> bool:
    """local, local[N], local[N,F], local[*] and local-cluster[...]: executors on this host,
    started from this driver, so they can and should run the driver's interpreter."""
    if not master:
        return False
    return master == "local" or master.startswith(("local[", "local-cluster["))


def _defaults_master(environ: dict[str, str]) -> str | None:
    """spark.master from spark-defaults.conf (SPARK_CONF_DIR, else SPARK_HOME/conf)."""
    conf_dir = environ.get("SPARK_CONF_DIR") or (
        str(Path(environ["SPARK_HOME"]) / "conf") if environ.get("SPARK_HOME") else None
    )
    if not conf_dir:
        return None
    try:
        text = (Path(conf_dir) / "spark-defaults.conf").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        parts = line.strip().split(None, 1)
        if len(parts) == 2 and parts[0] == "spark.master":
            return parts[1].strip()
    return None


def resolve_master(conf_master: str | None, environ: dict[str, str] | None = None) -> str | None:
    """The master a session will get, as far as can be known before the JVM starts: the
    builder's or conf's, else --master (or --conf spark.master=) in PYSPARK_SUBMIT_ARGS, else
    spark-defaults.conf. None when none of them says."""
    if conf_master:
        return conf_master
    env = os.environ if environ is None else environ
    try:
        args = shlex.split(env.get("PYSPARK_SUBMIT_ARGS", ""))
    except ValueError:
        args = []
    for i, arg in enumerate(args):
        if arg == "--master" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--master="):
            return arg.split("=", 1)[1]
        if arg == "--conf" and i + 1 < len(args) and args[i + 1].startswith("spark.master="):
            return args[i + 1].split("=", 1)[1]
    return _defaults_master(dict(env))


def use_driver_python(reason: str) -> None:
    """Make sessions started from now on give their executors this interpreter."""
    current = os.environ.get(PYTHON_ENV)
    if current and os.path.realpath(current) != os.path.realpath(sys.executable):
        log.info(
            "%s: executors use the driver's Python %s, not PYSPARK_PYTHON=%s",
            reason,
            sys.executable,
            current,
        )
    os.environ[PYTHON_ENV] = sys.executable


def fix_context_python(sc: Any) -> None:
    """On a local master, the executors run the driver's interpreter, whatever PYSPARK_PYTHON
    said when the context started (pythonExec is read each time a function is shipped)."""
    if is_local_master(sc.master) and sc.pythonExec != sys.executable:
        log.info(
            "local master %s: executors use %s, not %s", sc.master, sys.executable, sc.pythonExec
        )
        sc.pythonExec = sys.executable


def explain(exc: BaseException, python: str | None = None) -> str:
    """One line for a failure while Spark or its executors start: what went wrong (the
    executor's own error, quoted) and what to do."""
    text = str(exc) if not _str_fails(exc) else ""
    worker = _WORKER_ERROR.search(text)
    if worker:
        line = worker.group("line").strip()
        if "No module named 'rabbitry'" in line or "rabbitry.spark.daemon" in line:
            return (
                f"the executors' Python{f' ({python})' if python else ''} cannot import rabbitry: "
                f'"{line}". Install rabbitry into that Python, or point spark.pyspark.python '
                "(or PYSPARK_PYTHON) at one that has it"
            )
        return (
            f'an executor\'s Python worker failed to start: "{line}". Fix that interpreter, or '
            "point spark.pyspark.python (or PYSPARK_PYTHON) at another"
        )
    python_error = _PY_ERROR.search(text)
    if python_error:
        return f'a task failed on an executor: "{python_error.group("line").strip()}"'
    if "JAVA_GATEWAY_EXITED" in text or "Java gateway process exited" in text:
        return (
            "the Spark JVM exited before it started: check that Java 17+ is installed "
            "(java -version) and JAVA_HOME, and read the JVM's output in the log"
        )
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    first = first or type(exc).__name__
    if len(first) > 300:
        first = first[:300] + "..."
    return f"Spark failed: {first}"


def _str_fails(exc: BaseException) -> bool:
    try:
        str(exc)
    except Exception:
        return True
    return False


def _probe(_: Any) -> str:
    import sys as executor_sys

    import rabbitry.spark  # noqa: F401  (the point: it imports)

    return executor_sys.executable


def check_executors(spark: Any, tasks: int = 2) -> list[str]:
    """Run a tiny job whose tasks import rabbitry; return the executors' interpreters, or raise
    SparkStartError naming what failed (the executor's error quoted). On a real cluster this is
    the check, from the driver, that the executors' Python has rabbitry."""
    sc = spark.sparkContext
    try:
        return sorted(set(sc.parallelize(range(tasks), tasks).map(_probe).collect()))
    except Exception as exc:
        log.error("the executors could not run a task", exc_info=True)
        raise SparkStartError(explain(exc, sc.pythonExec)) from None


def launch_jvm(conf: Any, log_file: Path) -> bool:
    """Start PySpark's JVM with its stdout and stderr appended to `log_file` (Spark's warnings,
    log4j and the local-cluster workers all write there). False if a JVM already runs in this
    process (its output goes where it went)."""
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway

    with SparkContext._lock:
        if SparkContext._gateway is not None:
            return False
        with open(log_file, "ab") as out:
            gateway = launch_gateway(conf, popen_kwargs={"stdout": out, "stderr": out})
        SparkContext._gateway = gateway
        SparkContext._jvm = gateway.jvm
    return True


def start_session(builder: Any, log_file: Path | None = None, log_level: str = "WARN") -> Any:
    """getOrCreate() the session; the JVM's output goes to `log_file` when given; on a local
    master the executors run this interpreter; any failure is one SparkStartError line."""
    from pyspark import SparkConf

    try:
        if log_file is not None:
            conf = SparkConf(loadDefaults=False)
            for key, value in builder._options.items():
                conf.set(key, str(value))
            launch_jvm(conf, log_file)
        spark = builder.getOrCreate()
    except Exception as exc:
        log.error("Spark did not start", exc_info=True)
        raise SparkStartError(explain(exc)) from None
    spark.sparkContext.setLogLevel(log_level if log_file is not None else "ERROR")
    fix_context_python(spark.sparkContext)
    return spark
