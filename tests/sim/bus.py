"""A simulated broker bus (monitors.bus semantics) for the deterministic simulator.

What it models, and why:

- Every node has a client session with the broker and an exclusive queue that lives as long as
  the session (Celery's event queues are exclusive/auto-delete; so are ours). A message goes
  to the queues that exist when the broker routes it; a node without a session gets nothing
  and nothing waits for it.
- Delivery takes a latency drawn from the sim's seeded RNG, and is FIFO per (publisher,
  receiver, kind) where kind is broadcast or direct: that is all monitors.bus promises. On
  Redis, broadcasts (PUBLISH) and direct sends (a list) travel apart; on AMQP they go to
  different queues. So a direct reply may overtake a broadcast sent before it, and the
  protocols must not depend on the order across the two kinds.
- `publish` broadcasts to every node with a session (the publisher too, unless echo=False,
  as monitors.bus echoes by default); `send` goes to one node's queue.
- `cut(node)`: the node loses the broker. From that instant nothing it publishes is routed
  and nothing reaches it (in-flight deliveries to it are lost with its queue). Its client
  notices after a detection delay (`detect`) and reports `disconnected` to the hosted core;
  until then the core believes it is connected and what it sends is lost, as on a real TCP
  connection that died silently. `restore(node)` lets it reconnect after `reconnect` s
  (a new session and queue), and the core gets `connected`.
- A crashed node's session ends; a booted node starts a session at once (if not cut).
- A node with `patterns` set (a gossip client) gets only the messages whose routing key
  matches one of them, broadcast or direct, as the Redis and AMQP buses route by pattern; the
  others get everything. `stats["delivered"]` counts what the broker handed over.
- Bodies are copied through JSON (network.wire_copy), as the wire does.

The bus does not call cores itself: a core kind registers a `deliver` callback and a `state`
callback per core name, so the same bus can carry any bus-speaking core (gossip, failover).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from monitors.bus.topic import topic_matches
from tests.sim.network import wire_copy

if TYPE_CHECKING:
    from tests.sim.engine import EffectHandler, Sim, SimNode


@dataclass(frozen=True)
class BusMsg:
    """A message as the broker delivers it (monitors.bus.BusMessage, reduced)."""

    routing_key: str
    body: dict[str, Any]
    sender: str
    direct: bool


Deliver = Callable[["Sim", "SimNode", str, BusMsg], None]
StateChange = Callable[["Sim", "SimNode", str, bool], None]


@dataclass
class _Client:
    deliver: Deliver
    state: StateChange


class SimBus:
    """One broker shared by every node of a Sim. See the module docstring."""

    def __init__(
        self,
        sim: Sim,
        *,
        latency: tuple[float, float] = (0.001, 0.010),
        detect: tuple[float, float] = (0.05, 0.5),
        reconnect: tuple[float, float] = (0.05, 0.5),
        echo: bool = True,
    ) -> None:
        self.sim = sim
        self.latency = latency
        self.detect = detect
        self.reconnect = reconnect
        self.echo = echo
        self.cut_nodes: set[str] = set()
        self.up: dict[str, bool] = {}  # node -> has a session (its client is connected)
        self.session: dict[str, int] = {}  # node -> session number (a new queue each time)
        self.fifo: dict[tuple[str, str, bool], float] = {}
        self.clients: dict[str, _Client] = {}
        self.patterns: dict[str, tuple[str, ...]] = {}  # node -> its patterns, if limited
        self.delivered: dict[str, int] = {}  # routing key -> messages handed to a core
        self.stats = {"published": 0, "sent": 0, "delivered": 0, "dropped": 0}

    # ---- wiring ------------------------------------------------------------------------------

    def register(self, cname: str, deliver: Deliver, state: StateChange) -> None:
        """Cores registered as `cname` get messages through `deliver` and connection changes
        through `state`."""
        self.clients[cname] = _Client(deliver, state)

    def handlers(self) -> dict[str, EffectHandler]:
        """Effect handlers for a CoreKind: Publish(routing_key, body), Direct(node, rk, body)."""
        return {"Publish": self._eff_publish, "Direct": self._eff_direct}

    def node_booted(self, node: SimNode) -> bool:
        """Start the node's session (call from CoreKind.build); True if it is connected."""
        self.session[node.name] = self.session.get(node.name, 0) + 1
        self.up[node.name] = node.name not in self.cut_nodes
        return self.up[node.name]

    def connected(self, name: str) -> bool:
        """The broker routes to and from `name` right now (ground truth, not the client's
        belief)."""
        node = self.sim.nodes[name]
        return node.alive and self.up.get(name, False) and name not in self.cut_nodes

    # ---- faults ------------------------------------------------------------------------------

    def cut(self, name: str) -> None:
        if name in self.cut_nodes:
            return
        self.cut_nodes.add(name)
        self.sim.record(None, "bus_cut", name)
        node = self.sim.nodes[name]
        if node.alive and self.up.get(name):
            delay = self.sim.rng.uniform(*self.detect)
            self.sim.post(node, delay, self._detect_down, node, self.session[name])

    def restore(self, name: str) -> None:
        if name not in self.cut_nodes:
            return
        self.cut_nodes.discard(name)
        self.sim.record(None, "bus_restore", name)
        node = self.sim.nodes[name]
        if node.alive and not self.up.get(name):
            self._schedule_reconnect(node)

    def _schedule_reconnect(self, node: SimNode) -> None:
        delay = self.sim.rng.uniform(*self.reconnect)
        self.sim.post(node, delay, self._reconnect, node)

    def _detect_down(self, node: SimNode, session: int) -> None:
        if self.session.get(node.name) != session or not self.up.get(node.name):
            return
        self.up[node.name] = False
        self.session[node.name] += 1  # the queue is gone with the session
        self._notify(node, False)
        if node.name not in self.cut_nodes:  # restored before we noticed: reconnect at once
            self._schedule_reconnect(node)

    def _reconnect(self, node: SimNode) -> None:
        if node.name in self.cut_nodes or self.up.get(node.name):
            return
        self.up[node.name] = True
        self.session[node.name] += 1
        self._notify(node, True)

    def _notify(self, node: SimNode, up: bool) -> None:
        self.sim.record(node, "bus_up" if up else "bus_down", "")
        for cname, client in self.clients.items():
            if cname in node.cores:
                client.state(self.sim, node, cname, up)

    # ---- routing -----------------------------------------------------------------------------

    def _routable_from(self, name: str) -> bool:
        return self.up.get(name, False) and name not in self.cut_nodes

    def _eff_publish(self, sim: Sim, node: SimNode, cname: str, eff: Any) -> None:
        if not self._routable_from(node.name):
            self.stats["dropped"] += 1
            sim.trace.append((sim.now, node.name, "bus_lost", eff.routing_key))
            return
        self.stats["published"] += 1
        msg = BusMsg(eff.routing_key, wire_copy(eff.body), node.name, False)
        for dst in sim.nodes.values():
            if dst is node and not self.echo:
                continue
            self._route(dst, cname, msg)

    def _eff_direct(self, sim: Sim, node: SimNode, cname: str, eff: Any) -> None:
        dst = sim.nodes.get(eff.node)
        if dst is None or not self._routable_from(node.name):
            self.stats["dropped"] += 1
            sim.trace.append((sim.now, node.name, "bus_lost", eff.routing_key))
            return
        self.stats["sent"] += 1
        self._route(dst, cname, BusMsg(eff.routing_key, wire_copy(eff.body), node.name, True))

    def _route(self, dst: SimNode, cname: str, msg: BusMsg) -> None:
        patterns = self.patterns.get(dst.name)
        if patterns is not None and not any(topic_matches(p, msg.routing_key) for p in patterns):
            return  # not bound: the broker never routes it there
        if not dst.alive or not self._routable_from(dst.name):
            self.stats["dropped"] += 1
            return  # no queue to put it in
        sim = self.sim
        key = (msg.sender, dst.name, msg.direct)
        t = max(sim.now + sim.rng.uniform(*self.latency), self.fifo.get(key, 0.0))
        self.fifo[key] = t
        args = (dst, self.session[dst.name], cname, msg)
        sim._push(t, sim._node_event, (dst, dst.incarnation, self._arrive, args))

    def _arrive(self, dst: SimNode, session: int, cname: str, msg: BusMsg) -> None:
        if self.session.get(dst.name) != session or dst.name in self.cut_nodes:
            self.stats["dropped"] += 1
            return  # its queue went away with the session
        client = self.clients.get(cname)
        if client is None or cname not in dst.cores:
            return
        self.stats["delivered"] += 1
        self.delivered[msg.routing_key] = self.delivered.get(msg.routing_key, 0) + 1
        client.deliver(self.sim, dst, cname, msg)
