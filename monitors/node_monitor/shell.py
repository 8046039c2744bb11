"""NodeMonitor: the actor shell around NodeMonitorCore.

The core decides; this Process does the I/O. It feeds the core the NetKernel's NodeUp/NodeDown,
the messages sent to the registered name NodeMonitorCore.NAME, and its timers, and performs the
effects the core returns: messages through the NetKernel, timers through Process.send_after
(keyed, so re-arming replaces; cancelled when the process ends) that tell
this process when they fire, connects on a helper thread (a connect blocks), the cluster files
written atomically, and pausing or resuming the node's application tree through `AppControl`.

Pauses and resumes run one at a time, in order, on their own thread: stopping an application
tree can take its children's whole shutdown time, and the monitor must keep answering meanwhile
(RabbitMQ runs them in rabbit_outside_app_process for the same reason).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from monitors.core_shell import NodeCoreShell
from monitors.dist import Message, NetKernel
from monitors.effects import Log, Send, perform_all
from monitors.node_monitor.config import PartitionHandling
from monitors.node_monitor.core import NodeMonitorCore
from monitors.node_monitor.effects import Notify, PauseApp, ResumeApp, SaveClusterStatus
from monitors.node_monitor.ephemeral import ROLE_EPHEMERAL, ROLES, EphemeralMonitorCore
from monitors.node_monitor.status import ClusterStatus, read_cluster_status, write_cluster_status
from monitors.shell_effects import ShellEffects

log = logging.getLogger("monitors.node_monitor")
MAX_STORE_EVENTS = 50  # the store's system events kept for the control API


@dataclass(frozen=True)
class NodeEvent:
    """What a subscriber of the node monitor receives (RabbitMQ's node_up/node_down casts):
    `event` is node_up, node_down, partition, partial_partition, paused or resumed."""

    event: str
    node: str


@dataclass(frozen=True)
class AppControl:
    """How the monitor stops and starts the node's application tree. Both calls block until
    done; they run on the monitor's app thread, never on its actor thread."""

    pause: Callable[[], None]
    resume: Callable[[], None]


@dataclass(frozen=True)
class _AppDone:
    started: bool


_MEMBERSHIP: dict[str, Any] = {
    "cluster_query": lambda shell, msg: shell._cluster_query(msg),
    "address": lambda shell, msg: shell._learn_address(msg),
}


class NodeMonitor(NodeCoreShell[NodeMonitorCore | EphemeralMonitorCore]):
    """One node's monitor (rabbit_node_monitor). Start it after the node's NetKernel.

    `kernel` is the NetKernel (or its ref). The cluster status comes from `data_dir` when the
    cluster files exist, else from `initial_nodes` (the config file's cluster, all disc nodes,
    as RabbitMQ's classic config peer discovery forms the cluster at first start).

    `role="ephemeral"` runs EphemeralMonitorCore instead: `initial_nodes` are then the core
    members it attaches to, and nothing is read from or written to the cluster files.
    """

    trap_exit = True  # like rabbit_node_monitor: a supervisor shutdown must not cut a file write

    def __init__(
        self,
        kernel: Any,
        data_dir: str | os.PathLike[str],
        partition_handling: PartitionHandling | str | dict | None = None,
        *,
        initial_nodes: Iterable[str] = (),
        app: AppControl | None = None,
        role: str = "core",
        **core_options: Any,
    ) -> None:
        super().__init__()
        if role not in ROLES:
            raise ValueError(f"node monitor: role must be one of {', '.join(ROLES)}; got {role!r}")
        self.role = role
        self._kernel_ref = kernel
        self.data_dir = Path(data_dir)
        if partition_handling is None or isinstance(partition_handling, PartitionHandling):
            self._config = partition_handling or PartitionHandling()
        else:
            self._config = PartitionHandling.parse(partition_handling)
        self._initial_nodes = tuple(initial_nodes)
        self._app = app
        self._core_options = core_options
        self._subscribers: dict[str, Any] = {}
        self._store_events: list[dict[str, Any]] = []
        self._app_jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._app_thread: threading.Thread | None = None
        self.route(_AppDone, self._on_app_done)

    # ---------------------------------------------------------------------- lifecycle

    def on_start(self) -> None:
        self.kernel = NetKernel.of(self._kernel_ref)
        node = self.kernel.node
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.role == ROLE_EPHEMERAL:
            self.core = EphemeralMonitorCore(
                node,
                self.kernel.creation,
                [n for n in self._initial_nodes if n != node],
                self._config,
                **self._core_options,
            )
        else:
            status = read_cluster_status(self.data_dir, node)
            if status is None:
                nodes = sorted({node, *self._initial_nodes})
                status = ClusterStatus(all=tuple(nodes), disc=tuple(nodes), running=(node,))
            self.core = NodeMonitorCore(
                node,
                self.kernel.creation,
                status,
                self._config,
                disconnect_ban=self.kernel.disconnect_ban,
                **self._core_options,
            )
        self._app_thread = threading.Thread(
            target=self._app_loop, name=f"node-monitor-app-{node}", daemon=True
        )
        self._app_thread.start()
        self._effects = ShellEffects(
            self,
            self._timers,
            log,
            "node monitor",
            kernel=self.kernel,
            before_connect=self._before_connect if self.role == ROLE_EPHEMERAL else None,
        )
        self.attach(NodeMonitorCore.NAME)
        self._perform(self.core.start(time.monotonic()))
        self.replay_nodeups()

    def on_stop(self) -> None:
        if isinstance(self.core, EphemeralMonitorCore):  # a graceful stop is a leave
            # only the messages: the application is being stopped by the node already
            effects = self.core.left_cluster(self.core.node, time.monotonic())
            with contextlib.suppress(Exception):
                self._perform(e for e in effects if isinstance(e, Send | Log))
        self._shutdown()
        if isinstance(self.core, NodeMonitorCore):  # RabbitMQ writes nodes_running_at_shutdown
            with contextlib.suppress(OSError):
                write_cluster_status(self.data_dir, self.core.cluster_status())

    def on_failure(self, *_exc_info: Any) -> None:
        self._shutdown()

    def on_kill(self) -> None:
        self._shutdown()

    def _shutdown(self) -> None:
        self._timers.clear()  # the timers themselves end with the process (send_after)
        self._app_jobs.put(None)
        self.detach(NodeMonitorCore.NAME)

    # ---------------------------------------------------------------------- the API

    def get_status(self) -> dict[str, Any]:
        """The status the control API and `rabbitry cluster status` show."""
        assert self.core is not None
        return self.core.status()

    def ephemeral_members(self) -> tuple[list[str], list[str]]:
        """(up, down) ephemeral members this node knows; down ones until forgotten."""
        assert self.core is not None
        return self.core.ephemeral_members()

    def partition_modes(self) -> dict[str, Any]:
        """{member: its partition_handling} as the members' records said (ours included)."""
        modes = getattr(self.core, "partition_modes", None)
        return modes() if modes is not None else {}

    def role_conflict(self, node: str, role: str) -> str:
        """Why `node` may not connect as `role` ("" if it may; see NodeMonitorCore)."""
        check = getattr(self.core, "role_conflict", None)
        return check(node, role) if check is not None else ""

    def is_paused(self) -> bool:
        assert self.core is not None
        return self.core.paused

    def set_alarm(self, resource: str, active: bool) -> None:
        """Raise or clear a resource alarm on this node; peers are told."""
        assert self.core is not None
        self._perform(self.core.set_alarm(resource, active, time.monotonic()))

    def store_event(self, kind: str, node: str, detail: Any = None) -> None:
        """A system event of the node's replicated store (mnesia_like), which subscribes this
        monitor first, as rabbit_node_monitor subscribes to Mnesia's system events.

        Logged, and kept (the last MAX_STORE_EVENTS) for `store_events()`. Unlike
        rabbit_node_monitor, inconsistent_database does not feed partition detection: the
        core detects partitions itself from the dist layer (each side saw the other down),
        and the store heals itself (its `merge` setting)."""
        if kind == "inconsistent_database":
            log.warning(
                "node monitor: the store reports inconsistent_database(%s, %s)", detail, node
            )
        else:
            log.info("node monitor: store event %s %s %s", kind, node, detail if detail else "")
        self._store_events.append({"kind": kind, "node": node, "detail": detail, "at": time.time()})
        del self._store_events[:-MAX_STORE_EVENTS]

    def store_events(self) -> list[dict[str, Any]]:
        return list(self._store_events)

    def set_weight(self, n: int) -> None:
        """Autoheal weight: how much this node's partition is worth keeping (default: the
        number of running application processes, set by the node)."""
        assert self.core is not None
        self.core.set_weight(n)

    def joined_cluster(self, node: str, disc: bool = True) -> None:
        assert self.core is not None
        self._perform(self.core.joined_cluster(node, disc, time.monotonic()))

    def left_cluster(self, node: str) -> None:
        assert self.core is not None
        self._perform(self.core.left_cluster(node, time.monotonic()))

    def subscribe(self, ref: Any) -> None:
        """Send NodeEvent messages to `ref` (a Process) from now on."""
        self._subscribers[ref.actor_urn] = ref

    def unsubscribe(self, ref: Any) -> None:
        self._subscribers.pop(ref.actor_urn, None)

    # ---------------------------------------------------------------------- events

    # The incoming half is NodeCoreShell's (monitors/core_shell.py): NodeUp, NodeDown, timers,
    # connect attempts, and messages to NodeMonitorCore.NAME, two of which are not the core's.

    def on_message(self, message: Message, now: float) -> Any:
        query = message.msg.get("t") if isinstance(message.msg, dict) else None
        if query in _MEMBERSHIP:
            return _MEMBERSHIP[query](self, message.msg)
        return super().on_message(message, now)

    def _on_app_done(self, message: _AppDone, now: float) -> None:
        core = self._core()
        self._perform(core.app_started(now) if message.started else core.app_stopped(now))

    # ---------------------------------------------------------------------- membership
    # Two requests of `rabbitry cluster join` that are not part of the monitor's protocol: the
    # joiner asks a member for the membership and the members' addresses, then tells every
    # member its own address, so that they can reach it after a disconnect.

    def _cluster_query(self, _msg: dict[str, Any]) -> dict[str, Any]:
        assert self.core is not None
        status = self.core.status()
        # core members only: an ephemeral node that joins must not learn where the other
        # ephemeral nodes are (it never connects to them)
        addresses = {**self.kernel.addresses(), self.kernel.node: self.kernel.address}
        return {
            "all": status["all"],
            "disc": status["disc"],
            "addresses": {n: a for n, a in addresses.items() if n in status["all"]},
            "role": self.role,
        }

    def _before_connect(self, node: str) -> None:
        """On the connect thread of an ephemeral node: learn where `node` is, if need be."""
        if node not in self.kernel.addresses():
            self._learn_core_addresses()

    def _learn_core_addresses(self) -> None:
        """An ephemeral node seeded with part of the core learns where the other core members
        are from a core member it reaches (the query `rabbitry cluster join` makes)."""
        for peer in self.kernel.nodes():
            try:
                answer = self.kernel.call(peer, NodeMonitorCore.NAME, {"t": "cluster_query"}, 5.0)
                addresses = answer.get("addresses", {}) if answer.get("role") == "core" else {}
            except Exception as exc:
                log.debug("node monitor: cluster_query to %s failed: %s", peer, exc)
                continue
            for member, address in addresses.items():
                if member != self.kernel.node and member not in self.kernel.addresses():
                    try:
                        self.kernel.set_address(member, address)
                    except (TypeError, ValueError) as exc:
                        log.warning("node monitor: bad address for %s dropped: %s", member, exc)
            return

    def _learn_address(self, msg: dict[str, Any]) -> None:
        node, address = msg.get("node"), msg.get("address")
        if (
            isinstance(node, str)
            and isinstance(address, str)
            and node not in self.kernel.addresses()
        ):
            try:
                self.kernel.set_address(node, address)
            except ValueError as exc:
                log.warning("node monitor: bad address for %s dropped: %s", node, exc)

    # ---------------------------------------------------------------------- effects

    def _perform(self, effects: Iterable[Any]) -> None:
        perform_all(effects, self._perform_one, log, "node monitor")

    def _perform_one(self, effect: Any) -> None:
        if self._common_effects().perform(effect):
            return
        kind = type(effect)
        if kind is PauseApp:
            self._app_jobs.put(False)  # the core logs why
        elif kind is ResumeApp:
            self._app_jobs.put(True)
        elif kind is SaveClusterStatus:
            write_cluster_status(
                self.data_dir,
                ClusterStatus(all=effect.all, disc=effect.disc, running=effect.running),
            )
        elif kind is Notify:
            for urn, ref in list(self._subscribers.items()):
                try:
                    ref.tell(NodeEvent(effect.event, effect.node))
                except Exception:
                    self._subscribers.pop(urn, None)
        else:
            log.error("node monitor: unknown effect %r dropped", effect)

    def _tell_quietly(self, message: Any) -> None:
        with contextlib.suppress(Exception):
            self.actor_ref.tell(message)

    def _app_loop(self) -> None:
        """Run pauses and resumes in order; report each to the core when done.

        A failed resume is retried (1 s, doubling to 30 s) until it works or a newer request
        comes: the core is told "running" only when the application really started, so the
        status never shows a node running an application that is not there.
        """
        while True:
            job = self._app_jobs.get()
            if job is None:
                return
            delay, done = 1.0, False
            while not done:
                try:
                    if self._app is not None:
                        (self._app.resume if job else self._app.pause)()
                    done = True
                except Exception:
                    log.exception(
                        "node monitor: %s the application failed",
                        "resuming" if job else "pausing",
                    )
                    if not job:
                        done = True  # a failed stop leaves nothing to restart: report stopped
                    elif self._newer_app_job(delay):
                        break  # superseded while failing: the newer request reports
                    delay = min(2 * delay, 30.0)
            if done:
                self._tell_quietly(_AppDone(started=job))

    def _newer_app_job(self, wait: float) -> bool:
        """Wait up to `wait` s for a newer app request; True if one came (or we stop)."""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not self._app_jobs.empty():
                return True
            time.sleep(0.05)
        return not self._app_jobs.empty()
