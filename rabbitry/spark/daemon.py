"""The PySpark daemon module that gives each executor its node (spark.python.daemon.module).

Spark runs `python -m rabbitry.spark.daemon pyspark.worker` once per executor, for the
executor's life (one daemon per executor JVM; tasks are processes forked from it). Before
handing over to `pyspark.daemon.manager()`, this module:

1. starts the executor's node as a sidecar process (rabbitry.spark.sidecar). It is started
   with fork+exec while this process has no threads, and it never runs inside this process,
   because the daemon forks its workers and must not hold threads when it does;
2. waits (up to ready_timeout) for the node to be running and joined, so the executor's first
   tasks find it; if it is not ready by then, Spark still starts, and tasks get a retryable
   NodeUnavailable until it is;
3. puts the path of the node's info file in RABBITRY_SPARK_INFO, which every forked worker
   inherits: that is how `rabbitry.spark.node_name()` and friends find the node.

Nothing is written to stdout: the daemon's stdout is how Spark learns its port.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from rabbitry.spark.settings import ENV_INFO, ENV_SETTINGS, INFO_FILE, EmbedSettings, Identity


def _say(text: str) -> None:
    print(f"rabbitry.spark.daemon[{os.getpid()}]: {text}", file=sys.stderr, flush=True)


def _node_of_this_executor(info: Path) -> bool:
    """Whether `info` names a running node that another daemon of this same executor started.
    An executor runs one daemon per kind of Python worker (RDD functions, and SQL's Arrow
    UDFs such as mapInArrow): they must share the executor's one node, not start two nodes of
    the same name. Same executor: the daemon that started the node has our parent, the
    executor's JVM."""
    import psutil

    try:
        data = json.loads(info.read_text())
        owner = psutil.Process(int(data["daemon_pid"]))
        return owner.ppid() == os.getppid() and psutil.pid_exists(int(data["sidecar_pid"]))
    except (OSError, ValueError, KeyError, TypeError, psutil.Error):
        return False


def start_sidecar(settings: EmbedSettings, identity: Identity) -> Path:
    """Start the node's sidecar and wait for its info file; return the info file's path. If
    another daemon of this executor has started it already, share it."""
    import fcntl

    data_dir = Path(settings.render(identity, 0, 0)["data_dir"])
    info = data_dir / INFO_FILE
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / "daemon.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two daemons of one executor starting at once
        if _node_of_this_executor(info):
            return info
        return _start(settings, identity, data_dir, info)


def _start(settings: EmbedSettings, identity: Identity, data_dir: Path, info: Path) -> Path:
    with contextlib.suppress(FileNotFoundError):
        info.unlink()  # a previous executor's: its node is gone
    command = [
        sys.executable,
        "-m",
        "rabbitry.spark.sidecar",
        "--parent",
        str(os.getpid()),
        "--identity",
        json.dumps(asdict(identity)),
    ]
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=sys.stderr,
        start_new_session=True,  # Ctrl-C or the daemon's group signals do not skip the leave
    )
    deadline = time.monotonic() + settings.ready_timeout
    while not info.exists():
        if process.poll() is not None:
            _say(
                f"the node's sidecar exited with {process.returncode}; tasks will get "
                f"NodeUnavailable (see {data_dir / 'sidecar.log'} and node.log)"
            )
            break
        if time.monotonic() > deadline:
            _say(f"the node is not ready after {settings.ready_timeout} s; starting anyway")
            break
        time.sleep(0.05)
    return info


def main() -> None:
    raw = os.environ.get(ENV_SETTINGS)
    if raw:
        settings = EmbedSettings.from_json(raw)
        os.environ[ENV_INFO] = str(start_sidecar(settings, Identity.from_environment()))
    else:
        _say(f"${ENV_SETTINGS} is not set (use rabbitry.spark.configure); no node is embedded")
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
