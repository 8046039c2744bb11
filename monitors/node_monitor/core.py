"""NodeMonitorCore: rabbit_node_monitor (RabbitMQ 4.2) as a pure core, with rabbit_autoheal.

Fed events with the current time, it returns effects (monitors/effects.py and
node_monitor/effects.py); the actor shell or the simulator performs them. See
docs/node_monitor.md for the behaviour per mode and the message table, and docs/cores.md for
the interface.

NodeMonitorCore is the one entry point, over parts in their own modules that share one state
object (the facade is a MonitorState and hands itself to each part, typed as MonitorState).
Partials and EphemeralMembers see only that state, never the facade or each other; a part
only uses the parts above it (import-linter holds the order):

    state.py      MonitorState: members, connections, GUIDs, timers; messages, records, files,
                  members arriving, leaving and restarting, the modes peers report
    partial.py    Partials: check_partial_partition, cuts, heal settling, views, the parts
    members.py    EphemeralMembers: ephemeral members attaching, told, forgotten
    autoheal.py   Autoheal: rabbit_autoheal's state machine
    decision.py   pause and resume effects, timer bookkeeping

This module routes (an explicit table: message type -> handler; a type with no handler is
logged and dropped) and decides (`_settle`, `_mode_pause`, `_decide`) after every event.

Decisions worth knowing before reading the code:
- Liveness is the dist connection (RabbitMQ: `nodes()`), not the application: a paused node is
  still "up", "else we would go down and never come back" (rabbit_node_monitor).
- `running` is the nodes whose application runs (RabbitMQ's running_nodes): a peer enters it by
  node_up/announce with running=true, and leaves it on app_down or nodedown.
- The pause decision is a function of the current state, recomputed after every event and
  timer (`_settle`), never a process that can be busy (RabbitMQ #2175, #8110).
- Besides RabbitMQ's own messages, nodes gossip views (who they can see, views.py), so that
  every node resolves a partial partition the same way (partitions.decompose).
- Ephemeral members (role: ephemeral, their own core in ephemeral.py) are never members here:
  they stay out of all/disc/running, views, majorities, autoheal and the cluster files, so they
  cannot change a decision. A core node learns the role from the ephemeral node's node_up,
  answers it with its record and the member list (and again whenever either changes), never
  connects to it, and forgets it when it leaves (telling the other core nodes) or once its
  link has been down for `forget_ephemeral_after` seconds.
- A heal resumes once (issue 15). While a heal brings links back one at a time, the cluster
  passes through partial partitions, and RabbitMQ's rules (resume as soon as a majority is
  reachable; pause when a partial partition is confirmed) made a node resume, pause and
  resume within a second: its connect attempt to the last peer had begun during the cut and
  was still waiting. The rule, asymmetric on purpose:
  * a paused node resumes only into a fully-connected part that may run (its part of
    partitions.decompose), and only once it holds the current view of every peer it reaches
    (`Partials.resume_check`), not merely when it reaches a majority;
  * a running node does not pause for a partial partition over a link that may be coming
    back: for `heal_settle` (2 ping rounds + 0.5 s) after a nodeup, the members still down
    count as linked to it, a partial_partition about them is put off and then checked
    afresh, and a peer whose view has not arrived since its nodeup counts as linked too;
  * a partial-partition pause and a resume are held `decision_hold` (0.25 s) and taken only
    if the answer stays the same: nodes that come back together decide on views a message
    round trip apart (two overlapping cliques, each best to one of them; a view from before
    a node's own pause). Pauses by the reachable count are never held.
  The running nodes then form a clique that only grows as links return, so no running node
  pauses, and each paused node resumes once, when its last link into that clique is back.
  tests/sim/heal.py checks it on schedules that heal link by link.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from monitors.effects import CancelTimer, Connect, Disconnect, Log
from monitors.node_monitor import autoheal as ah
from monitors.node_monitor import decision
from monitors.node_monitor.config import PartitionHandling
from monitors.node_monitor.effects import NodeMonitorEffect, Notify, PauseApp
from monitors.node_monitor.ephemeral import ROLE_CORE, ROLE_EPHEMERAL
from monitors.node_monitor.members import EphemeralMembers
from monitors.node_monitor.messages import MAX_LIST, MAX_NAME, problem
from monitors.node_monitor.partial import Partials
from monitors.node_monitor.partitions import part_of
from monitors.node_monitor.state import (
    CUT_TIMER,
    FORGET_TIMER,
    TIMER_HEAL_SETTLE,
    TIMER_HOLD,
    TIMER_KEEPALIVE,
    TIMER_PAUSE_CHECK,
    TIMER_PING,
    TIMER_STARTUP,
    MonitorState,
)
from monitors.node_monitor.status import ClusterStatus

__all__ = [
    "CUT_TIMER",
    "FORGET_TIMER",
    "TIMER_HEAL_SETTLE",
    "TIMER_HOLD",
    "TIMER_KEEPALIVE",
    "TIMER_PAUSE_CHECK",
    "TIMER_PING",
    "TIMER_STARTUP",
    "NodeMonitorCore",
]

Handler = Callable[[str, dict[str, Any], float], list[NodeMonitorEffect]]


class NodeMonitorCore(MonitorState):
    """One node's monitor. Every public method returns the effects to perform, in order."""

    def __init__(
        self,
        node: str,
        creation: int,
        status: ClusterStatus,
        config: PartitionHandling | None = None,
        *,
        down_ping_interval: float = 1.0,
        keepalive_interval: float = 10.0,
        disconnect_ban: float = 1.0,
        autoheal_timeout: float = 60.0,
        startup_grace: float | None = None,
        status_timeout: float = 5.0,
        disconnect_delay: float = 0.1,
        hold_app: bool = False,
        forget_ephemeral_after: float = 30.0,
        heal_settle: float | None = None,
        decision_hold: float = 0.25,
    ) -> None:
        """The options are MonitorState's (state.py says what each is for). They are spelled
        out here because callers (the simulator among them) read this signature."""
        super().__init__(
            node,
            creation,
            status,
            config,
            down_ping_interval=down_ping_interval,
            keepalive_interval=keepalive_interval,
            disconnect_ban=disconnect_ban,
            autoheal_timeout=autoheal_timeout,
            startup_grace=startup_grace,
            status_timeout=status_timeout,
            disconnect_delay=disconnect_delay,
            hold_app=hold_app,
            forget_ephemeral_after=forget_ephemeral_after,
            heal_settle=heal_settle,
            decision_hold=decision_hold,
        )
        self.partials = Partials(self)
        self.members = EphemeralMembers(self)
        self._routes = self._routing_table()

    # ======================================================================= queries

    @property
    def paused(self) -> bool:
        """Whether this node has decided to keep its application stopped."""
        return self._paused

    def status(self) -> dict[str, Any]:
        """`rabbitry cluster status --json`: exactly node, all, disc, running, partitions,
        paused and alarms ({node: [resources]}, cluster-wide as far as this node knows)."""
        return {
            "node": self.node,
            "all": sorted(self._all),
            "disc": sorted(self._disc),
            "running": sorted(self._running),
            "partitions": sorted(self._partitions),
            "paused": self._paused,
            "alarms": {n: sorted(r) for n, r in sorted(self._alarms.items()) if r},
            "ephemeral": sorted(set(self._eph) - set(self._eph_down)),
        }

    def ephemeral_members(self) -> tuple[list[str], list[str]]:
        """(up, down) ephemeral members this node knows (down ones until forgotten)."""
        return sorted(set(self._eph) - set(self._eph_down)), sorted(self._eph_down)

    def cluster_status(self) -> ClusterStatus:
        return ClusterStatus(
            all=tuple(self._all), disc=tuple(self._disc), running=tuple(self._running)
        )

    def partition_modes(self) -> dict[str, Any]:
        """The partition_handling each core member's records said (ours included): members
        that differ are reported (`rabbitry cluster status`, the management page), as
        RabbitMQ reports a differing net_ticktime. Each decides by its own, so they must agree."""
        modes = {n: mode for n, mode in self._modes.items() if n in self._all}
        return {self.node: self.config.to_config(), **modes}

    def role_conflict(self, node: str, role: str) -> str:
        """Why `node` may not connect as `role` ("" if it may): see members.py."""
        return self.members.role_conflict(node, role)

    # ======================================================================= events

    def start(self, now: float) -> list[NodeMonitorEffect]:
        """Boot: persist, connect to every member, arm the keepalive (notify_node_up follows
        on each nodeup)."""
        if self._started:
            return [Log.warning("node monitor: start called twice; ignored")]
        self._started = True
        out: list[NodeMonitorEffect] = [
            Log.info(
                "node monitor started",
                node=self.node,
                partition_handling=self.config.to_config(),
                members=sorted(self._all),
            )
        ]
        out += self._save()
        out += [Connect(n) for n in sorted(self._others())]
        if self.hold_app:
            # Held: the application starts only when this node is on the side that may run
            # (a strict majority, a preferred node), so that nothing it acknowledges at boot
            # lives on a minority. The PauseApp makes sure of "not running" whatever the
            # shell's state (a monitor restarted under a running application); _decide then
            # resumes at once if the mode allows.
            self._paused = True
            self._app = "stopping"
            out.append(PauseApp("held at boot until the partition mode allows it to run"))
        return out + self._settle(now)

    def nodeup(self, node: str, creation: int, now: float) -> list[NodeMonitorEffect]:
        """dist: a connection to `node` came up (net_kernel {nodeup, Node})."""
        if node == self.node:
            return []
        out: list[NodeMonitorEffect] = []
        prev = self._up.get(node)
        if prev is not None and prev != creation:
            # a new incarnation without a nodedown in between: the old one is gone
            out.append(Log.info("node restarted", node=node))
            out += self._forget_incarnation(node)
        self._up[node] = creation
        if node not in self._all:
            return [*out, Log.info("nodeup from a node that is not a member; ignored", node=node)]
        out.append(Log.info("node up", node=node))
        self._settling.pop(node, None)
        self._deferred.discard(node)
        if self.heal_settle > 0:
            for n in self._others() - set(self._up) - self._cut:
                self._settling[n] = now + self.heal_settle
            out += self.partials.arm_settle_timer(now)
        # A new peer is a new possible checker: members still down for us get checked again
        # from the next ping round (a nodedown that came while we saw nobody checked nothing).
        self._down_ticks.clear()
        # A node we had cut that reconnects stays in _cut until its view is in: _review_cuts
        # then keeps the link or cuts it again (it may have missed our disconnect request).
        out += self._refresh_view(skip=node)
        out += self._tell_joined(node)  # first, so that it takes our node_up as a member's
        out.append(self._send(node, "node_up", **self._peer_record(node)))
        out.append(self._send(node, "view", views=self._views.wire()))
        return out + self._settle(now)

    def nodedown(self, node: str, reason: str, now: float) -> list[NodeMonitorEffect]:
        """dist: the connection to `node` went (net_kernel {nodedown, Node, [{nodedown_reason, R}]})."""
        if node == self.node or node not in self._up:
            return []
        del self._up[node]
        out: list[NodeMonitorEffect] = []
        if CUT_TIMER + node in self._timers:
            self._timers.discard(CUT_TIMER + node)
            out.append(CancelTimer(CUT_TIMER + node))
        if node not in self._all:
            return out + self.members.ephemeral_down(node, now)
        out.append(Log.warning("node down", node=node, reason=reason))
        if reason != "disconnect" and node not in self._cut:
            out += self.partials.check_partial_partition(node)
        out += self._gone(node)
        return out + self._settle(now)

    def receive(self, sender: str, msg: Any, now: float) -> list[NodeMonitorEffect]:
        """A message for NodeMonitorCore.NAME from the monitor on `sender`."""
        bad = problem(msg)
        if bad:
            return [Log.warning("node monitor: dropped a bad message", sender=sender, problem=bad)]
        t = msg["t"]
        if sender != self.node and (
            sender in self._eph or msg.get("role") == ROLE_EPHEMERAL or sender in self._all
        ):
            if sender not in self._all:
                if msg.get("role") == ROLE_CORE:  # an ephemeral member cannot speak as core
                    return self.members.dropped_once(
                        sender, "a core message from an ephemeral member", msg
                    )
                # No decision pass (_settle): an ephemeral member never counts, so nothing it
                # says can change a core decision, and with N executors each keepalive would
                # otherwise cost a whole-cluster pass on every core node (issue 26).
                return self.members.on_ephemeral(sender, msg, now)
            if msg.get("role") == ROLE_EPHEMERAL:
                return self._not_the_member(sender, now)
        joining = t == "joined_cluster" and msg["node"] == sender
        if sender == self.node or (sender not in self._all and not joining):
            return [
                Log.warning("node monitor: dropped a message from a non-member", sender=sender, t=t)
            ]
        out: list[NodeMonitorEffect] = []
        c = msg.get("c")
        if c is not None and sender in self._guids and c != self._guids[sender]:
            if t not in ("node_up", "announce", "joined_cluster"):
                return [
                    Log.info(
                        "node monitor: dropped a message from an old incarnation",
                        sender=sender,
                        t=t,
                    )
                ]
            out.append(Log.info("node restarted", node=sender))
            out += self._forget_incarnation(sender)
            self._guids[sender] = c
        handler = self._routes.get(t)
        if handler is None:  # problem() knows the type, so this is a type we have no use for
            return [*out, Log.warning("node monitor: dropped a message of no use", t=t)]
        out += handler(sender, msg, now)
        return out + self._settle(now)

    def _not_the_member(self, sender: str, now: float) -> list[NodeMonitorEffect]:
        """A member's name speaks as ephemeral: this link is not that member (a role flip the
        dist layer let through). Logged once; the member counts as down until the next nodeup."""
        out = self.members.misnamed(sender)
        if self._up.pop(sender, None) is None:
            return out
        return out + self._forget_incarnation(sender) + self._settle(now)

    def timer(self, key: str, now: float, data: Any = None) -> list[NodeMonitorEffect]:
        """A SetTimer fired."""
        if key in (ah.TIMER_COLLECT, ah.TIMER_RESTART, ah.TIMER_WINNER):
            return self.autoheal.timer(key, self._ctx()) + self._settle(now)
        if key not in self._timers:
            return []  # cancelled, or fired twice: nothing to do
        self._timers.discard(key)
        out: list[NodeMonitorEffect] = []
        if key.startswith(FORGET_TIMER):
            return self.members.forget_ephemeral(key[len(FORGET_TIMER) :], "down too long", now)
        if key.startswith(CUT_TIMER):
            node = key[len(CUT_TIMER) :]
            if node in self._up and node in self._cut:
                out.append(Disconnect(node, self.disconnect_ban))
            return out + self._settle(now)
        if key in (TIMER_PING, TIMER_PAUSE_CHECK):
            # RabbitMQ's ping_down_nodes / the paused loop's ping_all
            down = sorted(self._others() - set(self._up) - self._cut)
            out += [Connect(n) for n in down]
            if key == TIMER_PING and not self._partial:
                out += self.partials.recheck_down(
                    [n for n in down if not self.partials.is_settling(n, now)]
                )
        elif key == TIMER_HEAL_SETTLE:
            out += self.partials.settled(now)
        elif key == TIMER_HOLD:
            pass  # _settle below decides again, now that the hold may be over
        elif key == TIMER_KEEPALIVE:
            # RabbitMQ casts keepalive to the alive nodes; ours also carries what node_up and
            # view said, so a message lost without the connection going is repaired.
            table = self._views.wire()  # every view we hold: relays can be lost too
            for n in sorted(self._connected()):
                out.append(self._send(n, "keepalive", views=table, **self._peer_record(n)))
            for n in sorted(set(self._eph) - set(self._eph_down)):
                out.append(self._send(n, "keepalive", **self.members.ephemeral_record(n)))
            self._want_autoheal = True  # a denied heal is retried at this steady pace
        elif key == TIMER_STARTUP:
            self._booting = False
            out.append(Log.info("start-up grace over: partition handling applies in full"))
        return out + self._settle(now)

    def app_stopped(self, now: float) -> list[NodeMonitorEffect]:
        """The shell finished a PauseApp: the application tree is down."""
        self._app = "stopped"
        self._running.discard(self.node)
        out: list[NodeMonitorEffect] = []
        # Our application state will resync from the others when it starts again, so nothing
        # diverged with us from here on: forget partitions and who we saw down.
        if self._partitions:
            out.append(
                Log.info(
                    "partitions forgotten: our application stopped",
                    partitions=sorted(self._partitions),
                )
            )
        self._partitions.clear()
        self._down_seen.clear()
        out += self._save()
        out += self._broadcast("app_down")
        return out + self._settle(now)

    def app_started(self, now: float) -> list[NodeMonitorEffect]:
        """The shell finished a ResumeApp: the application tree runs again (notify_node_up)."""
        self._app = "running"
        self._running.add(self.node)
        out = self._save()
        for n in sorted(self._connected()):
            out.append(self._send(n, "node_up", **self._peer_record(n)))
        self._want_autoheal = True
        return out + self._settle(now)

    def set_weight(self, n: int) -> None:
        """Autoheal weight of this node (by default its running application processes)."""
        self._weight = max(0, int(n))

    def joined_cluster(self, node: str, disc: bool, now: float) -> list[NodeMonitorEffect]:
        """`node` joined the cluster. Called on the joining node itself (node == this node) it
        tells the members, as rabbit_node_monitor:notify_joined_cluster does."""
        out: list[NodeMonitorEffect] = []
        if node == self.node:
            self._set_disc(node, disc)
            self._joining, self._left_from = self._others(), set()  # see state.py
            out += self._broadcast("joined_cluster", node=node, disc=disc)
        else:
            out += self._add_member(node, disc)
        return out + self._save() + self._settle(now)

    def left_cluster(self, node: str, now: float) -> list[NodeMonitorEffect]:
        """`node` left (or was forgotten); the members are told (notify_left_cluster). Called
        for this node itself, it resets to a cluster of one, as RabbitMQ's reset does."""
        out = self._broadcast("left_cluster", node=node, skip=node)
        if node == self.node:
            self._left_from = self._others()  # what its ephemeral members are told (members.py)
            for n in sorted(self._all - {self.node}):
                out += self._remove_member(n)
            out.append(Log.info("left the cluster: now a cluster of one"))
        elif node in self._all:
            out += self._remove_member(node)
        elif node in self._eph:  # `rabbitry cluster forget` of an ephemeral member: now
            creation = self._eph[node]
            out = self.members.forget_ephemeral(node, "forgotten by hand", now)
            out += self._broadcast("ephemeral_left", node=node, creation=creation)
        return out + self._save() + self._settle(now)

    def set_alarm(self, resource: str, active: bool, now: float) -> list[NodeMonitorEffect]:
        """Raise or clear a resource alarm of this node; peers are told the full set."""
        if not isinstance(resource, str) or not 0 < len(resource) <= MAX_NAME:
            return [Log.warning("set_alarm: bad resource name", resource=repr(resource)[:80])]
        mine = set(self._alarms.get(self.node, ()))
        if (resource in mine) == bool(active):
            return []
        if active:
            if len(mine) >= MAX_LIST:
                return [Log.warning("set_alarm: too many alarms", resource=resource)]
            mine.add(resource)
        else:
            mine.discard(resource)
        self._alarms[self.node] = frozenset(mine)
        log = Log.warning if active else Log.info
        out: list[NodeMonitorEffect] = [
            log("alarm " + ("set" if active else "cleared"), resource=resource)
        ]
        return out + self._broadcast("alarm", resources=sorted(mine))

    def _routing_table(self) -> dict[str, Handler]:
        """Message type -> handler, for messages from core members (ephemeral members' go to
        members.on_ephemeral). A type messages.SCHEMAS knows but this table lacks is dropped."""
        routes: dict[str, Handler] = {
            "node_up": self._on_node_up,
            "announce": self._on_announce,
            "app_down": self._on_app_down,
            "joined_cluster": self._on_joined_cluster,
            "left_cluster": self._on_left_cluster,
            "keepalive": self._on_keepalive,
            "alarm": self._on_alarm,
            "view": self.partials.on_view,
            "check_partial_partition": self.partials.on_check_partial_partition,
            "creation_query": self.partials.on_creation_query,
            "creation_reply": self.partials.on_creation_reply,
            "partial_partition": self.partials.on_partial_partition,
            "partial_partition_disconnect": self.partials.on_partial_partition_disconnect,
            "ephemeral_left": self.members.on_ephemeral_left,
        }
        for t in ah.MESSAGE_TYPES:
            routes[t] = self._on_autoheal
        return routes

    # ======================================================================= messages

    def _on_node_up(self, sender: str, m: dict[str, Any], now: float) -> list[NodeMonitorEffect]:
        return self._peer(sender, m, reply=True)

    def _on_announce(self, sender: str, m: dict[str, Any], now: float) -> list[NodeMonitorEffect]:
        return self._peer(sender, m, reply=False)

    def _peer(self, sender: str, m: dict[str, Any], reply: bool) -> list[NodeMonitorEffect]:
        """node_up / announce (RabbitMQ's node_up and announce_guid): the peer's creation, disc
        flag, whether its application runs, its alarms, and whom it saw go down."""
        if m["node"] != sender:
            return [
                Log.warning("node monitor: dropped a node_up naming another node", sender=sender)
            ]
        out: list[NodeMonitorEffect] = []
        old = self._guids.get(sender)
        if old is not None and old != m["creation"]:
            out += self._forget_incarnation(sender)
        self._guids[sender] = m["creation"]
        self._greeted.add(sender)
        self._joining.discard(sender)  # it counts us: it heard that we joined
        out += self._see_mode(sender, m.get("mode"))
        if reply:
            out.append(self._send(sender, "announce", **self._peer_record(sender)))
        self._set_disc(sender, m["disc"])
        if m["running"] and sender not in self._running:
            self._running.add(sender)
            out += [
                Log.info("node's application is running", node=sender),
                Notify("node_up", sender),
            ]
        elif not m["running"] and sender in self._running:
            self._running.discard(sender)
            out.append(Notify("node_down", sender))
        self._set_alarms(sender, m["alarms"])
        # Mnesia's {inconsistent_database, running_partitioned_network, Node}: both sides kept
        # running and each saw the other (this incarnation of it) go down.
        mine = self._down_seen.pop(sender, None)
        if mine == m["creation"] and m["down"] == self.creation and sender not in self._partitions:
            self._partitions.add(sender)
            out += [
                Log.warning(
                    "partition detected: we and the node each saw the other down while both ran",
                    node=sender,
                ),
                Notify("partition", sender),
            ]
        if self._partitions:
            self._want_autoheal = True
        return out + self._save()

    def _on_app_down(self, sender: str, m: dict[str, Any], now: float) -> list[NodeMonitorEffect]:
        """The peer's application stopped (RabbitMQ: 'DOWN' of {rabbit, Node})."""
        out: list[NodeMonitorEffect] = []
        if sender in self._running:
            self._running.discard(sender)
            out += [
                Log.info("node's application stopped", node=sender),
                Notify("node_down", sender),
            ]
        # It resyncs when it starts again: no divergence with it is left to heal.
        self._partitions.discard(sender)
        out += self.autoheal.rabbit_down(sender, self._ctx())
        return out + self._save()

    def _on_joined_cluster(
        self, sender: str, m: dict[str, Any], now: float
    ) -> list[NodeMonitorEffect]:
        node = m["node"]
        if node == self.node:
            return []
        return self._add_member(node, m["disc"]) + self._save()

    def _on_left_cluster(
        self, sender: str, m: dict[str, Any], now: float
    ) -> list[NodeMonitorEffect]:
        node = m["node"]
        if node == self.node:
            return [
                Log.warning(
                    "a member says we left the cluster; ignored (a node's own membership "
                    "changes on that node: rabbitry cluster leave)",
                    sender=sender,
                )
            ]
        if node not in self._all:
            return []
        return self._remove_member(node) + self._save()

    def _on_keepalive(self, sender: str, m: dict[str, Any], now: float) -> list[NodeMonitorEffect]:
        # Missed keepalives never mark a node down; only dist ticks do. What it carries is
        # taken as node_up and view would be (anti-entropy), without a reply.
        out: list[NodeMonitorEffect] = []
        if "node" in m:
            out += self._peer(sender, m, reply=False)
        if "views" in m:
            out += self.partials.on_view(sender, m, now)
        return out

    def _on_alarm(self, sender: str, m: dict[str, Any], now: float) -> list[NodeMonitorEffect]:
        self._set_alarms(sender, m["resources"])
        return []

    def _on_autoheal(self, sender: str, m: dict[str, Any], now: float) -> list[NodeMonitorEffect]:
        holding = self.autoheal.holds_app
        out: list[NodeMonitorEffect] = [*self.autoheal.handle(sender, m, self._ctx())]
        if not holding and self.autoheal.holds_app and self._app == "stopped":
            # Already stopped (paused by the mode): the winner must not wait for a stop.
            out.append(self._send(self.autoheal.winner or sender, "app_down"))
        return out

    # ======================================================================= the decision

    def _settle(self, now: float) -> list[NodeMonitorEffect]:
        """Bring everything that derives from the state up to date, after every event."""
        self._now = now
        out = self._refresh_view()
        for n in [n for n, until in self._settling.items() if now >= until]:
            del self._settling[n]
        if self._partial and not self.partials.partial_in_sight():
            self._partial = False
            out.append(Log.info("the partial partition is no longer in sight"))
        if self._want_autoheal:
            self._want_autoheal = False
            out += self._maybe_autoheal()
        out += self._decide()
        out += self.partials.review_cuts()
        out += self._refresh_view()
        out += self._clear_stale_partitions()
        out += self.members.tell_ephemerals()
        return out + self._ensure_timers()

    def _refresh_view(self, skip: str | None = None) -> list[NodeMonitorEffect]:
        seen = self._connected() | {self.node}
        if not self._views.set_own(seen, self._paused, self._cut):
            return []
        own = self._views.wire({self.node: self._views.own})
        return self._broadcast("view", skip=skip, views=own)

    def _mode_pause(self) -> tuple[bool, str]:
        """RabbitMQ's rule on the nodes we reach, then, while a partial partition is confirmed
        and in sight, the same rule on our part of partitions.decompose. (Views alone are not
        enough: when a node dies, its peers see it go at different moments, and the first to
        notice would pause for nothing.)"""
        mode = self.config.mode
        # the partial-partition hold stays only while that path keeps answering "pause"
        held, self._hold_since = self._hold_since, None
        if mode not in ("pause_minority", "pause_if_all_down"):
            return False, ""
        reachable = frozenset(self._connected() | {self.node})
        if not self.partials.part_runs(reachable):
            if mode == "pause_minority":
                return True, (
                    f"pause_minority: {len(reachable)} of {len(self._all)} members reachable, "
                    "not a strict majority"
                )
            return True, "pause_if_all_down: none of the preferred nodes is reachable"
        if self._paused:
            stay, why = self.partials.resume_check()
            if stay or not self._connected():  # alone: no views in flight to wait for
                return stay, why
            since = self._now if held is None else held
            if self._now - since < self.decision_hold:
                self._hold_since = since  # _ensure_timers brings us back when it is over
                return True, "resuming once the picture has held"
            return False, ""
        if not self._partial:
            return False, ""
        # Members still settling after a heal (heal_settle), and peers that just connected
        # and whose view we have not had yet, count as linked to us: a running node does not
        # pause over a link whose reconnect may be on its way, or that has already happened.
        assume = set(self._settling) | (self._connected() - self._fresh)
        mine = part_of(self.node, self.partials.parts(assume=assume))
        if self.partials.part_runs(mine):
            return False, ""
        since = self._now if held is None else held
        if self._now - since < self.decision_hold:
            self._hold_since = since  # _ensure_timers brings us back when the hold is over
            return False, ""
        if mode == "pause_minority":
            return True, (
                f"pause_minority: partial partition; the best fully-connected set holding this "
                f"node has {len(mine)} of {len(self._all)} members, not a strict majority"
            )
        return True, "pause_if_all_down: partial partition; no preferred node in this node's part"

    def _decide(self) -> list[NodeMonitorEffect]:
        """Pause or resume from the current state alone; nothing in flight can block it."""
        out: list[NodeMonitorEffect] = []
        pause, why = self._mode_pause()
        if self._booting:
            if pause:
                if not self._boot_logged:
                    self._boot_logged = True
                    out.append(Log.info("not pausing during the start-up grace", reason=why))
                pause = False
            elif self._connected():
                self._booting = False  # we have reached a cluster: the grace has done its job
        if self.autoheal.holds_app and not pause:
            pause, why = True, "autoheal: this node lost; waiting for the winner"
        if pause == self._paused:
            return out
        self._paused = pause
        if pause:
            self._app, told = decision.pause(self._app, self.node, why)
        else:
            first, self._ever_resumed = not self._ever_resumed, True
            self._app, told = decision.resume(
                self._app, self.node, "condition holds", first=first and self.hold_app
            )
        return out + told

    def _maybe_autoheal(self) -> list[NodeMonitorEffect]:
        """rabbit_node_monitor:maybe_autoheal: only once every member is connected (and has
        told us, by node_up, whether it saw us down: else the partitions are not all known)."""
        if not (self.config.autoheal and self._partitions):
            return []
        if self._others() - (set(self._up) & self._greeted):
            return []
        return [*self.autoheal.maybe_start(self._ctx())]

    def _ensure_timers(self) -> list[NodeMonitorEffect]:
        out: list[NodeMonitorEffect] = []
        down = self._others() - set(self._up) - self._cut
        wanted = {
            TIMER_PING: (bool(down), self.down_ping_interval),
            TIMER_PAUSE_CHECK: (self._paused, self.down_ping_interval),
            TIMER_KEEPALIVE: (self._started, self.keepalive_interval),
            TIMER_STARTUP: (self._started and self._booting, self.startup_grace),
            TIMER_HOLD: (self._hold_since is not None, self.decision_hold),
        }
        if TIMER_HEAL_SETTLE in self._timers and not self._settling:
            self._timers.discard(TIMER_HEAL_SETTLE)
            out.append(CancelTimer(TIMER_HEAL_SETTLE))
        return out + decision.sync_timers(self._timers, wanted)
