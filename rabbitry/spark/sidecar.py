"""The executor's node, run beside the PySpark daemon: `python -m rabbitry.spark.sidecar`.

Why a sidecar process and not a node inside the daemon: pyspark's daemon forks a worker per
task connection, and a node runs threads (dist, timers, HTTP). Forking a process that runs
threads copies locks held by threads that do not exist in the child, so the daemon must stay
single-threaded. The daemon therefore starts this process (fork+exec, before it forks anything)
and only passes the node's address to its workers through the environment.

This process is a small supervision tree: the node runs as an OsProcess child (`rabbitry node
start`), restarted if it dies (kill -9 included) on the same ports, so peers find it where they
knew it. The sidecar watches its parent, the daemon: when the daemon goes (the executor ended,
or Spark killed it), the node leaves the cluster (`rabbitry cluster leave`) and stops, so an
ended executor is not left behind as a down member that counts against the majority.

It writes an info file (mode 0600) that tasks read to reach the node: node name, control
address and token, master file. Output goes to `<data_dir>/sidecar.log` and `node.log`; stdout
is never used, because the daemon's stdout is how Spark learns the daemon's port.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from monitors.durable_files import atomic_write
from rabbitry.control import ControlClient, ControlError, control_token
from rabbitry.node_config import NodeConfigError, node_config_from_mapping
from rabbitry.spark.settings import (
    ENV_SETTINGS,
    INFO_FILE,
    EmbedSettings,
    Identity,
    SparkEmbedError,
)

log = logging.getLogger("rabbitry.spark.sidecar")

PARENT_POLL = 0.5  # how soon an ended executor's node starts leaving
JOIN_CHECK = 5.0  # how often the node's membership is checked (after a restart, say)


def reserve_port() -> int:
    """A free port. Another process could take it before the node binds it; the
    node then fails to start, the supervisor restarts it, and the sidecar reports it."""
    with socket.socket() as sock:
        sock.bind(("", 0))  # every interface: the node may listen on a routable address
        return int(sock.getsockname()[1])


def write_private(path: Path, data: dict[str, Any]) -> None:
    """Write JSON atomically, readable by the owner only (it holds the control token)."""
    atomic_write(path, json.dumps(data).encode(), mode=0o600)


class Sidecar:
    """One executor's node: render its config, supervise it, join, leave at the end."""

    def __init__(self, settings: EmbedSettings, identity: Identity, parent: int) -> None:
        self.settings = settings
        self.identity = identity
        self.parent = parent
        self.config_data = settings.render(identity, reserve_port(), reserve_port())
        self.config = node_config_from_mapping(self.config_data, file="<spark node template>")
        self.data_dir = Path(self.config.data_dir)
        self.info_path = self.data_dir / INFO_FILE
        assert self.config.control is not None
        # With `tls:` in the node template the control API is HTTPS, checked against its CA.
        self.cafile = str(self.config.tls.cafile) if self.config.tls is not None else None
        self.client = ControlClient(
            self.config.control.host,
            self.config.control.port,
            self.config.cookie,
            timeout=10.0,
            cafile=self.cafile,
        )
        self.stopping = threading.Event()
        self.root: Any = None

    def start(self) -> None:
        from supervisors import ChildSpec, OsProcess, Supervisor, SupFlags

        self.data_dir.mkdir(parents=True, exist_ok=True)
        config_path = self.data_dir / "node.yaml"
        config_path.write_text(json.dumps(self.config_data, indent=2))  # JSON is YAML
        os.chmod(config_path, 0o600)  # it holds the cookie inline
        command = [sys.executable, "-m", "rabbitry", "node", "start", "--config", str(config_path)]
        node = ChildSpec(
            "node",
            (OsProcess, (command,), {"log_file": self.data_dir / "node.log", "grace": 10.0}),
            shutdown=15.0,
        )
        # A node that keeps dying (a port taken, a bad tree) should not spin for ever; the
        # sidecar then exits, and tasks get NodeUnavailable naming node.log.
        self.root = Supervisor.start(SupFlags("one_for_one", intensity=10, period=60.0), [node])

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.client.status()
                return
            except ControlError as exc:
                if time.monotonic() > deadline or self.stopping.is_set():
                    raise TimeoutError(
                        f"node {self.config.node} did not answer on its control API within "
                        f"{timeout} s ({exc}); see {self.data_dir / 'node.log'}"
                    ) from None
                time.sleep(0.1)

    def ensure_joined(self) -> bool:
        """Join the first reachable seed unless the node is already a member with one."""
        if not self.settings.join:
            return True
        try:
            members = set(self.client.status()["all"])
        except ControlError as exc:
            log.warning("node %s: no status yet: %s", self.config.node, exc)
            return False
        if members & set(self.settings.join):
            return True
        for seed, address in self.settings.join.items():
            try:
                self.client.join(seed, address)
                log.info("node %s joined the cluster through %s", self.config.node, seed)
                return True
            except ControlError as exc:
                log.warning("node %s: cannot join through %s: %s", self.config.node, seed, exc)
        return False

    def wait_mingled(self, timeout: float) -> None:
        """With a bus, wait for the start-up sync, so that the first task already sees the
        ids revoked before this executor started."""
        if self.config.bus is None:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.stopping.is_set():
            try:
                if self.client.gossip().get("mingled"):
                    return
            except ControlError:
                pass
            time.sleep(0.1)
        log.warning("node %s: gossip has not mingled after %s s", self.config.node, timeout)

    def write_info(self) -> None:
        control = self.config.control
        assert control is not None
        write_private(
            self.info_path,
            {
                "version": 1,
                "node": self.config.node,
                "control": f"{control.host}:{control.port}",
                "token": control_token(self.config.cookie),
                "cafile": self.cafile,  # set: the control API is HTTPS, checked against it
                "master_file": self.settings.master_file,
                "system": self.settings.system,
                "wait_replicas": self.settings.wait_replicas,
                "data_dir": str(self.data_dir),
                "sidecar_pid": os.getpid(),
                "daemon_pid": self.parent,
            },
        )

    def parent_alive(self) -> bool:
        return os.getppid() == self.parent

    def run(self) -> int:
        """Until the daemon goes: keep the node a member. Then leave and stop."""
        self.start()
        try:
            self.wait_ready(self.settings.ready_timeout)
            deadline = time.monotonic() + self.settings.ready_timeout
            while not self.ensure_joined() and time.monotonic() < deadline:
                if self.stopping.wait(0.5) or not self.parent_alive():
                    break
            self.wait_mingled(max(0.0, deadline - time.monotonic()))
            self.write_info()
            next_check = time.monotonic() + JOIN_CHECK
            while self.parent_alive() and not self.stopping.wait(PARENT_POLL):
                if self.root is None or not self.root.is_alive():
                    log.error("node %s: its supervisor gave up; see node.log", self.config.node)
                    return 1
                if time.monotonic() >= next_check:
                    self.ensure_joined()
                    next_check = time.monotonic() + JOIN_CHECK
            return 0
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        with contextlib.suppress(OSError):
            self.info_path.unlink()
        if self.settings.leave_on_exit and self.settings.join:
            try:
                self.client.leave()
                log.info("node %s left the cluster", self.config.node)
            except ControlError as exc:
                log.warning("node %s could not leave the cluster: %s", self.config.node, exc)
        if self.root is not None and self.root.is_alive():
            self.root.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rabbitry.spark.sidecar",
        description="Run a Spark executor's rabbitry node beside its PySpark daemon "
        "(started by rabbitry.spark.daemon; not meant to be run by hand).",
    )
    parser.add_argument("--parent", type=int, required=True, help="the daemon's pid")
    parser.add_argument("--identity", required=True, help="the executor identity, JSON")
    args = parser.parse_args(argv)
    settings = EmbedSettings.from_json(os.environ.get(ENV_SETTINGS, "{}"))
    identity = Identity(**json.loads(args.identity))
    try:
        sidecar = Sidecar(settings, identity, args.parent)
    except (NodeConfigError, SparkEmbedError) as exc:
        print(f"rabbitry.spark.sidecar: bad node template: {exc}", file=sys.stderr)
        return 2
    sidecar.data_dir.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        handlers=[logging.FileHandler(sidecar.data_dir / "sidecar.log")],
    )
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: sidecar.stopping.set())
    try:
        return sidecar.run()
    except Exception as exc:
        log.exception("sidecar for %s failed", sidecar.config.node)
        print(f"rabbitry.spark.sidecar: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
