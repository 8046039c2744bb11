"""`configure(builder_or_conf, node_config)`: embed a rabbitry node in every Spark executor."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from rabbitry.node_config import NodeConfigError, node_config_from_mapping
from rabbitry.spark.settings import ENV_SETTINGS, EmbedSettings, Identity, SparkEmbedError
from rabbitry.spark.startup import PYTHON_CONF, is_local_master, resolve_master, use_driver_python

DAEMON_MODULE = "rabbitry.spark.daemon"

# With more than one executor, a task that failed because its node was paused should run on
# another executor: exclusion per task and executor does that. The stage- and application-wide
# exclusions stay out of the way (a pause of a few seconds fails many tasks on one executor,
# and must not exclude it for the rest of the job); the retries get some room.
CLUSTER_DEFAULTS = {
    "spark.excludeOnFailure.enabled": "true",
    "spark.excludeOnFailure.task.maxTaskAttemptsPerExecutor": "2",
    "spark.excludeOnFailure.task.maxTaskAttemptsPerNode": "6",
    "spark.excludeOnFailure.stage.maxFailedTasksPerExecutor": "1000000",
    "spark.excludeOnFailure.stage.maxFailedExecutorsPerNode": "1000",
    "spark.excludeOnFailure.application.maxFailedTasksPerExecutor": "1000000",
    "spark.excludeOnFailure.application.maxFailedExecutorsPerNode": "1000",
    "spark.task.maxFailures": "8",  # must exceed maxTaskAttemptsPerNode (Spark checks)
}


def _get(target: Any, key: str) -> str | None:
    if hasattr(target, "_options"):  # SparkSession.Builder
        value = target._options.get(key)
        return None if value is None else str(value)
    if hasattr(target, "get"):  # SparkConf
        return target.get(key, None)
    raise TypeError(
        f"configure() needs a SparkSession.Builder or a SparkConf, got {type(target).__name__}"
    )


def _set(target: Any, key: str, value: str) -> None:
    if hasattr(target, "_options"):
        target.config(key, value)
    else:
        target.set(key, value)


def _load_template(node_config: dict[str, Any] | str | os.PathLike[str]) -> dict[str, Any]:
    if isinstance(node_config, dict):
        return dict(node_config)
    from supervisors.config_read import read_config_file

    path = Path(node_config)
    data = read_config_file(path, str(path), NodeConfigError)
    if not isinstance(data, dict):
        raise SparkEmbedError(f"{path}: a node config template must be a mapping")
    return data


def configure(
    builder_or_conf: Any,
    node_config: dict[str, Any] | str | os.PathLike[str],
    *,
    join: dict[str, str] | None = None,
    master_file: str | os.PathLike[str] | None = None,
    system: str = "system",
    wait_replicas: int = 0,
    data_root: str | os.PathLike[str] | None = None,
    ready_timeout: float = 30.0,
    leave_on_exit: bool = True,
    check: bool = True,
    ephemeral: bool = True,
) -> Any:
    """Make every executor of the session run its own rabbitry node; returns the argument.

    - `node_config`: a node config template (a mapping, or a YAML/TOML file read here on the
      driver). Strings may use {executor}, {app}, {host} and {pid}. `node` defaults to
      spark-{app}-{executor}@127.0.0.1, `listen` and `control` to free loopback ports, and
      `data_dir` to `data_root`/<node>. Give `cookie` or `cookie_file` (the cluster's), and
      `bus:` for revoked ids and elect_once, and `partition_handling`.
    - `join`: seed nodes {name: "host:port"}; the executor's node joins the cluster through
      the first reachable one, and leaves it when the executor ends (`leave_on_exit`).
    - `master_file`, `system`, `wait_replicas`: for `rabbitry.spark.redis()`, the Redis
      master file kept by the host's ConfigurationClient (one per host, as Beetle has).
    - `check`: render the template for a sample executor and check it as a node config now,
      on the driver (turn off if paths such as cookie_file exist only on the executors).
    - `ephemeral`: executors' nodes are ephemeral members (`role: ephemeral`, attached to the
      `join` seeds or the template's cluster.nodes): they never count toward a majority and
      the core forgets them when they go. False (or `role: core` in the template) makes them
      full members, as before.

    Sets spark.python.daemon.module to rabbitry.spark.daemon and passes the settings through
    spark.executorEnv.RABBITRY_SPARK. On local masters (local[...], local-cluster[...], from
    the builder, PYSPARK_SUBMIT_ARGS or spark-defaults.conf) the executors get the driver's
    Python: PYSPARK_PYTHON is set in this process, since that, not spark.pyspark.python, is
    what a session started from Python uses (start_session() makes sure of it for a master
    known only once the JVM runs). On multi-executor masters, task exclusion is turned on so
    that a task failed by a paused node is retried on another executor (CLUSTER_DEFAULTS;
    values already set are kept).
    """
    _get(builder_or_conf, "spark.master")  # a TypeError now if it is neither kind
    template = _load_template(node_config)
    if not isinstance(wait_replicas, int) or wait_replicas < 0:
        raise SparkEmbedError(f"wait_replicas must be an int >= 0, got {wait_replicas!r}")
    if ready_timeout <= 0:
        raise SparkEmbedError(f"ready_timeout must be > 0 s, got {ready_timeout!r}")
    settings = EmbedSettings(
        node=template,
        join=dict(join or {}),
        master_file=str(Path(master_file).resolve()) if master_file else None,
        system=system,
        wait_replicas=wait_replicas,
        data_root=str(Path(data_root or Path(tempfile.gettempdir()) / "rabbitry-spark").resolve()),
        ready_timeout=float(ready_timeout),
        leave_on_exit=leave_on_exit,
        ephemeral=bool(ephemeral),
    )
    if check:
        sample = settings.render(Identity("0", "app-check", "host", 1), 7000, 7001)
        try:
            config = node_config_from_mapping(sample, file="<spark node template>")
        except NodeConfigError as exc:
            raise SparkEmbedError(
                f"the Spark node template is not a valid node config: {exc}"
            ) from None
        if config.control is None:
            raise SparkEmbedError("the Spark node template must not set `control:` to null")
    _set(builder_or_conf, "spark.python.daemon.module", DAEMON_MODULE)
    _set(builder_or_conf, "spark.python.use.daemon", "true")
    _set(builder_or_conf, f"spark.executorEnv.{ENV_SETTINGS}", settings.to_json())
    master = resolve_master(_get(builder_or_conf, "spark.master"))
    if is_local_master(master):
        # The executors run on this host: give them this interpreter, which has rabbitry.
        # spark.pyspark.python is set for the record; PYSPARK_PYTHON is what PySpark reads.
        _set(builder_or_conf, PYTHON_CONF, sys.executable)
        use_driver_python(f"local master {master}")
    if not master or not master.startswith("local") or master.startswith("local-cluster"):
        for key, value in CLUSTER_DEFAULTS.items():
            if _get(builder_or_conf, key) is None:
                _set(builder_or_conf, key, value)
    return builder_or_conf
