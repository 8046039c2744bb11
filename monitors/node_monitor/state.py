"""MonitorState: what one node monitor knows, shared by the parts of NodeMonitorCore.

The facade (core.py) is a MonitorState and hands itself to its parts (partial.py,
members.py) as their one state object; the parts read and change it, and call nothing of the
facade. Besides the attributes, this module holds the few helpers every part needs: who is a
member and who is connected, how a message is built and sent, this node's record for a peer,
the cluster files, and a member's arrival, departure or restart.
"""

from __future__ import annotations

from typing import Any

from monitors.effects import Connect, Log, Send
from monitors.node_monitor import autoheal as ah
from monitors.node_monitor.config import PartitionHandling
from monitors.node_monitor.effects import NodeMonitorEffect, Notify, SaveClusterStatus
from monitors.node_monitor.ephemeral import ROLE_CORE
from monitors.node_monitor.messages import VERSION
from monitors.node_monitor.partitions import is_fully_connected
from monitors.node_monitor.status import ClusterStatus
from monitors.node_monitor.views import ViewTable

TIMER_PING = "ping_down_nodes"
TIMER_PAUSE_CHECK = "pause_check"
TIMER_KEEPALIVE = "keepalive"
TIMER_STARTUP = "startup"
TIMER_HEAL_SETTLE = "heal_settle"
TIMER_HOLD = "decision_hold"
CUT_TIMER = "disconnect:"  # + node: close a link we asked the peer to close
FORGET_TIMER = "forget_ephemeral:"  # + node: forget an ephemeral member down this long


