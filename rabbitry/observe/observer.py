"""The node's `observer` child: turns dist and node monitor events into Observations.

It subscribes to the NetKernel's NodeUp/NodeDown (with the reason) and to the node monitor's
NodeEvents (partition, partial_partition, paused, resumed), and writes them down. Readers never
ask it anything: they read the Observations, so a busy observer cannot slow a scrape.
"""

from __future__ import annotations

import contextlib
from typing import Any

from monitors.dist import NetKernel, NodeDown, NodeUp
from monitors.node_monitor import NodeEvent
from rabbitry.observe.observations import Observations
from supervisors import Process


class NodeObserver(Process):
    """Feeds `observations` from the kernel's and the monitor's events."""

    def __init__(self, kernel: Any, monitor: Any, observations: Observations) -> None:
        super().__init__()
        self._kernel_ref = kernel
        self._monitor = monitor
        self.observations = observations

    def on_start(self) -> None:
        kernel = NetKernel.of(self._kernel_ref)
        kernel.monitor_nodes(self.actor_ref)  # subscribe first, then read: nothing is missed
        self.observations.connected(kernel.nodes())
        # Not waited for: a monitor busy at boot (30 nodes starting on 2 cores) must not fail
        # the node's start; its events come once it has read this.
        self._monitor.proxy().subscribe(self.actor_ref)

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, NodeUp):
            self.observations.node_up(message.node)
        elif isinstance(message, NodeDown):
            self.observations.node_down(message.node, message.reason)
        elif isinstance(message, NodeEvent):
            self.observations.monitor_event(message.event, message.node)
        else:
            return super().on_receive(message)
        return None

    def on_stop(self) -> None:
        self._unsubscribe()

    def on_failure(self, *_exc_info: Any) -> None:
        self._unsubscribe()

    def _unsubscribe(self) -> None:
        with contextlib.suppress(Exception):
            NetKernel.of(self._kernel_ref).demonitor_nodes(self.actor_ref)
        with contextlib.suppress(Exception):
            self._monitor.proxy().unsubscribe(self.actor_ref)
