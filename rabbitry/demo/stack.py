"""Everything the demo runs, in one handle: Redis, the failover tree, nodes, Spark.

    DemoStack(root).start()
      redis        3 redis-server processes: a master and 2 replicas (RedisSet)
      bus          1 more redis-server: the gossip bus of every node (so that killing the
                   failover set's master does not take the cluster's gossip with it)
      failover     a supervision tree in this process: the RCS and this host's RCC, on the
                   memory bus; the RCC keeps <root>/redis-master, which FailoverRedis reads
      cores        3 `rabbitry node start` processes, pause_minority, on the gossip bus
      spark        a SparkSession whose executors embed a node each (rabbitry.spark), joining
                   through the first core node

`stop()` undoes all of it, newest first, and is safe to call twice and from a signal handler
path (atexit runs it too). The tests, the demo and benchmarks/spark.py all use this one stack.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rabbitry.control import ControlClient, ControlError
from rabbitry.demo.redis_set import RedisSet, start_bus_redis
from rabbitry.spark.settings import INFO_FILE

log = logging.getLogger("rabbitry.demo.stack")

HOST = "127.0.0.1"
CLIENT_ID = "demo-host"  # this host's RCC (one per host, as Beetle has)
SYSTEM = "demo"
# Failover timing: the RCS checks the master every 0.5 s and switches after 2 failed checks.
FAST_RCS = {
    "master_retries": 2,
    "master_retry_interval": 0.5,
    "client_timeout": 2.0,
    "reconfigure_interval": 1.0,
    "client_heartbeat_interval": 0.5,
}
FAST_RCC = {"heartbeat_interval": 0.5}


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


@dataclass
class NodeView:
    name: str
    role: str  # "core" | "executor"
    state: str  # "running" | "paused" | "down"
    control: str | None


def _executor_node(_: Any) -> str:
    """Run in a task: wait for this executor's node, and name it."""
    import rabbitry.spark as rs

    rs.require_running(wait=10.0)
    return rs.node_name()


def _arrow_identity(batches: Any) -> Any:
    yield from batches


