"""memory://: an in-process bus, for the embedded default and the deterministic simulator.

Frames still go through the JSON envelope, so code that works here sends nothing a real broker
would choke on. `memory://name` is a separate broker; within a broker the exchange option
separates namespaces, as on the real brokers. Delivery is synchronous into each receiver's
bounded inbox (handlers still run on the receiver's bus thread), so memory:// is always
connected and never loses a message except to a full inbox (counted).
"""

from __future__ import annotations

import threading

from monitors.bus.base import Bus
from monitors.bus.errors import BusUnavailable, BusUnroutable
from monitors.bus.outbox import DIRECT, Request

_registry_lock = threading.Lock()
# (broker name, exchange) -> {node: bus}. Entries go when their last bus closes (bounded).
_registry: dict[tuple[str, str], dict[str, MemoryBus]] = {}


class MemoryBus(Bus):
    scheme = "memory"

    def _key(self) -> tuple[str, str]:
        return (self.url.name, self.exchange)

    def _start(self) -> None:
        with _registry_lock:
            nodes = _registry.setdefault(self._key(), {})
            if self.node in nodes:
                raise ValueError(
                    f"node {self.node!r} already has a bus on {self._where()}; node names must "
                    "be unique per namespace (use another memory://name or exchange)"
                )
            nodes[self.node] = self
        super()._start()
        self._set_connected(True)

    def _shutdown(self) -> None:
        with _registry_lock:
            nodes = _registry.get(self._key(), {})
            if nodes.get(self.node) is self:
                del nodes[self.node]
            if not nodes:
                _registry.pop(self._key(), None)

    def _transmit(self, request: Request, timeout: float, describe: str) -> None:
        with _registry_lock:
            nodes = _registry.get(self._key(), {})
            if request.kind == DIRECT:
                targets = [nodes[request.node]] if request.node in nodes else []
            else:
                targets = list(nodes.values())
        if request.kind == DIRECT:
            if not targets:
                if request.confirm:
                    self._count("confirm_failures")
                    raise BusUnroutable(f"{describe}: no node {request.node!r} on this namespace")
                self._count("returned")
                return
            accepted = targets[0]._receive(request.frame, direct=True)
            if not accepted and request.confirm:
                self._count("confirm_failures")
                raise BusUnavailable(f"{describe}: the node's inbox is full")
            self._count("sent")
            return
        for bus in targets:
            bus._receive(request.frame, direct=False, expect_rk=request.routing_key)
        self._count("published")
