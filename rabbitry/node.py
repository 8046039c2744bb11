"""A node: one OS process running the root supervision tree of a rabbitry cluster member.

    root (rest_for_one)
      net_kernel     the dist layer (TCP mesh, cookie auth, ticks)
      node_monitor   rabbit_node_monitor: cluster status, partitions, pausing
      mnesia         the replicated store, mnesia_like (when `mnesia:` is set)
      node_stats     resource alarms and the autoheal weight, sampled every few seconds
      control        the HTTP JSON control API (when `control:` is set)
      gossip         heartbeats, mingle, revokes and elections on the `bus:` (when set)
      app            the application tree from `tree:` (what pauses)
      observer       writes dist and node monitor events into the node's Observations

When `metrics:` is set, a `metrics` child (GET /metrics) comes first: it reads the others when
scraped and needs none of them to start, and a taken address then fails the start at once.

rest_for_one: if the dist layer dies, everything after it is restarted too, as an Erlang node
without its net_kernel is no cluster member. Pausing (pause_minority, pause_if_all_down, an
autoheal loser) terminates only `app`; resuming restarts it. Dist, the monitor and the control
API keep running, as RabbitMQ stops the rabbit application while the VM lives on.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pykka import ActorDeadError, ActorRef, Timeout

from monitors.alarms import DISK, MEMORY, evaluate, sample
from monitors.dist import NetKernel
from monitors.dist.name_lock import NameLock
from monitors.gossip import Gossip
from monitors.node_monitor.shell import AppControl, NodeMonitor
from monitors.tls import TlsContexts
from rabbitry.control import Conflict, ControlServer
from rabbitry.control_routes import ELECT_TOPIC, ControlRoutes
from rabbitry.node_config import NodeConfig
from rabbitry.node_files import describe, node_run_dir, read_addresses, with_run_dir
from rabbitry.observe import MetricsServer, NodeObserver, Observations
from rabbitry.singleton.guard import with_singletons
from rabbitry.singleton.service import SingletonService
from rabbitry.ui import ManagementUI
from supervisors import ChildSpec, Process, Supervisor, SupFlags, stop_pool

if TYPE_CHECKING:  # the store is imported when configured (mnesia:)
    from mnesia_like import Mnesia

log = logging.getLogger("rabbitry.node")

STATS_INTERVAL = 2.5  # RabbitMQ's vm_memory_monitor checks every 2.5 s
_current: Node | None = None  # the node this process runs (one OS process is one node)


def current_node() -> Node:
    """The Node running in this OS process, for application processes in its tree.

    Raises RuntimeError outside a node (a tree run with `rabbitry tree run`, a unit test).
    """
    if _current is None:
        raise RuntimeError(
            "no rabbitry node runs in this process; start one with `rabbitry node start` "
            "(application code that needs the cluster must run in a node's `tree:`)"
        )
    return _current


class NodeParts:
    """The refs of the root's children as they (re)start, for the start callables of the
    children after them (a start callable runs in the root supervisor's thread and so cannot
    ask the supervisor itself), and for the control API's routes. None: not started, or not
    configured (mnesia, gossip, control, metrics)."""

    def __init__(self) -> None:
        self.kernel: ActorRef[NetKernel] | None = None
        self.monitor: ActorRef[NodeMonitor] | None = None
        self.control: ActorRef[ControlServer] | None = None
        self.gossip: ActorRef[Gossip] | None = None
        self.mnesia: ActorRef[Mnesia] | None = None
        self.metrics: ActorRef[MetricsServer] | None = None
        self.singletons: ActorRef[SingletonService] | None = None


class NodeStats(Process):
    """Samples memory and disk every STATS_INTERVAL seconds, raises and clears the alarms on
    the node monitor, and sets the autoheal weight (the application's running processes)."""

    def __init__(self, monitor: Any, config: NodeConfig, weight: Any) -> None:
        super().__init__()
        self._monitor = monitor.proxy()
        self._config = config
        self._weight = weight
        self._active: set[str] = set()

    def on_start(self) -> None:
        self._config.data_dir.mkdir(parents=True, exist_ok=True)
        self._check_alarms()  # raised before the node says READY
        # The first full tick runs from the mailbox, not here: the weight asks the root
        # supervisor, which is busy starting this very child, so asking it from on_start
        # blocks until the call times out. A restart (rest_for_one, after a crash) then fails
        # for ever, and every child after this one (the control API) stays down.
        self.actor_ref.tell("tick")

    def on_receive(self, message: Any) -> Any:
        if message == "tick":
            self._tick()
            return None
        return super().on_receive(message)

    def _tick(self) -> None:
        self._check_alarms()
        try:
            self._monitor.set_weight(self._weight())
        except (ActorDeadError, Timeout) as exc:
            # The tree is changing under us (a pause stopping the application, a restart):
            # keep the last weight and try again next tick instead of crashing, which would
            # restart, under rest_for_one, the control API and everything after it.
            log.info("node stats: the autoheal weight is not available now (%s); next tick", exc)
        self.send_after(STATS_INTERVAL, "tick")

    def _check_alarms(self) -> None:
        thresholds = self._config.alarms
        active = evaluate(
            sample(self._config.data_dir),
            thresholds.memory_high_watermark,
            thresholds.disk_free_limit,
        )
        for resource in (MEMORY, DISK):
            if (resource in active) != (resource in self._active):
                self._monitor.set_alarm(resource, resource in active)
        self._active = active


class Node:
    """A started node. `Node.start(config)` returns once every part is running."""

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        # The node's SSL contexts (None without `tls:`): dist, the control API and metrics
        # take theirs from here per connection, so a rotation reaches all of them at once.
        self.tls = TlsContexts(config.tls, config.node) if config.tls is not None else None
        self.parts = NodeParts()
        self.root: Any = None
        # The monitor may ask to start or stop the application while the root is still
        # starting its children (Supervisor.start has not returned the root yet).
        self._root_ready = threading.Event()
        # the control API's handlers (they keep elect_once's keys for the node's lifetime)
        self.routes = ControlRoutes(self)
        # Why the application last failed to start (None once it starts), for GET /app and
        # `rabbitry cluster status`: a node that is up but not running says why.
        self._app_error: dict[str, Any] | None = None
        # what metrics and the management page read without asking an actor
        self.observations = Observations(config.node)
        # One live process per name: the host's lock (taken before the dist layer listens),
        # and a peer's refusal when a running node elsewhere holds the name. `fatal` then
        # says why, and `fatal_event` wakes `rabbitry node start`, which exits 2.
        self.name_lock = NameLock(config.node)
        self.fatal: str | None = None
        self.fatal_event = threading.Event()

    @classmethod
    def start(cls, config: NodeConfig) -> Node:
        global _current
        node = cls(config)
        node.name_lock.acquire()  # NameInUse: another process of this host runs the name
        _current = node
        config.data_dir.mkdir(parents=True, exist_ok=True)
        node.observations.attach()
        try:
            node.root = Supervisor.start(
                SupFlags("rest_for_one", intensity=3, period=10.0),
                node._children(),
                name=config.node,
            )
        except BaseException:
            node.observations.detach()
            node.name_lock.release()
            raise
        node._root_ready.set()
        return node

    def stop(self) -> None:
        """Stop every part in reverse order; the monitor writes nodes_running_at_shutdown."""
        global _current
        if self.root is not None and self.root.is_alive():
            self.root.stop()
        self.observations.detach()
        self.name_lock.release()
        stop_pool(if_unused=True)  # the PooledProcess worker threads, unless others use them
        if _current is self:
            _current = None

    @property
    def name(self) -> str:
        return self.config.node

    @property
    def monitor(self) -> Any:
        """The NodeMonitor's ref: `get_status()`, `subscribe(ref)` for NodeEvents."""
        return self.parts.monitor

    @property
    def kernel(self) -> NetKernel:
        return NetKernel.of(self.parts.kernel)

    @property
    def dist_address(self) -> str:
        return str(self.kernel.address)

    @property
    def control_address(self) -> str | None:
        if self.parts.control is None:
            return None
        host, port = self.parts.control.proxy().get_address().get(timeout=5)
        return f"{host}:{port}"

    @property
    def run_dir(self) -> Path:
        """Where this node's OsProcesses keep their default pid and log files (see
        rabbitry.node_files): under data_dir, so nodes sharing a host never share them."""
        return node_run_dir(self.config.data_dir)

    @property
    def metrics_address(self) -> str | None:
        """host:port of GET /metrics, or None without `metrics:`."""
        if self.parts.metrics is None:
            return None
        host, port = self.parts.metrics.proxy().get_address().get(timeout=5)
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def _running_monitor(self) -> ActorRef[NodeMonitor]:
        monitor = self.parts.monitor
        if monitor is None:
            raise LookupError(f"node {self.config.node}: the node monitor is not running")
        return monitor

    def status(self) -> dict[str, Any]:
        return self._running_monitor().proxy().get_status().get(timeout=10)

    def partition_modes(self) -> dict[str, Any]:
        """GET /cluster/modes: {member: its partition_handling} as the members' records said,
        and `differ`: whether they disagree (shown by `rabbitry cluster status`)."""
        modes = self._running_monitor().proxy().partition_modes().get(timeout=10)
        distinct = {json.dumps(mode, sort_keys=True) for mode in modes.values()}
        return {"modes": modes, "differ": len(distinct) > 1}

    def app_status(self) -> dict[str, Any]:
        """GET /app: whether the application tree runs, and the last error that kept it from
        starting (cleared by a successful start)."""
        state = "none"
        if self.config.tree is not None:
            state = "stopped"
            if self._root_ready.is_set():
                for child in self.root.proxy().which_children().get(timeout=10):
                    if child.id == "app":  # a paused node keeps the spec, without a process
                        state = _app_state(child.ref)
        tree = self.config.tree
        return {
            "node": self.config.node,
            "tree": str(tree.file) if tree is not None and tree.file else None,
            "state": state,
            "last_error": self._app_error,
        }

    def reload_tls(self) -> bool:
        """Re-read the `tls:` files now (SIGHUP): new connections use them, established ones
        stay up. True if they were reloaded; False without `tls:` or if they are unusable
        (logged; the previous ones stay in use)."""
        return self.tls is not None and self.tls.reload()

    # ------------------------------------------------------------------ the children

    def _children(self) -> list[ChildSpec]:
        config = self.config
        children = []
        if config.metrics is not None:
            children.append(ChildSpec("metrics", self._start_metrics, shutdown=5.0))
        children += [
            ChildSpec("net_kernel", self._start_kernel, shutdown=5.0),
            ChildSpec("node_monitor", self._start_monitor, shutdown=10.0),
        ]
        if config.mnesia is not None:
            children.append(ChildSpec("mnesia", self._start_mnesia, shutdown=10.0))
        children.append(ChildSpec("node_stats", self._start_stats, shutdown=2.0))
        if config.control is not None:
            children.append(ChildSpec("control", self._start_control, shutdown=5.0))
        if config.bus is not None:
            children.append(ChildSpec("gossip", self._start_gossip, shutdown=5.0))
        # the singletons' leases: before app, whose singleton guards register with it
        children.append(ChildSpec("singletons", self._start_singletons, shutdown=5.0))
        if config.tree is not None and not self._app_held:
            children.append(self._app_spec())
        children.append(ChildSpec("observer", self._start_observer, shutdown=2.0))
        return children

    @property
    def _app_held(self) -> bool:
        """Under pause_minority and pause_if_all_down the application is not started with
        the node: the node monitor starts it once this node may run (see NodeMonitorCore's
        hold_app), so that it never runs, not even for a start-up moment, on a minority. An
        ephemeral node holds it in every mode, until it reaches the core it follows."""
        return self.config.partition_handling.pauses or self.config.role == "ephemeral"

    def _app_spec(self) -> ChildSpec:
        tree = self.config.tree
        assert tree is not None
        children = with_run_dir(tree.children, self.run_dir)
        children = with_singletons(children, lambda: self.parts.singletons, self.run_dir)
        return ChildSpec(
            "app", (Supervisor, (tree.flags, children), {"name": "app"}), type="supervisor"
        )

    def _start_singletons(self) -> Any:
        config = self.config
        self.parts.singletons = SingletonService.start_link(
            self.parts.kernel,
            self.parts.monitor,
            config.data_dir,
            lease=2 * config.net_ticktime,
            role=config.role,
        )
        return self.parts.singletons

    def _start_metrics(self) -> Any:
        self.parts.metrics = MetricsServer.start_link(self)
        return self.parts.metrics

    def _start_observer(self) -> Any:
        return NodeObserver.start_link(self.parts.kernel, self.parts.monitor, self.observations)

    def _start_kernel(self) -> Any:
        config = self.config
        peers = {**read_addresses(config.data_dir), **{n: str(a) for n, a in config.peers.items()}}
        self.parts.kernel = NetKernel.start_link(
            config.node,
            str(config.listen),
            config.cookie,
            peers,
            net_ticktime=config.net_ticktime,
            tls=self.tls,
            on_refused=self._refused,
            role=config.role,
            role_check=self._role_check if config.role == "core" else None,
            **self._kernel_options(),
        )
        kernel = NetKernel.of(self.parts.kernel)
        self.name_lock.set_address(str(kernel.address))
        kernel.names.on_refusal = lambda reason, node, detail: self.observations.note(
            "refused", node, f"{reason}: {detail}"
        )
        return self.parts.kernel

    def _kernel_options(self) -> dict[str, Any]:
        """Extra NetKernel options; a swarm member shares its process's I/O loop."""
        return {}

    def wait_first_contact(self, timeout: float | None = None) -> None:
        """Before saying READY: wait until a peer has either let us in or refused us (our
        name taken, our role in conflict), or until no first attempt is left, at most about
        one connect attempt. A duplicate must never say READY (it did, then joined: issue 24)."""
        kernel = self.kernel
        if timeout is None:
            timeout = kernel.connect_timeout + kernel.names.timeout + 0.5
        began = time.monotonic()
        deadline = began + timeout
        while not self.fatal_event.is_set() and time.monotonic() < deadline:
            if kernel.nodes():
                return
            if not kernel.connecting() and time.monotonic() - began > 0.2:
                return  # every first attempt is over (the peers are not up yet)
            self.fatal_event.wait(0.02)

    def _refused(self, _reason: str, line: str) -> None:
        """A peer refused us for good: a running node holds our name, or the cluster holds
        it under the other role (dist thread). `line` says which; we exit 2."""
        self.fatal = line
        self.fatal_event.set()

    def _role_check(self, peer: str, role: str) -> str:
        """On a core node: why `peer` may not connect as `role` ("" if it may). A name the
        cluster files hold as core cannot attach as ephemeral, and an ephemeral member
        cannot come back as core, until it is forgotten (DESIGN)."""
        monitor = self.parts.monitor
        if monitor is None:
            return ""  # starting: the monitor has not read the cluster files yet
        try:
            return monitor.proxy().role_conflict(peer, role).get(timeout=2)
        except (ActorDeadError, Timeout):
            return ""

    def _start_monitor(self) -> Any:
        config = self.config
        self.parts.monitor = NodeMonitor.start_link(
            self.parts.kernel,
            config.data_dir,
            config.partition_handling,
            initial_nodes=config.cluster_nodes,
            app=AppControl(pause=self._pause_app, resume=self._resume_app),
            hold_app=self._app_held,
            role=config.role,
            forget_ephemeral_after=config.forget_ephemeral_after,
        )
        return self.parts.monitor

    def _start_mnesia(self) -> Any:
        from mnesia_like import Mnesia, Schema

        config = self.config
        options = config.mnesia
        assert options is not None
        extra = options.extra_db_nodes
        if extra is None:  # as RabbitMQ does: the cluster's other nodes
            extra = tuple(n for n in config.cluster_nodes if n != config.node)
        self.parts.mnesia = Mnesia.start_link(
            self.parts.kernel,
            config.data_dir / "mnesia",
            extra_db_nodes=list(extra),
            merge=options.merge_for(config.partition_handling),
            fsync=options.fsync,
            force_load=options.force_load,
            load_timeout=options.load_timeout,
            parallel_commit=options.parallel_commit,
        )
        monitor = self._running_monitor()

        def to_monitor(event: Any) -> None:  # runs on the store's thread: tell, never wait
            monitor.proxy().store_event(event.kind, event.node, event.detail)

        Schema(self.parts.mnesia).subscribe(to_monitor)  # the node monitor first
        return self.parts.mnesia

    @property
    def mnesia(self) -> Any:
        """The store's blocking API (mnesia_like.Schema); needs `mnesia:` in the config."""
        from mnesia_like import Schema

        if self.parts.mnesia is None:
            if self.config.role == "ephemeral":
                raise Conflict(
                    "this node is ephemeral: it holds no mnesia_like copies, neither disc nor "
                    "ram (it is forgotten when it goes); ask a core member's control API"
                )
            raise Conflict("this node runs no store: add `mnesia: {}` to its config")
        return Schema(self.parts.mnesia)

    def _start_stats(self) -> Any:
        return NodeStats.start_link(self.parts.monitor, self.config, self._app_weight)

    def _start_gossip(self) -> Any:
        config = self.config
        assert config.bus is not None
        self.parts.gossip = Gossip.start_link(
            config.bus,
            config.node,
            monitor=self.parts.monitor,
            exchange=config.gossip.exchange,
            # an ephemeral member (an executor) is a gossip client: it hears revokes and
            # results, and its hellos and proposals are served by the core (issue 26)
            client=config.role == "ephemeral",
            **config.gossip.core_options(),
        )
        self.parts.gossip.proxy().register_election_handler(ELECT_TOPIC, lambda _action: None)
        return self.parts.gossip

    def _start_control(self) -> Any:
        address = self.config.control
        assert address is not None
        routes = self.routes.table()  # rabbitry/control_routes.py
        ui = ManagementUI(self, routes)  # /ui/: the management page (docs/ui.md)
        routes[("POST", "/ui/token")] = ui.new_login
        self.parts.control = ControlServer.start_link(
            address.host,
            address.port,
            self.config.cookie,
            routes,
            tls=self.tls.https_server if self.tls is not None else None,
            web=ui,
        )
        return self.parts.control

    # ------------------------------------------------------------------ the application

    def _has_app_child(self) -> bool:
        if not self._root_ready.wait(60):
            raise RuntimeError(f"node {self.config.node}: the root supervisor did not start")
        return any(child.id == "app" for child in self.root.proxy().which_children().get())

    def _pause_app(self) -> None:
        try:
            if self.config.tree is not None and self._has_app_child():
                self.root.proxy().terminate_child("app").get()
        except ActorDeadError:
            if self.root.is_alive():
                raise
            # The node is stopping (its peers going down too made the monitor pause): the
            # root has ended, and it stopped the application first. Nothing is left to pause.

    def _resume_app(self) -> None:
        if self.config.tree is None:
            return
        try:
            if self._has_app_child():
                self.root.proxy().restart_child("app").get()
            else:  # held at boot: the first start
                self.root.proxy().start_child(self._app_spec()).get()
        except Exception as exc:  # the monitor logs it and retries; keep it for GET /app
            self._app_error = {"error": describe(exc), "at": time.time()}
            raise
        self._app_error = None

    def _app_weight(self) -> int:
        """Autoheal's weight: the application's running children (0 when paused)."""
        if self.config.tree is None or self.root is None:
            return 0
        # 1 s, not more: while the node stops, the root is busy stopping its children (this
        # asker, node_stats, among them: shutdown 2 s) and cannot answer. A longer wait made
        # node_stats miss its shutdown time and be killed (a shutdown_error at every stop).
        for child in self.root.proxy().which_children().get(timeout=1):
            if child.id == "app" and child.ref is not None and child.ref != "restarting":
                try:
                    return child.ref.proxy().count_children().get(timeout=1)["active"]
                except ActorDeadError:  # a pause stopped it between the two calls
                    return 0
        return 0


def wait_ready(node: Node, timeout: float = 30.0) -> None:
    """Return once the monitor answers (every part has started by then)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            node.status()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _app_state(ref: Any) -> str:
    """The app child's state from its ChildInfo ref: None is a stopped child (a paused node
    terminated it and keeps its spec), as OTP's `undefined` pid."""
    if ref is None:
        return "stopped"
    return "restarting" if ref == "restarting" else "running"
