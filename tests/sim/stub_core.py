"""A tiny stand-in for NodeMonitorCore, with the interface of docs/cores.md.

Why it exists: the simulator's engine, schedules and invariants need a core to drive while the
real one is being written, and the engine self-tests should not depend on the real core's
quality. It decides from dist connectivity alone (pause_minority: connected + self is a strict
majority; pause_if_all_down: a preferred node is connected), pings down nodes every second,
sends keepalives, and tracks "running" from node_up/app_down messages. It does no partial
partition handling and no autoheal (autoheal behaves as ignore).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from monitors.effects import Connect, Effect, Send, SetTimer


@dataclass(frozen=True)
class ClusterStatus:
    all: list[str]
    disc: list[str]
    running: list[str]


@dataclass(frozen=True)
class PartitionHandling:
    mode: str = "ignore"
    nodes: tuple[str, ...] = ()
    recover: str = "ignore"


@dataclass(frozen=True)
class PauseApp:
    reason: str = ""


@dataclass(frozen=True)
class ResumeApp:
    pass


@dataclass(frozen=True)
class SaveClusterStatus:
    all: list[str]
    disc: list[str]
    running: list[str]


@dataclass(frozen=True)
class Notify:
    event: str
    node: str
    info: dict[str, Any] = field(default_factory=dict)


class NodeMonitorCore:
    """See the module docstring."""

    NAME = "rabbit_node_monitor"

    def __init__(
        self,
        node: str,
        creation: int,
        status: ClusterStatus,
        config: PartitionHandling,
        *,
        down_ping_interval: float = 1.0,
        keepalive_interval: float = 10.0,
        disconnect_ban: float = 1.0,
        autoheal_timeout: float = 60.0,
    ) -> None:
        self.node = node
        self.creation = creation
        self.all = list(status.all)
        self.disc = list(status.disc)
        self.running: set[str] = {node}
        self.connected: set[str] = set()
        self.config = config
        self.ping = down_ping_interval
        self.keepalive = keepalive_interval
        self.paused = False
        self.weight = 0

    def _others(self) -> list[str]:
        return [n for n in self.all if n != self.node]

    def _ok(self) -> bool:
        mode = self.config.mode
        if mode == "pause_minority":
            return 2 * (len(self.connected) + 1) > len(self.all)
        if mode == "pause_if_all_down":
            pref = [n for n in self.config.nodes if n in self.all]
            return not pref or any(n == self.node or n in self.connected for n in pref)
        return True

    def _save(self) -> SaveClusterStatus:
        return SaveClusterStatus(self.all, self.disc, sorted(self.running))

    def _evaluate(self) -> list[Effect | Any]:
        ok = self._ok()
        if not ok and not self.paused:
            self.paused = True
            self.running.discard(self.node)
            msgs = [Send(n, self.NAME, {"t": "app_down"}) for n in sorted(self.connected)]
            return [PauseApp("minority"), *msgs, Notify("paused", self.node)]
        if ok and self.paused:
            self.paused = False
            self.running.add(self.node)
            msgs = [Send(n, self.NAME, {"t": "node_up"}) for n in sorted(self.connected)]
            return [ResumeApp(), *msgs, Notify("resumed", self.node)]
        return []

    def _arm_ping(self) -> list[Any]:
        return [SetTimer("ping_down_nodes", self.ping)]

    def start(self, now: float) -> list[Any]:
        return [
            SetTimer("keepalive", self.keepalive),
            *[Send(n, self.NAME, {"t": "node_up"}) for n in self._others()],
            *self._arm_ping(),
        ]

    def nodeup(self, node: str, creation: int, now: float) -> list[Any]:
        self.connected.add(node)
        effs: list[Any] = [Notify("nodeup", node)]
        if not self.paused:
            effs.append(Send(node, self.NAME, {"t": "node_up"}))
            return effs  # a node only pauses on a nodedown or its ping round
        return effs + self._evaluate()

    def nodedown(self, node: str, reason: str, now: float) -> list[Any]:
        self.connected.discard(node)
        changed = node in self.running
        self.running.discard(node)
        effs: list[Any] = [Notify("node_down", node), *self._arm_ping(), *self._evaluate()]
        if changed:
            effs.append(self._save())
        return effs

    def receive(self, sender: str, msg: dict[str, Any], now: float) -> list[Any]:
        t = msg.get("t")
        if t == "node_up" and sender in self.connected and sender not in self.running:
            self.running.add(sender)
            return [self._save()]
        if t == "app_down" and sender in self.running:
            self.running.discard(sender)
            return [self._save()]
        return []

    def timer(self, key: str, now: float, data: Any = None) -> list[Any]:
        if key == "keepalive":
            sends = [Send(n, self.NAME, {"t": "keepalive"}) for n in sorted(self.connected)]
            return [*sends, SetTimer("keepalive", self.keepalive)]
        if key == "ping_down_nodes":
            down = [n for n in self._others() if n not in self.connected]
            effs: list[Any] = [Connect(n) for n in down]
            if down or self.paused:
                effs += self._arm_ping()
            return effs + self._evaluate()
        return []

    def app_stopped(self, now: float) -> list[Any]:
        return []

    def app_started(self, now: float) -> list[Any]:
        return []

    def set_weight(self, n: int) -> None:
        self.weight = n

    def status(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "all": list(self.all),
            "disc": list(self.disc),
            "running": sorted(self.running),
            "partitions": [],
            "paused": self.paused,
            "alarms": [],
        }
