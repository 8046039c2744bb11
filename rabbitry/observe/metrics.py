"""Prometheus metrics for one node: `metrics: 127.0.0.1:15692` serves GET /metrics.

A custom prometheus_client collector reads the node when scraped. It gathers its parts in
parallel within SCRAPE_BUDGET (see gather.py), so a scrape answers in about that time even
while peers hang; a part that did not answer leaves out only its own series, and
`rabbitry_scrape_part_up{part}` says which. Counters that must outlive a restart of the part
that feeds them (NodeDown events, supervisor restarts) come from the node's Observations.

Like rabbitmq_prometheus, the endpoint is node-local, read-only and needs no token. It binds
loopback unless the config names another address. The names are in docs/metrics.md.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder

from monitors.alarms import DISK, MEMORY
from monitors.httpd import HardenedHTTPServer, host_allowed
from rabbitry.observe.gather import Gathered, Gatherer
from rabbitry.observe.parts import node_parts
from supervisors import Process

log = logging.getLogger("rabbitry.metrics")

SCRAPE_BUDGET = 0.08  # seconds the parts get; the scrape answers within ~100 ms
CHILD_STATES = ("running", "restarting", "stopped")


def rabbitry_version() -> str:
    try:
        from importlib.metadata import version

        return version("rabbitry")
    except Exception:  # running from a checkout that is not installed
        return "unknown"


def cluster_name(members: list[str]) -> str:
    """The cluster's name for dashboards: its first core member by name, the same on every
    member that agrees on the membership (RabbitMQ names a cluster after a node, too)."""
    return min(members) if members else ""


class NodeCollector:
    """Reads one node's state at each scrape (a prometheus_client custom collector)."""

    def __init__(self, node: Any, budget: float = SCRAPE_BUDGET) -> None:
        self.node = node
        self.budget = budget
        self.gatherer = Gatherer(f"metrics-{node.name}")

    def describe(self) -> list[Metric]:
        return []  # no collect() at registration: the node may still be starting

    def collect(self) -> Iterator[Metric]:
        gathered = self.gatherer.gather(node_parts(self.node), self.budget)
        yield from self._identity(gathered)
        yield from self._cluster(gathered)
        yield from self._dist(gathered)
        yield from self._supervision(gathered)
        yield from self._gossip(gathered)
        yield from self._failover(gathered)
        yield from self._mnesia(gathered)
        yield from self._singletons(gathered)
        yield from self._scrape(gathered)

    # ------------------------------------------------------------------ families

    def _identity(self, gathered: Gathered) -> Iterator[Metric]:
        node = self.node
        identity = GaugeMetricFamily(
            "rabbitry_identity_info",
            "Always 1. Names this node and its cluster (the first core member by name); join "
            "other series to it on instance to label them by node and cluster.",
            labels=["rabbitry_node", "rabbitry_cluster"],
        )
        identity.add_metric([node.name, cluster_name(node.observations.members())], 1)
        yield identity
        build = GaugeMetricFamily(
            "rabbitry_build_info",
            "Always 1. The rabbitry version this node runs.",
            labels=["version"],
        )
        build.add_metric([rabbitry_version()], 1)
        yield build
        uptime = GaugeMetricFamily("rabbitry_uptime_seconds", "Seconds since this node started.")
        uptime.add_metric([], time.time() - node.observations.started)
        yield uptime

    def _cluster(self, gathered: Gathered) -> Iterator[Metric]:
        status = gathered.get("node_monitor")
        if status is None:
            return
        members = GaugeMetricFamily(
            "rabbitry_cluster_members",
            "Members of the cluster as this node knows them: role core (disc members that "
            "count for majorities) or ephemeral (attached members, such as Spark executors, "
            "that this node sees up).",
            labels=["role"],
        )
        members.add_metric(["core"], len(status.get("all", [])))
        members.add_metric(["ephemeral"], len(status.get("ephemeral", [])))
        yield members
        running = GaugeMetricFamily(
            "rabbitry_cluster_running_members",
            "Core members this node sees with their application running (itself included "
            "unless paused). Below the core member count means some are down, paused or cut off.",
        )
        running.add_metric([], len(status.get("running", [])))
        yield running
        paused = GaugeMetricFamily(
            "rabbitry_node_paused",
            "1 while this node's application is paused (pause_minority, pause_if_all_down or an "
            "autoheal loser); the node itself still runs and rejoins when it may.",
        )
        paused.add_metric([], 1 if status.get("paused") else 0)
        yield paused
        partitions = GaugeMetricFamily(
            "rabbitry_partitions",
            "Peers this node is partitioned from (each side saw the other down while both "
            "ran). Anything above 0 is a network partition.",
        )
        partitions.add_metric([], len(status.get("partitions", [])))
        yield partitions
        mine = set(status.get("alarms", {}).get(self.node.name, []))
        for resource, name, text in (
            (
                MEMORY,
                "rabbitry_alarms_memory_used_watermark",
                "1 while this node's memory alarm is set (used memory above "
                "alarms.memory_high_watermark), as RabbitMQ's alarm of that name.",
            ),
            (
                DISK,
                "rabbitry_alarms_free_disk_space_watermark",
                "1 while this node's disk alarm is set (free disk below alarms.disk_free_limit), "
                "as RabbitMQ's alarm of that name.",
            ),
        ):
            alarm = GaugeMetricFamily(name, text)
            alarm.add_metric([], 1 if resource in mine else 0)
            yield alarm
        cluster_alarms = GaugeMetricFamily(
            "rabbitry_cluster_alarms",
            "Resource alarms set anywhere in the cluster as far as this node knows, by node "
            "and resource (memory or disk).",
            labels=["node", "resource"],
        )
        for node, resources in sorted(status.get("alarms", {}).items()):
            for resource in resources:
                cluster_alarms.add_metric([node, resource], 1)
        yield cluster_alarms

    def _dist(self, gathered: Gathered) -> Iterator[Metric]:
        up, known, downs = self.node.observations.dist()
        status = gathered.get("node_monitor") or {}
        peers = (known | set(status.get("all", [])) | up) - {self.node.name}
        peer_up = GaugeMetricFamily(
            "rabbitry_dist_peer_up",
            "1 while this node's dist connection to the peer is up (authenticated and "
            "ticking), 0 for a known member or peer that is not connected.",
            labels=["peer"],
        )
        for peer in sorted(peers):
            peer_up.add_metric([peer], 1 if peer in up else 0)
        yield peer_up
        node_down = CounterMetricFamily(
            "rabbitry_dist_node_down",
            "Times the dist connection to the peer went down, by reason: net_tick_timeout "
            "(silent for net_ticktime: cut off or hung), connection_closed (it died or closed), "
            "disconnect (this node dropped it), connection_setup_failed.",
            labels=["peer", "reason"],
        )
        for (peer, reason), count in sorted(downs.items()):
            node_down.add_metric([peer, reason], count)
        yield node_down
        refused = CounterMetricFamily(
            "rabbitry_dist_refused",
            "Connections refused for a name or role conflict, either side, by reason: "
            "name_in_use (a second process claimed a running node's name), role (a core "
            "name attached as ephemeral, or the other way round).",
            labels=["reason"],
        )
        with contextlib.suppress(ValueError, AttributeError):  # no kernel (yet, or any more)
            for reason, count in sorted(self.node.kernel.names.counts().items()):
                refused.add_metric([reason], count)
        yield refused
        dist = gathered.get("dist")
        if dist is not None:
            ticktime = GaugeMetricFamily(
                "rabbitry_net_ticktime_seconds",
                "This node's net_ticktime: a peer silent this long is taken as down. Members "
                "whose values differ can see false partitions.",
            )
            ticktime.add_metric([], dist["net_ticktime"])
            yield ticktime

    def _supervision(self, gathered: Gathered) -> Iterator[Metric]:
        restarts, gave_up = self.node.observations.supervisors()
        restart_family = CounterMetricFamily(
            "rabbitry_supervisor_restarts",
            "Times a supervisor restarted a child since the node started (a crash, or a "
            "sibling's crash under one_for_all or rest_for_one).",
            labels=["supervisor", "child"],
        )
        for (supervisor, child), count in sorted(restarts.items()):
            restart_family.add_metric([supervisor, child], count)
        yield restart_family
        gave_up_family = CounterMetricFamily(
            "rabbitry_supervisor_gave_up",
            "Times a supervisor reached its restart intensity and gave up (stopped its "
            "children and exited): its parent restarts it, or the node goes down.",
            labels=["supervisor"],
        )
        for supervisor, count in sorted(gave_up.items()):
            gave_up_family.add_metric([supervisor], count)
        yield gave_up_family
        tree = gathered.get("supervision")
        if tree is None:
            return
        children = GaugeMetricFamily(
            "rabbitry_supervisor_children",
            "A supervisor's children by state: running, restarting (a restart failed and is "
            "being retried) or stopped (terminated, or paused with the application).",
            labels=["supervisor", "state"],
        )
        for sup in tree:
            if not sup["answered"]:
                continue
            counts = dict.fromkeys(CHILD_STATES, 0)
            for child in sup["children"]:
                counts[child["state"]] += 1
            for state in CHILD_STATES:
                children.add_metric([sup["supervisor"], state], counts[state])
        yield children

    def _gossip(self, gathered: Gathered) -> Iterator[Metric]:
        gossip = gathered.get("gossip")
        if gossip is None:
            return
        alive = GaugeMetricFamily(
            "rabbitry_gossip_alive_workers",
            "Other nodes this node's gossip sees alive on the bus: each sent a heartbeat "
            "within the last 2 heartbeat intervals.",
        )
        alive.add_metric([], len(gossip.get("alive", [])))
        yield alive
        clock = GaugeMetricFamily(
            "rabbitry_gossip_clock", "This node's Lamport clock (gossip's logical time)."
        )
        clock.add_metric([], gossip.get("clock", 0))
        yield clock
        revoked = GaugeMetricFamily(
            "rabbitry_gossip_revoked", "Task ids in this node's revoked set (bounded, expiring)."
        )
        revoked.add_metric([], gossip.get("revoked", 0))
        yield revoked
        connected = GaugeMetricFamily(
            "rabbitry_gossip_bus_connected", "1 while gossip's connection to the bus is up."
        )
        connected.add_metric([], 1 if gossip.get("connected") else 0)
        yield connected

    def _failover(self, gathered: Gathered) -> Iterator[Metric]:
        statuses = gathered.get("failover")
        if statuses is None:
            return
        self.node.observations.see_failover(s for s in statuses if s["role"] == "server")
        master = GaugeMetricFamily(
            "rabbitry_failover_master_info",
            "Always 1, labelled with the Redis master that a failover server (RCS) or client "
            "(RCC) on this node names now; absent where none runs, or while none is known.",
            labels=["master"],
        )
        masters = {s.get("redis_master") or s.get("master") for s in statuses}
        for name in sorted(m for m in masters if m):
            master.add_metric([name], 1)
        yield master
        switches = CounterMetricFamily(
            "rabbitry_failover_switches",
            "Redis master switches seen by the failover parts on this node: completed by a "
            "server (RCS), or a client's master file moving to a new master.",
        )
        switches.add_metric([], sum(int(s.get("switches", 0)) for s in statuses))
        yield switches
        servers = [s for s in statuses if s["role"] == "server"]
        if not servers:
            return
        available = GaugeMetricFamily(
            "rabbitry_failover_master_available",
            "1 while the failover server's last check found its Redis master reachable.",
            labels=["system"],
        )
        active = GaugeMetricFamily(
            "rabbitry_failover_server_active",
            "1 while this failover server is the active one for its system.",
            labels=["system"],
        )
        took = GaugeMetricFamily(
            "rabbitry_failover_last_switch_seconds",
            "How long the last master switch took, from the master found unavailable to "
            "the new master set.",
            labels=["system"],
        )
        for s in servers:
            system = str(s.get("system"))
            available.add_metric([system], 1 if s.get("redis_master_available") else 0)
            active.add_metric([system], 1 if s.get("active") else 0)
            if s.get("last_switch"):
                took.add_metric([system], float(s["last_switch"].get("took", 0.0)))
        yield available
        yield active
        yield took

    def _mnesia(self, gathered: Gathered) -> Iterator[Metric]:
        store = gathered.get("mnesia")
        if store is None:
            return
        running = GaugeMetricFamily(
            "rabbitry_mnesia_running_db_nodes",
            "Nodes whose mnesia_like store this node reaches and runs with, itself included.",
        )
        running.add_metric([], len(store.get("running_db_nodes", [])))
        yield running
        copies = GaugeMetricFamily(
            "rabbitry_mnesia_table_active_copies",
            "Copies of a table that this node can read from and write to now.",
            labels=["table"],
        )
        for table, info in sorted(store.get("tables", {}).items()):
            copies.add_metric([table], len(info.get("active", [])))
        yield copies

    def _singletons(self, gathered: Gathered) -> Iterator[Metric]:
        st = gathered.get("singletons")
        if st is None:
            return
        holder = GaugeMetricFamily(
            "rabbitry_singleton_holder_info",
            "1 for each cluster singleton, labelled with the node that holds its lease now "
            "(as this node's lease acceptor knows; empty while none holds it).",
            labels=["singleton", "holder"],
        )
        here = GaugeMetricFamily(
            "rabbitry_singleton_held",
            "1 while this node runs the singleton's instance.",
            labels=["singleton"],
        )
        token = GaugeMetricFamily(
            "rabbitry_singleton_token",
            "The fencing token of the singleton's current instance (it only grows).",
            labels=["singleton"],
        )
        held_here = set(st.get("held_here", []))
        for name, entry in sorted(st.get("singletons", {}).items()):
            holder.add_metric([name, entry.get("node") or ""], 1)
            here.add_metric([name], 1 if name in held_here else 0)
            if entry.get("token") is not None:
                token.add_metric([name], entry["token"])
        yield holder
        yield here
        yield token
        moves = CounterMetricFamily(
            "rabbitry_singleton_starts",
            "Singleton instances this node started (each start after a move, a handover or a "
            "lost lease).",
        )
        moves.add_metric([], st.get("moves", 0))
        yield moves

    def _scrape(self, gathered: Gathered) -> Iterator[Metric]:
        part_up = GaugeMetricFamily(
            "rabbitry_scrape_part_up",
            "1 if the part answered within the scrape's budget; 0 if not, and then that "
            "part's series are missing from this scrape (the rest are there).",
            labels=["part"],
        )
        for part in sorted(set(gathered.results) | set(gathered.missing)):
            part_up.add_metric([part], 1 if part in gathered.results else 0)
        yield part_up
        took = GaugeMetricFamily(
            "rabbitry_scrape_gather_seconds",
            "How long this scrape waited for the node's parts.",
        )
        took.add_metric([], gathered.took)
        yield took