class DemoStack:
    """See the module doc. `master`: the Spark master URL; `cores`: core node count."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        master: str = "local-cluster[2,1,1024]",
        cores: int = 3,
        net_ticktime: float = 2.0,
        wait_replicas: int = 1,
        spark_conf: dict[str, str] | None = None,
        spark_log: str | os.PathLike[str] | None = None,
        forget_ephemeral_after: float | None = None,
    ) -> None:
        self.root = Path(root).resolve()
        self.master = master
        self.cores = cores
        self.net_ticktime = net_ticktime
        self.wait_replicas = wait_replicas
        self.spark_conf = dict(spark_conf or {})
        # Where the JVM's output goes (Spark's warnings, log4j, the workers); None: the console
        self.spark_log = Path(spark_log).resolve() if spark_log else None
        # the core's cluster.forget_ephemeral_after in seconds (None: the node's default)
        self.forget_ephemeral_after = forget_ephemeral_after
        self.cookie = uuid.uuid4().hex
        self.exchange = f"demo-{uuid.uuid4().hex[:8]}"
        self.redis: RedisSet | None = None
        self.bus_redis: RedisSet | None = None
        self.failover_tree: Any = None
        self.launcher: Any = None
        self.core_controls: dict[str, str] = {}
        self.core_dist: dict[str, str] = {}
        self.spark: Any = None
        self.master_file = self.root / "redis-master"
        self.executors_root = self.root / "executors"
        self._stopped = False

    # ------------------------------------------------------------------ start

    def start(self, spark: bool = True) -> DemoStack:
        import atexit
        import shutil

        # The stack's own directory: files of an earlier run (a master file!) would mislead.
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True, exist_ok=True)
        atexit.register(self.stop)
        try:
            self._start_redis()
            self._start_failover()
            self._start_cores()
            if spark:
                self.start_spark()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_redis(self) -> None:
        self.redis = RedisSet(self.root / "redis", size=3).start()
        self.redis.wait_synced(20.0)
        self.bus_redis = start_bus_redis(self.root / "bus")

    @property
    def bus_url(self) -> str:
        assert self.bus_redis is not None
        return self.bus_redis.url

    def _start_failover(self) -> None:
        from failover import ConfigurationClient, ConfigurationServer
        from supervisors import ChildSpec, Supervisor, SupFlags

        assert self.redis is not None
        bus = f"memory://demo-failover-{uuid.uuid4().hex[:8]}"
        rcc = ChildSpec(
            "rcc",
            (ConfigurationClient, (bus, SYSTEM, CLIENT_ID, self.master_file), FAST_RCC),
        )
        rcs = ChildSpec(
            "rcs",
            (
                ConfigurationServer,
                (bus, SYSTEM, self.redis.addresses, [CLIENT_ID]),
                {"master_file": self.root / "rcs-master", **FAST_RCS},
            ),
        )
        self.failover_tree = Supervisor.start(
            SupFlags("one_for_one", intensity=5, period=10.0), [rcc, rcs], name="demo-failover"
        )
        deadline = time.monotonic() + 20
        while self.redis_master() != self.redis.master:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the RCC did not write the Redis master to {self.master_file} in 20 s"
                )
            time.sleep(0.05)

    def core_name(self, index: int) -> str:
        return f"{chr(ord('a') + index)}@{HOST}"

    def _start_cores(self) -> None:
        from monitors.dist.name_lock import LOCK_DIR_ENV
        from rabbitry.testing.launcher import Launcher, NodeSpec

        names = [self.core_name(i) for i in range(self.cores)]
        dist = {n: f"{HOST}:{free_port()}" for n in names}
        self.core_dist = dist
        specs = []
        for name in names:
            control = f"{HOST}:{free_port()}"
            self.core_controls[name] = control
            config = {
                "node": name,
                "listen": dist[name],
                "cookie": self.cookie,
                "data_dir": str(self.root / "nodes" / name.split("@")[0]),
                "net_ticktime": f"{self.net_ticktime}s",
                "cluster": self._cluster_section(name, dist),
                "partition_handling": "pause_minority",
                "bus": self.bus_url,
                "gossip": {"exchange": self.exchange},
                "control": control,
            }
            path = self.root / "nodes" / f"{name.split('@')[0]}.yaml"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(config, indent=2))
            os.chmod(path, 0o600)  # it holds the cookie inline
            argv = [sys.executable, "-m", "rabbitry", "node", "start", "--config", str(path)]
            # The stack's names are private to it (its own cookie): its own name locks, so a
            # cluster of the README's a, b, c@127.0.0.1 on this host does not refuse it
            locks = {LOCK_DIR_ENV: str(self.root / "name-locks")}
            specs.append(NodeSpec(name, argv, ready_timeout=60.0, env=locks))
        self.launcher = Launcher(grace=10.0)
        self.launcher.start(*specs)
        deadline = time.monotonic() + 30
        while not all(v.state == "running" for v in self.core_views()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the core nodes did not all run in 30 s: {self.core_views()}")
            time.sleep(0.1)

    def _cluster_section(self, name: str, dist: dict[str, str]) -> dict[str, Any]:
        section: dict[str, Any] = {"nodes": {n: a for n, a in dist.items() if n != name}}
        if self.forget_ephemeral_after is not None:
            section["forget_ephemeral_after"] = f"{self.forget_ephemeral_after}s"
        return section

    def node_template(self) -> dict[str, Any]:
        return {
            "cookie": self.cookie,
            "partition_handling": "pause_minority",
            "bus": self.bus_url,
            "gossip": {"exchange": self.exchange},
            "net_ticktime": f"{self.net_ticktime}s",
        }

    def start_spark(self) -> Any:
        from pyspark.sql import SparkSession

        from rabbitry.spark import configure
        from rabbitry.spark.startup import start_session

        builder = (
            SparkSession.builder.master(self.master)
            .appName("rabbitry-demo")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
        )
        for key, value in self.spark_conf.items():
            builder = builder.config(key, value)
        first = self.core_name(0)
        configure(
            builder,
            self.node_template(),
            join={first: self.core_dist[first]},
            master_file=self.master_file,
            system=SYSTEM,
            wait_replicas=self.wait_replicas,
            data_root=self.executors_root,
        )
        # a JVM left by a Ctrl-C here: stop() sweeps it. A failure is one SparkStartError line.
        self.spark = start_session(builder, self.spark_log)
        return self.spark

    def warm_up(self, executors: int, timeout: float = 90.0) -> list[str]:
        """Run a small job until `executors` executor nodes are up; return their names.
        Executors start their node with their first task (the daemon starts with it)."""
        from rabbitry.spark.startup import SparkStartError, explain

        deadline = time.monotonic() + timeout
        seen: set[str] = set()
        sc = self.spark.sparkContext
        while True:
            try:
                found = sc.parallelize(range(64), 16).map(_executor_node).distinct().collect()
            except Exception as exc:
                log.error("the executors could not run the warm-up job", exc_info=True)
                raise SparkStartError(explain(exc, sc.pythonExec)) from None
            seen |= set(found)
            if len(seen) >= executors:
                self._warm_arrow_workers()
                return sorted(seen)
            if time.monotonic() > deadline:
                raise SparkStartError(
                    f"only {len(seen)} of {executors} executor nodes ran within {timeout:.0f} s "
                    f"({', '.join(sorted(seen)) or 'none'}); see the executors' sidecar.log and "
                    f"node.log under {self.executors_root}"
                )

    def _warm_arrow_workers(self) -> None:
        """Start each executor's SQL Python daemon (the pipeline's mapInArrow runs there; it
        imports pyarrow and pandas), so the job's first batches claim at once rather than
        after that start."""
        frame = self.spark.range(0, 64, 1, 16)
        frame.mapInArrow(_arrow_identity, schema=frame.schema).count()

    # ------------------------------------------------------------------ looking

    def redis_master(self) -> str | None:
        from failover import RedisMasterFile

        try:
            return RedisMasterFile(self.master_file, SYSTEM).read() or None
        except OSError:
            return None

    def executor_infos(self) -> dict[str, dict[str, Any]]:
        infos = {}
        for path in sorted(self.executors_root.glob(f"*/{INFO_FILE}")):
            with contextlib.suppress(OSError, ValueError):
                info = json.loads(path.read_text())
                infos[info["node"]] = info
        return infos

    def _client(self, control: str) -> ControlClient:
        host, _, port = control.rpartition(":")
        return ControlClient(host, int(port), self.cookie.encode(), timeout=2.0)

    def _view(self, name: str, role: str, control: str | None) -> NodeView:
        if control is None:
            return NodeView(name, role, "down", None)
        try:
            status = self._client(control).status()
        except ControlError:
            return NodeView(name, role, "down", control)
        return NodeView(name, role, "paused" if status.get("paused") else "running", control)

    def core_views(self) -> list[NodeView]:
        return [self._view(n, "core", c) for n, c in self.core_controls.items()]

    def views(self) -> list[NodeView]:
        executors = [
            self._view(name, "executor", info.get("control"))
            for name, info in self.executor_infos().items()
        ]
        return self.core_views() + executors

    def client(self, node: str) -> ControlClient:
        """The control client of a core or executor node."""
        control = self.core_controls.get(node) or self.executor_infos()[node]["control"]
        return self._client(control)

    # ------------------------------------------------------------------ faults

    def kill_redis_master(self) -> str:
        """SIGKILL the server the master file names; return its address."""
        assert self.redis is not None
        master = self.redis_master()
        if master is None:
            raise RuntimeError("no Redis master is known; nothing to kill")
        self.redis.kill(master)
        return master

    def partition(self, node: str, seconds: float) -> None:
        """Cut `node` off from every peer for `seconds` (NetKernel.block on that node)."""
        self.client(node).block("all", seconds)

    def heal(self, node: str) -> None:
        """End `partition(node, ...)` early."""
        self.client(node).unblock("all")

    def revoke(self, ids: list[str]) -> None:
        """Revoke ids through the first core node's gossip."""
        client = self.client(self.core_name(0))
        for start in range(0, len(ids), 5000):
            client.revoke(ids[start : start + 5000])

    def wait_revoked(self, count: int, timeout: float = 20.0) -> None:
        """Until every running node's gossip holds at least `count` revoked ids."""
        deadline = time.monotonic() + timeout
        while True:
            counts = {}
            for view in self.views():
                if view.state == "running":
                    with contextlib.suppress(ControlError):
                        counts[view.name] = self.client(view.name).gossip()["revoked"]
            if counts and all(c >= count for c in counts.values()):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"revokes did not reach every node in {timeout} s: {counts}")
            time.sleep(0.2)

    # ------------------------------------------------------------------ stop

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self.spark is not None:
            with contextlib.suppress(Exception):
                self.spark.stop()
            self._wait_executors_gone(20.0)
        if self.launcher is not None:
            with contextlib.suppress(Exception):
                self.launcher.stop_all()
        if self.failover_tree is not None and self.failover_tree.is_alive():
            with contextlib.suppress(Exception):
                self.failover_tree.stop()
        for servers in (self.redis, self.bus_redis):
            if servers is not None:
                with contextlib.suppress(Exception):
                    servers.stop()
        self._sweep()

    def _sweep(self) -> None:
        """Last resort: kill any process of ours still naming the stack's directory. A
        Ctrl-C while pyspark launches its JVM loses the handle on it (it ignores SIGINT
        and only exits when it has begun watching our pipe)."""
        import psutil

        root = str(self.root)
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if any(root in part for part in child.cmdline()):
                    log.info("stopping a leftover process %s: %s", child.pid, child.name())
                    child.kill()

    def _wait_executors_gone(self, timeout: float) -> None:
        """The executors' sidecars leave the cluster when their daemons end; give them the
        time to, so that nothing of ours outlives the stack."""
        deadline = time.monotonic() + timeout
        while self.executor_infos() and time.monotonic() < deadline:
            time.sleep(0.2)
