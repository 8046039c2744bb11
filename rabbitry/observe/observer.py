"""The node's `observer` child: turns dist and node monitor events into Observations.

It subscribes to the NetKernel's NodeUp/NodeDown (with the reason) and to the node monitor's
NodeEvents (partition, partial_partition, paused, resumed), and writes them down. Readers never
ask it anything: they read the Observations, so a busy observer cannot slow a scrape.

It is also registered on the dist layer as VIEW_NAME, and answers a peer's `{"t": "view"}`
call with this node's cluster status and net_ticktime: the management page of one node shows
what every member it reaches sees (who cannot see whom, differing net_ticktimes).
"""

from __future__ import annotations

import contextlib
from typing import Any

from monitors.dist import Message, NetKernel, NodeDown, NodeUp
from monitors.node_monitor import NodeEvent
from rabbitry.observe.observations import Observations
from supervisors import Process, format_reason

VIEW_NAME = "rabbitry_observer"
VIEW_TIMEOUT = 1.0  # how long a view waits for this node's monitor


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
        kernel.register(VIEW_NAME, self.actor_ref)
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
        elif isinstance(message, Message):
            return self._view(message)
        else:
            return super().on_receive(message)
        return None

    def _view(self, message: Message) -> dict[str, Any] | None:
        if not isinstance(message.msg, dict) or message.msg.get("t") != "view":
            return None  # bad network input is dropped, never a crash
        kernel = NetKernel.of(self._kernel_ref)
        view: dict[str, Any] = {"net_ticktime": kernel.net_ticktime, "connected": kernel.nodes()}
        try:
            view["status"] = self._monitor.proxy().get_status().get(timeout=VIEW_TIMEOUT)
        except Exception as exc:  # a busy monitor: say so, and stay up
            view["error"] = format_reason(exc)
        return view

    def on_stop(self) -> None:
        self._unsubscribe()

    def on_failure(self, *_exc_info: Any) -> None:
        self._unsubscribe()

    def _unsubscribe(self) -> None:
        with contextlib.suppress(Exception):
            kernel = NetKernel.of(self._kernel_ref)
            kernel.demonitor_nodes(self.actor_ref)
            kernel.unregister(VIEW_NAME)
        with contextlib.suppress(Exception):
            self._monitor.proxy().unsubscribe(self.actor_ref)