class MonitorState:
    """One node monitor's state and the helpers its parts share (see the module docstring)."""

    NAME = "rabbit_node_monitor"
    role = ROLE_CORE

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
        self.node = node
        self.creation = creation
        self.config = config or PartitionHandling()
        self.down_ping_interval = down_ping_interval
        self.keepalive_interval = keepalive_interval
        self.disconnect_ban = disconnect_ban
        # one ping round by default: start() pings every member at once, so a node that is
        # still in a minority after that is really cut off (RabbitMQ: runs until a nodedown)
        self.startup_grace = down_ping_interval if startup_grace is None else startup_grace
        self.disconnect_delay = disconnect_delay
        # After a link comes back, the members still down may be coming back too: a connect
        # attempt to them that began during the cut can be waiting out its timeout (the
        # NetKernel's connect_timeout, one ping interval), and the next ping starts a fresh
        # one. So for this long after a nodeup, a partial partition about them is not acted
        # on; once it is over it is checked afresh (issue 15, "a heal resumes once").
        self.heal_settle = 2 * down_ping_interval + 0.5 if heal_settle is None else heal_settle
        self._settling: dict[str, float] = {}  # down member -> until when (see heal_settle)
        self._deferred: set[str] = set()  # ... of which a partial partition was put off
        # A running node pauses for a partial partition, and a paused node resumes, only
        # once the answer has stayed the same this long: views travel as messages, and while
        # a heal brings nodes back, nodes that come back together decide on views a message
        # round trip apart (two overlapping cliques each looking best to one of them, a view
        # from before a node's pause). Pauses by the reachable count are never held.
        self.decision_hold = decision_hold
        self._hold_since: float | None = None
        self._now = 0.0
        status = status.normalized(node)
        self._all: set[str] = set(status.all)
        # A cluster always has a disc node; a status without any (hand-made) makes us one.
        self._disc: set[str] = set(status.disc) or {node}
        # The running list on file is "at shutdown": a boot hint for the shell. Now only we run.
        self._running: set[str] = {node}
        self._up: dict[str, int] = {}  # dist connections: node -> creation from the handshake
        self._guids: dict[str, int] = {}  # creation each peer's monitor announced (GUID)
        # peers whose node_up/announce we have had since their nodeup: only then do we know
        # whether they saw us down, so autoheal waits for it
        self._greeted: set[str] = set()
        self._down_seen: dict[str, int] = {}  # peers we saw go down while our app ran
        self._partitions: set[str] = set()
        self._paused = False  # the decision; the shell is told by PauseApp/ResumeApp
        self._app = "running"  # what the shell reported: running|stopping|stopped|starting
        # hold_app: the application is not running at boot, and starts only once the
        # partition mode allows it (see start()). Without it the application runs from boot
        # and a start-up grace defers the first pause.
        self.hold_app = hold_app and self.config.pauses
        self._booting = self.config.pauses and self.startup_grace > 0 and not self.hold_app
        self._boot_logged = False
        self._ever_resumed = False  # the first resume of an app held at boot is its start
        self._views = ViewTable(node, creation)
        self._cut: set[str] = set()  # links we cut on purpose (upgrade to full partition)
        self._cutting: set[str] = set()  # ... of which the connection is not closed yet
        self._fresh: set[str] = set()  # peers whose own view we have had since their nodeup
        self._checks: dict[str, dict[str, tuple[int, int]]] = {}  # down node -> reporter -> GUIDs
        self._queried: set[str] = set()  # creation_query in flight
        # A partial partition was confirmed to us (as reporter or checker) and we can still see
        # one: only then do the parts of partitions.decompose decide who pauses. Without it a
        # node that merely heard of a nodedown before its peers did would pause for nothing.
        self._partial = False
        self._down_ticks: dict[str, int] = {}  # ping rounds a member has been down for
        self._alarms: dict[str, frozenset[str]] = {}
        self._weight = 0
        self._timers: set[str] = set()
        self._saved: tuple[tuple[str, ...], ...] | None = None
        self._started = False
        self._want_autoheal = False
        # Members not yet known to have heard that we joined (we were the joining node): they
        # are told again on their nodeup, until their node_up shows they count us (a member
        # sends node_up to members only). A join reaches the members connected at that moment
        # only, and the joining node usually is connected to the one it joined through.
        self._joining: set[str] = set()
        self.autoheal = ah.Autoheal(timeout=autoheal_timeout, status_timeout=status_timeout)
        self._init_ephemeral(forget_ephemeral_after)

    def _init_ephemeral(self, forget_ephemeral_after: float) -> None:
        """What the core keeps of ephemeral members and of what the members say of themselves."""
        self.forget_ephemeral_after = forget_ephemeral_after
        self._eph: dict[str, int] = {}  # ephemeral members we know -> creation
        self._eph_down: dict[str, float] = {}  # ... of which down, since
        self._eph_said: tuple[Any, ...] | None = None  # what they were last told of us
        self._eph_misnamed: set[str] = set()  # members that said they are ephemeral
        self._dropped_told: set[tuple[str, str]] = set()  # (sender, what) logged once
        self._modes: dict[str, Any] = {}  # member -> the partition_handling its records say
        # The members this node left (`rabbitry cluster leave`), until it joins again: its
        # records to ephemeral members say so (`left`), so that they move to those members
        # instead of staying with a node outside their cluster. Not kept across a restart.
        self._left_from: set[str] = set()

    def _others(self) -> set[str]:
        return self._all - {self.node}

    def _connected(self) -> set[str]:
        return self._others() & set(self._up)

    def _msg(self, t: str, **fields: Any) -> dict[str, Any]:
        return {"v": VERSION, "t": t, "c": self.creation, "role": ROLE_CORE, **fields}

    def _send(self, to: str, t: str, **fields: Any) -> Send:
        return Send(to, self.NAME, self._msg(t, **fields))

    def _broadcast(self, t: str, skip: str | None = None, **fields: Any) -> list[NodeMonitorEffect]:
        return [self._send(n, t, **fields) for n in sorted(self._connected()) if n != skip]

    def _peer_record(self, peer: str) -> dict[str, Any]:
        return {
            "node": self.node,
            "disc": self.node in self._disc,
            "creation": self.creation,
            "running": self._app in ("running", "stopping"),
            "down": self._down_seen.get(peer),
            "alarms": sorted(self._alarms.get(self.node, ())),
            "mode": self.config.to_config(),
        }

    def _ctx(self) -> ah.Ctx:
        return ah.Ctx(
            node=self.node,
            creation=self.creation,
            name=self.NAME,
            members=tuple(sorted(self._all)),
            connected=frozenset(self._connected() & self._greeted),
            partitions=frozenset(self._partitions),
            weight=self._weight,
        )

    def _set_disc(self, node: str, disc: bool) -> None:
        if disc:
            self._disc.add(node)
        else:
            self._disc.discard(node)

    def _set_alarms(self, node: str, resources: list[str]) -> None:
        if resources:
            self._alarms[node] = frozenset(resources)
        else:
            self._alarms.pop(node, None)

    def _save(self) -> list[NodeMonitorEffect]:
        now = (tuple(sorted(self._all)), tuple(sorted(self._disc)), tuple(sorted(self._running)))
        if now == self._saved:
            return []
        self._saved = now
        return [SaveClusterStatus(*now)]

    def _add_member(self, node: str, disc: bool) -> list[NodeMonitorEffect]:
        new = node not in self._all
        self._all.add(node)
        self._set_disc(node, disc)
        if not new:
            return []
        out: list[NodeMonitorEffect] = [Log.info("node joined the cluster", node=node, disc=disc)]
        if node in self._up:  # tell it we run; its announce tells us whether it does
            out.append(self._send(node, "node_up", **self._peer_record(node)))
            out.append(self._send(node, "view", views=self._views.wire()))
        else:
            out.append(Connect(node))
        return out

    def _tell_joined(self, node: str) -> list[NodeMonitorEffect]:
        """joined_cluster again, to a member not yet known to have heard it (_joining)."""
        if node not in self._joining:
            return []
        return [self._send(node, "joined_cluster", node=self.node, disc=self.node in self._disc)]

    def _remove_member(self, node: str) -> list[NodeMonitorEffect]:
        out: list[NodeMonitorEffect] = [Log.info("node left the cluster", node=node)]
        self._joining.discard(node)
        out += self._gone(node, record=False)
        for s in (self._all, self._disc, self._running, self._partitions, self._cut):
            s.discard(node)
        self._views.forget(node)
        self._down_seen.pop(node, None)
        self._settling.pop(node, None)
        self._deferred.discard(node)
        return out

    def _gone(self, node: str, record: bool = True) -> list[NodeMonitorEffect]:
        """`node` is no longer reachable: RabbitMQ's handle_dead_rabbit and handle_dead_node."""
        out: list[NodeMonitorEffect] = []
        if record and self._app != "stopped" and node in self._guids:
            self._down_seen[node] = self._guids[node]
        self._greeted.discard(node)
        self._fresh.discard(node)
        self._cutting.discard(node)
        if node in self._running:
            self._running.discard(node)
            out.append(Notify("node_down", node))
        self._alarms.pop(node, None)  # rabbit_alarm:on_node_down
        self._checks.pop(node, None)
        for pending in self._checks.values():
            pending.pop(node, None)
        self._queried.discard(node)
        out += self.autoheal.node_down(node, self._ctx())
        return out + self._save()

    def _forget_incarnation(self, node: str) -> list[NodeMonitorEffect]:
        """`node` restarted: whatever we knew of the old incarnation is stale (heal state,
        partitions with it, whom it saw, the cut we made)."""
        out = self._gone(node, record=False)
        self._partitions.discard(node)
        self._down_seen.pop(node, None)
        self._cut.discard(node)
        self._views.forget(node)
        self._guids.pop(node, None)
        return out

    def _see_mode(self, sender: str, mode: Any) -> list[NodeMonitorEffect]:
        if mode is None or self._modes.get(sender) == mode:
            return []
        self._modes[sender] = mode
        if mode == self.config.to_config():
            return []
        return [
            Log.error(
                "a core member runs another partition_handling: members must agree, or a "
                "partition can leave both sides running (or both paused)",
                node=sender,
                its=mode,
                ours=self.config.to_config(),
            )
        ]

    def _clear_stale_partitions(self) -> list[NodeMonitorEffect]:
        """RabbitMQ #17319: in the pause modes (not recovering by autoheal), once every member
        is up and fully connected, recorded partitions are stale: the losing side paused."""
        if not self._partitions or not self.config.pauses or self.config.autoheal:
            return []
        if self._others() - set(self._up) or not is_fully_connected(self._views.graph(self._all)):
            return []
        cleared = sorted(self._partitions)
        self._partitions.clear()
        return [
            Log.info(
                "partitions cleared: every member is up and fully connected", partitions=cleared
            )
        ]
