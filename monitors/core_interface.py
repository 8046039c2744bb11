"""The interface of a pure core (docs/cores.md), as `typing.Protocol`s the type checker holds.

A core is fed events with the current time and returns the effects to perform, in order; it
does no I/O. The actor shells (monitors/core_shell.py) and the simulator (tests/sim) program
against these, and each shell names its core's class as the type argument of its base
(`DistCoreShell[MnesiaCore]`, ...), so mypy checks that the core satisfies its Protocol.

    Core       start(now), timer(key, now, data=None)            every core
    DistCore   + receive(sender_node, msg, now)                  messages over dist, to the
                                                                 core's registered name
    NodeCore   + nodeup(node, creation, now),                    a dist core that follows
                 nodedown(node, reason, now)                     the connections (monitor_nodes)
    BusCore    + receive(routing_key, body, now),                messages on a bus
                 bus_down(now), bus_up(now)

The effects come back as a list of a core's own effect types; the Protocols ask only for a
sequence, so that each core keeps its precise return type.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

__all__ = ["BusCore", "Core", "DistCore", "NodeCore"]

Effects = Sequence[object]


class Core(Protocol):
    """Every core: a start, and the timers it set (SetTimer) firing."""

    def start(self, now: float) -> Effects: ...

    def timer(self, key: str, now: float, data: Any = None) -> Effects: ...


class DistCore(Core, Protocol):
    """A core other nodes' cores send messages to, through the NetKernel."""

    def receive(self, sender: str, msg: Any, now: float) -> Effects: ...


class NodeCore(DistCore, Protocol):
    """A dist core told when a connection to another node comes up or goes."""

    def nodeup(self, node: str, creation: int, now: float) -> Effects: ...

    def nodedown(self, node: str, reason: str, now: float) -> Effects: ...


class BusCore(Core, Protocol):
    """A core on a message bus (gossip, failover): messages by routing key, and the bus's
    state (what the core sends while the bus is down is lost; it resends on bus_up)."""

    def receive(self, routing_key: str, body: Any, now: float) -> Effects: ...

    def bus_down(self, now: float) -> Effects: ...

    def bus_up(self, now: float) -> Effects: ...
