"""CoreShell: the incoming half every actor shell around a pure core shares.

A shell feeds its core the events of the world and performs the effects the core returns
(monitors/shell_effects.py performs the common ones). The incoming half was written once per
shell, and the copies drifted; this module is it, once:

- timers: a `Fired` that is still the current arming of its key (CoreTimers) goes to
  `on_timer`, which by default hands it to `core.timer`;
- a core on dist (`DistCoreShell`): registered under its name with the NetKernel
  (`attach`); a `Message` to that name goes to `on_message` (by default `core.receive`), and
  a `ConnectDone` ends a background connect attempt (ShellEffects.connect_over);
- a core that follows the connections (`NodeCoreShell`): also subscribed to NodeUp/NodeDown
  (`attach`), told a nodeup for every peer already connected before it subscribed
  (`replay_nodeups`; a peer gone in between is skipped, its NodeDown follows), and a NodeDown
  also ends that node's connect attempt;
- a core on a bus (`BusCoreShell`): the bus's callbacks run on the bus's threads and only tell
  the process (`BusIn`, `BusState`); those go to `on_bus_message` (by default
  `core.receive`) and to `core.bus_up` / `core.bus_down`. Times are wall-clock here (stamps
  cross hosts); dist shells use the monotonic clock.

Routing is a table, message type -> handler(message, now): a shell adds its own with `route`.
A message no route takes goes to `on_other` (by default Process.on_receive, which handles exit
signals and calls); `after_event` runs after every routed one. Each shell names its core's
class as the type argument (`NodeCoreShell[MnesiaCore]`), so the type checker holds the core
to its Protocol (monitors/core_interface.py).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from monitors.core_interface import BusCore, Core, DistCore, NodeCore
from monitors.core_timers import CoreTimers, Fired
from monitors.dist import Message, NodeDown, NodeUp
from monitors.shell_effects import ConnectDone, ShellEffects
from supervisors import Process

if TYPE_CHECKING:  # a dist shell need not load the bus package
    from monitors.bus import BusMessage

__all__ = ["BusCoreShell", "BusIn", "BusState", "CoreShell", "DistCoreShell", "NodeCoreShell"]

C = TypeVar("C", bound=Core)
D = TypeVar("D", bound=DistCore)
N = TypeVar("N", bound=NodeCore)
B = TypeVar("B", bound=BusCore)
M = TypeVar("M")


class CoreShell(Process, Generic[C]):
    """A Process around one core: timers, and routing by message type (module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.core: C | None = None  # built in on_start
        self._timers = CoreTimers(self)
        self._incoming: dict[type, Callable[[Any, float], Any]] = {}
        self.route(Fired, self._on_fired)

    def route(self, kind: type[M], handler: Callable[[M, float], Any]) -> None:
        """Messages of exactly `kind` go to `handler(message, now)`; its result is the
        answer to a call."""
        self._incoming[kind] = handler

    def now(self) -> float:
        """The time the core is fed (monotonic: a dist core's times never leave the node)."""
        return time.monotonic()

    def on_receive(self, message: Any) -> Any:
        if self.core is None:  # not started: nothing to feed it to
            return super().on_receive(message)
        now = self.now()
        handler = self._incoming.get(type(message))
        if handler is None:
            return self.on_other(message, now)
        result = handler(message, now)
        self.after_event()
        return result

    def on_other(self, message: Any, now: float) -> Any:
        """A message no route takes: Process's own (exit signals, calls, ...)."""
        return super().on_receive(message)

    def after_event(self) -> None:
        """Runs after every routed message (mnesia_like seals its group commit here)."""

    def on_timer(self, key: str, now: float, data: Any) -> None:
        self._perform(self._core().timer(key, now, data))

    def _on_fired(self, message: Fired, now: float) -> None:
        if self._timers.fired(message):
            self.on_timer(message.key, now, message.data)

    def _core(self) -> C:
        assert self.core is not None, "the core is built in on_start"
        return self.core

    def _perform(self, effects: Iterable[Any]) -> None:
        """Perform the core's effects, in order (each shell's own)."""
        raise NotImplementedError


class DistCoreShell(CoreShell[D]):
    """A shell whose core gets messages over dist, at its registered name."""

    kernel: Any  # the NetKernel, set in the shell's on_start

    def __init__(self) -> None:
        super().__init__()
        self._effects: ShellEffects | None = None  # the common effects (on_start)
        self.route(Message, self.on_message)
        self.route(ConnectDone, self._on_connect_done)

    def attach(self, name: str) -> None:
        """Register the process under `name` with the NetKernel."""
        self.kernel.register(name, self.actor_ref)

    def detach(self, name: str) -> None:
        """Undo `attach` (quietly: the kernel may be stopping too)."""
        kernel = getattr(self, "kernel", None)
        if kernel is not None:
            with contextlib.suppress(Exception):
                kernel.unregister(name)

    def on_message(self, message: Message, now: float) -> Any:
        self._perform(self._core().receive(message.node, message.msg, now))

    def _common_effects(self) -> ShellEffects:
        assert self._effects is not None, "the shell has not started"
        return self._effects

    def _on_connect_done(self, message: ConnectDone, now: float) -> None:
        self._common_effects().connect_over(message.node)


class NodeCoreShell(DistCoreShell[N]):
    """A dist shell whose core follows the connections (NodeUp, NodeDown)."""

    def __init__(self) -> None:
        super().__init__()
        self.route(NodeUp, self._on_nodeup)
        self.route(NodeDown, self._on_nodedown)

    def attach(self, name: str) -> None:
        """Register under `name` and subscribe to NodeUp/NodeDown (then start the core, then
        `replay_nodeups`)."""
        super().attach(name)
        self.kernel.monitor_nodes(self.actor_ref)

    def detach(self, name: str) -> None:
        kernel = getattr(self, "kernel", None)
        if kernel is not None:
            with contextlib.suppress(Exception):
                kernel.demonitor_nodes(self.actor_ref)
        super().detach(name)

    def replay_nodeups(self) -> None:
        """A nodeup for each peer connected before we subscribed. A peer that went since
        `nodes()` has no creation any more: it is skipped, and its NodeDown follows."""
        core = self._core()
        for peer in self.kernel.nodes():
            creation = self.kernel.peer_creation(peer)
            if creation is not None:
                self._perform(core.nodeup(peer, creation, self.now()))

    def _on_nodeup(self, message: NodeUp, now: float) -> None:
        self._perform(self._core().nodeup(message.node, message.creation, now))

    def _on_nodedown(self, message: NodeDown, now: float) -> None:
        self._common_effects().connect_over(message.node)
        self._perform(self._core().nodedown(message.node, message.reason, now))


@dataclass(frozen=True)
class BusIn:
    """A bus message, told to the shell by the bus's thread."""

    routing_key: str
    body: Any
    sender: str | None = None


@dataclass(frozen=True)
class BusState:
    """The bus connected or lost its connection."""

    connected: bool


class BusCoreShell(CoreShell[B]):
    """A shell whose core talks over a message bus (monitors/bus)."""

    def __init__(self) -> None:
        super().__init__()
        self.route(BusIn, self.on_bus_message)
        self.route(BusState, self._on_bus_state_change)

    def now(self) -> float:
        """Wall-clock: a bus core's stamps cross hosts."""
        return time.time()

    # the bus's callbacks: they run on the bus's threads, so they only tell the process

    def _on_bus_message(self, message: BusMessage) -> None:
        with contextlib.suppress(Exception):
            self.actor_ref.tell(BusIn(message.routing_key, message.body, message.sender))

    def _on_bus_state(self, connected: bool) -> None:
        with contextlib.suppress(Exception):
            self.actor_ref.tell(BusState(connected))

    def on_bus_message(self, message: BusIn, now: float) -> Any:
        self._perform(self._core().receive(message.routing_key, message.body, now))

    def _on_bus_state_change(self, message: BusState, now: float) -> None:
        core = self._core()
        self._perform(core.bus_up(now) if message.connected else core.bus_down(now))