def metrics_registry(node: Any) -> tuple[CollectorRegistry, NodeCollector]:
    """A registry with the node's collector and the process's (memory, CPU, fds)."""
    registry = CollectorRegistry(auto_describe=False)
    collector = NodeCollector(node)
    registry.register(collector)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry, collector


def bind_metrics_server(
    host: str, port: int, handler: type, tls: Callable[[], Any] | None = None
) -> HardenedHTTPServer:
    """Create the listening HTTP(S) server (monitors.httpd: timeouts, bounded connections),
    the one place its socket is made. Raises OSError if the address is taken or not this
    host's."""
    return HardenedHTTPServer((host, port), handler, tls=tls, what="metrics")


def _make_handler(registry: CollectorRegistry, allowed_hosts: frozenset[str] | None = None) -> type:
    """`allowed_hosts`: on plain HTTP, the Host names served (DNS rebinding: a page
    elsewhere whose name resolves to us must not read the metrics); None: any."""

    class _Handler(BaseHTTPRequestHandler):
        server_version = "rabbitry-metrics"

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if allowed_hosts is not None and not host_allowed(
                self.headers.get("Host"), allowed_hosts
            ):
                self._send(421, b"unknown Host: use the metrics listener's address\n", "text/plain")
                return
            if path == "/metrics":
                encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
                try:
                    body = encoder(registry)
                except Exception as exc:  # a collector bug: say so, do not kill the thread
                    log.exception("metrics: a scrape failed")
                    self._send(500, f"scrape failed: {exc}\n".encode(), "text/plain")
                    return
                self._send(200, body, content_type)
            elif path == "/":
                page = b"rabbitry node metrics: GET /metrics (Prometheus text format)\n"
                self._send(200, page, "text/plain; charset=utf-8")
            else:
                self._send(404, b"not found: the metrics are at /metrics\n", "text/plain")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug("%s %s", self.address_string(), fmt % args)

    return _Handler


