"""Small helpers for feeding one core by hand and picking effects out of its answers."""

from __future__ import annotations

from typing import Any

from monitors.effects import Send
from monitors.node_monitor import ClusterStatus, NodeMonitorCore, PartitionHandling

A, B, C, D, E = "a@h", "b@h", "c@h", "d@h", "e@h"
CREATION = {A: 100, B: 101, C: 102, D: 103, E: 104}


def core(
    node: str = A,
    members: tuple[str, ...] = (A, B, C),
    mode: PartitionHandling | str = "ignore",
    **kw: Any,
) -> NodeMonitorCore:
    config = PartitionHandling(mode) if isinstance(mode, str) else mode
    kw.setdefault("startup_grace", 0.0)
    return NodeMonitorCore(
        node, CREATION[node], ClusterStatus(all=members, disc=members), config, **kw
    )


def of(effects: list[Any], kind: type) -> list[Any]:
    return [e for e in effects if isinstance(e, kind)]


def sends(effects: list[Any], t: str | None = None, to: str | None = None) -> list[Send]:
    return [
        e
        for e in effects
        if isinstance(e, Send) and (t is None or e.msg["t"] == t) and (to is None or e.node == to)
    ]


def peer(node: str, running: bool = True, down: int | None = None, **kw: Any) -> dict[str, Any]:
    """A node_up message as `node`'s monitor sends it."""
    msg = {
        "t": "node_up",
        "c": CREATION[node],
        "node": node,
        "disc": True,
        "creation": CREATION[node],
        "running": running,
        "down": down,
        "alarms": [],
    }
    return msg | kw


def view(node: str, seen: set[str], stamp: int = 1, paused: bool = False) -> dict[str, Any]:
    return {
        "t": "view",
        "c": CREATION[node],
        "views": {node: {"c": CREATION[node], "s": stamp, "seen": sorted(seen), "p": paused}},
    }


def connect(c: NodeMonitorCore, *nodes: str, now: float = 0.0, views: bool = True) -> list[Any]:
    """Bring `nodes` up for core `c`: dist nodeup, their node_up, and (by default) views that
    say they see each other and `c`."""
    out: list[Any] = []
    everyone = {c.node, *nodes}
    for n in nodes:
        out += c.nodeup(n, CREATION[n], now)
        out += c.receive(n, peer(n), now)
    if views:
        for n in nodes:
            out += c.receive(n, view(n, everyone, stamp=100), now)
    if "decision_hold" in c._timers:  # a resume (or pause) held for decision_hold: let it pass
        out += c.timer("decision_hold", now + c.decision_hold)
    return out
