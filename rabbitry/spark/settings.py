"""What `configure()` hands to every executor: the node template and the embedding options.

They travel as one JSON document in the executor environment variable RABBITRY_SPARK (set
through `spark.executorEnv.RABBITRY_SPARK`), because that is the one channel Spark offers from
the driver to a Python daemon before any task runs. The daemon renders the template for its
executor; the sidecar writes the result as the node's config file.

Template placeholders, in any string of the node config:
    {executor}  the Spark executor id ("0", "1", ...; "driver" in local mode)
    {app}       the application id (app-2026...-0000; "local-<pid>" in local mode)
    {host}      this host's name
    {pid}       the daemon's pid
"""

from __future__ import annotations

import json
import os
import re
import socket
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ENV_SETTINGS = "RABBITRY_SPARK"  # the settings, JSON (driver -> executors)
ENV_INFO = "RABBITRY_SPARK_INFO"  # path of the running node's info file (daemon -> tasks)
INFO_FILE = "spark-node.json"  # in the node's data_dir: where tasks find the node (mode 0600)
DEFAULT_NODE = "spark-{app}-{executor}@127.0.0.1"
_EXECUTOR_IN_URL = re.compile(r"[?&]executorId=([^&]+)")
_APP_IN_URL = re.compile(r"[?&]appId=([^&]+)")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


class SparkEmbedError(ValueError):
    """The embedding is misconfigured (raised on the driver, in configure())."""


@dataclass(frozen=True)
class Identity:
    """Who this executor is, from what Spark puts in the daemon's environment."""

    executor: str
    app: str
    host: str
    pid: int

    @classmethod
    def from_environment(cls, environ: dict[str, str] | None = None) -> Identity:
        """Executors started by a Spark worker have SPARK_LOG_URL_STDERR, whose query names
        the executor and the application; a local-mode daemon (started by the driver JVM) has
        neither, and is the one "driver" executor of that JVM."""
        env = os.environ if environ is None else environ
        url = env.get("SPARK_LOG_URL_STDERR") or env.get("SPARK_LOG_URL_STDOUT") or ""
        executor = _EXECUTOR_IN_URL.search(url)
        app = _APP_IN_URL.search(url)
        return cls(
            executor=_safe(executor.group(1)) if executor else "driver",
            app=_safe(app.group(1)) if app else f"local-{os.getppid()}",
            host=_safe(socket.gethostname()),
            pid=os.getpid(),
        )


def _safe(text: str) -> str:
    return _UNSAFE.sub("_", text)[:60] or "x"


@dataclass(frozen=True)
class EmbedSettings:
    """The embedding options (see rabbitry.spark.configure for each one's meaning)."""

    node: dict[str, Any]
    join: dict[str, str] = field(default_factory=dict)
    master_file: str | None = None
    system: str = "system"
    wait_replicas: int = 0
    data_root: str = field(
        default_factory=lambda: str(Path(tempfile.gettempdir()) / "rabbitry-spark")
    )
    ready_timeout: float = 30.0
    leave_on_exit: bool = True
    ephemeral: bool = True  # executors attach as ephemeral members (docs/membership.md)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> EmbedSettings:
        try:
            data = json.loads(text)
            return cls(**data)
        except (TypeError, ValueError) as exc:
            raise SparkEmbedError(
                f"${ENV_SETTINGS} is not valid embedding settings ({exc}); it is written by "
                "rabbitry.spark.configure() and must not be edited by hand"
            ) from None

    def render(self, identity: Identity, dist_port: int, control_port: int) -> dict[str, Any]:
        """The node config for this executor: the template with its placeholders filled, the
        ports the sidecar reserved, and a data_dir under data_root unless the template sets
        one."""
        values = {**asdict(identity), "pid": str(identity.pid)}
        config = _fill(self.node, values)
        config.setdefault("node", DEFAULT_NODE.format(**values))
        config.setdefault("listen", f"127.0.0.1:{dist_port}")
        host, sep, port = str(config["listen"]).rpartition(":")
        if sep and port == "0":
            # Port 0 would change at every restart of the node, and its peers would keep
            # dialling the old one: take the port the sidecar reserved, once, instead.
            config["listen"] = f"{host}:{dist_port}"
        config.setdefault("control", f"127.0.0.1:{control_port}")
        name = str(config["node"])
        config.setdefault("data_dir", str(Path(self.data_root) / _safe(name)))
        cluster = config.get("cluster")
        seeds = self.join or (cluster.get("nodes") if isinstance(cluster, dict) else None)
        if self.ephemeral and seeds:
            # An executor follows the core and never counts: it attaches to the seeds, and
            # the core forgets it when it goes, even by SIGKILL. (No seeds: a node of its own.)
            config.setdefault("role", "ephemeral")
            if config["role"] == "ephemeral" and not (isinstance(cluster, dict) and cluster):
                config["cluster"] = {"nodes": dict(self.join)}
        return config


def _fill(value: Any, values: dict[str, str]) -> Any:
    if isinstance(value, str):
        try:
            return value.format(**values)
        except (KeyError, IndexError, ValueError) as exc:
            raise SparkEmbedError(
                f"node template string {value!r}: unknown or malformed placeholder ({exc}); "
                "the placeholders are {executor}, {app}, {host} and {pid}"
            ) from None
    if isinstance(value, dict):
        return {str(_fill(k, values)): _fill(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, values) for v in value]
    return value