class MetricsServer(Process):
    """The node's `metrics` child: serves GET /metrics while it lives."""

    def __init__(self, node: Any) -> None:
        super().__init__()
        self._node = node
        self._server: HardenedHTTPServer | None = None
        self._collector: NodeCollector | None = None

    def on_start(self) -> None:
        config = self._node.config
        address = config.metrics
        registry, self._collector = metrics_registry(self._node)
        try:
            tls = self._node.tls.https_server if self._node.tls is not None else None
            allowed = None
            if tls is None:
                node_host = config.node.rpartition("@")[2]
                allowed = frozenset(
                    {address.host.lower(), node_host.lower(), "localhost", "127.0.0.1", "::1"}
                )
            server = bind_metrics_server(
                address.host, address.port, _make_handler(registry, allowed), tls
            )
        except OSError as exc:
            from rabbitry.node_config import NodeConfigError

            self._collector.gatherer.close()
            why = exc.strerror or str(exc)
            raise NodeConfigError(
                str(config.file or "<node config>"),
                "metrics",
                "a free address of this host",
                problem=f"cannot listen on {address}: {why}; expected a free address of this "
                "host (is another node or rabbitmq_prometheus using it?)",
            ) from None
        self._server = server
        threading.Thread(
            target=server.serve_forever, name=f"metrics-{address.port}", daemon=True
        ).start()
        scheme = "https" if self._node.tls is not None else "http"
        log.info("metrics listening on %s://%s:%s/metrics", scheme, *server.server_address[:2])

    def get_address(self) -> tuple[str, int]:
        """The bound (host, port); port 0 in the config becomes the real port here."""
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def on_stop(self) -> None:
        self._close()

    def on_failure(self, *_exc_info: Any) -> None:
        self._close()

    def on_kill(self) -> None:
        self._close()

    def _close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._collector is not None:
            with contextlib.suppress(Exception):
                self._collector.gatherer.close()
