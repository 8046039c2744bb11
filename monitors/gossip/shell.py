"""Gossip and Mingle: the actor shells around GossipCore, on a `monitors.bus`.

The core decides; this Process does the I/O. It subscribes to the core's routing keys on the
bus, tells itself each message (bus handlers run on the bus's thread), feeds the core with the
wall-clock time (stamps cross hosts: LimitedSet, heartbeats), and performs the effects:
`Publish`/`Direct` on the bus, timers through `CoreTimers`, callbacks for joins, leaves and
losses, election handlers on their own threads, and futures for blocking elections.

A `Mingle` is a Gossip with `without_gossip=True`: it syncs the clock and the revoked set on
start and answers other nodes' hellos, and sends no heartbeats (Celery's Mingle bootstep on
its own).

The node monitor, when given, tells it whether this node is paused (a minority side): a
paused node never wins an election.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from monitors.bus import Bus, BusError, connect_bus
from monitors.core_shell import BusCoreShell, BusIn
from monitors.effects import perform_all
from monitors.gossip import wire
from monitors.gossip.effects import (
    Direct,
    ElectionDecided,
    ElectionFailed,
    MingleDone,
    NodeJoined,
    NodeLeft,
    NodeLost,
    Publish,
    Revoked,
    RunElection,
)
from monitors.gossip.gossip_core import TIMER_HEARTBEAT, GossipCore
from monitors.node_monitor.shell import NodeEvent
from monitors.shell_effects import ShellEffects

__all__ = ["ElectionError", "Gossip", "Mingle", "elect", "wait_mingled"]

log = logging.getLogger("monitors.gossip")

Callback = Callable[[str], Any]


class ElectionError(RuntimeError):
    """An election ended without a winner (its deadline passed, gossip is off, ...)."""


@dataclass(frozen=True)
class _StartElection:
    """`elect()`'s ask: start_election's arguments, as a message the shell routes."""

    eid: str
    topic: str
    action: Any
    timeout: float


class Gossip(BusCoreShell[GossipCore]):
    """One node's gossip (heartbeats, alive workers, revokes, elections) and mingle.

    `bus` is a URL for `connect_bus` (the shell owns the connection and closes it on stop) or
    a connected `Bus` (the caller owns it). `monitor` is the NodeMonitor's ref, if any.
    Keyword options go to GossipCore (heartbeat_interval, interval, mingle_timeout,
    without_mingle, without_gossip, revokes_max, revoke_expires, client, ...); with
    `client=True` (an executor) it subscribes to wire.CLIENT_PATTERNS only.
    """

    def __init__(
        self,
        bus: str | Bus,
        node: str,
        *,
        monitor: Any = None,
        exchange: str = "rabbitry",
        on_node_join: Callback | None = None,
        on_node_leave: Callback | None = None,
        on_node_lost: Callback | None = None,
        on_revoked: Callable[[tuple[str, ...]], Any] | None = None,
        **core_options: Any,
    ) -> None:
        super().__init__()
        self._bus_spec = bus
        self.node = node
        self._monitor = monitor
        self._exchange = exchange
        self._core_options = core_options
        self._callbacks: dict[type, list[Callable[..., Any]]] = {
            NodeJoined: [on_node_join] if on_node_join else [],
            NodeLeft: [on_node_leave] if on_node_leave else [],
            NodeLost: [on_node_lost] if on_node_lost else [],
            Revoked: [on_revoked] if on_revoked else [],
        }
        self._handlers: dict[str, Callable[[Any], Any]] = {}
        self._waiting: dict[str, list[concurrent.futures.Future[str]]] = {}
        self._mingled = threading.Event()
        self.bus: Bus | None = None
        # SetTimer, CancelTimer and Log (this core talks over the bus, not dist)
        self._effects = ShellEffects(self, self._timers, log, f"gossip {self.node}")
        self._subscriptions: list[Any] = []
        self.route(NodeEvent, self._on_node_event)
        self.route(_StartElection, self._on_start_election)

    # ---------------------------------------------------------------------- lifecycle

    def on_start(self) -> None:
        if isinstance(self._bus_spec, str):
            heartbeat = float(self._core_options.get("heartbeat_interval", 2.0))
            # connect_timeout=None: a broker that is down at start is waited for in the
            # background (the core starts disconnected), it does not fail the start.
            self.bus = connect_bus(
                self._bus_spec,
                self.node,
                exchange=self._exchange,
                heartbeat_interval=heartbeat,
                connect_timeout=None,
            )
            self._own_bus = True
        else:
            self.bus = self._bus_spec
            self._own_bus = False
        bus = self.bus
        self.core = GossipCore(
            self.node, os.getpid(), connected=bus.connected, **self._core_options
        )
        patterns = wire.CLIENT_PATTERNS if self.core.client else wire.PATTERNS
        # inline: both only tell this process, so they run where the bus reads, without the
        # hop through the bus's own thread (a thread wake-up per message; docs/gossip.md)
        for pattern in patterns:
            self._subscriptions.append(bus.subscribe(pattern, self._on_bus_message, inline=True))
        bus.add_state_listener(self._on_bus_state, inline=True)
        if self._monitor is not None:
            monitor = self._monitor.proxy()
            monitor.subscribe(self.actor_ref).get(timeout=10)
            if monitor.is_paused().get(timeout=10):
                self._perform(self.core.set_paused(True, time.time()))
        self._perform(self.core.start(time.time()))

    def on_stop(self) -> None:
        self._shutdown()

    def on_failure(self, *_exc_info: Any) -> None:
        self._shutdown()

    def on_kill(self) -> None:
        self._shutdown(say_goodbye=False)

    def _shutdown(self, say_goodbye: bool = True) -> None:
        core, bus = self.core, self.bus
        if core is not None and bus is not None and say_goodbye:
            with contextlib.suppress(Exception):
                self._perform(core.stop(time.time()))  # worker-offline
        self._timers.clear()
        for sub in self._subscriptions:
            with contextlib.suppress(Exception):
                sub.cancel()
        self._subscriptions.clear()
        if bus is not None:
            with contextlib.suppress(Exception):
                bus.remove_state_listener(self._on_bus_state)
            if self._own_bus:
                with contextlib.suppress(Exception):
                    bus.close()
        if self._monitor is not None:
            with contextlib.suppress(Exception):
                self._monitor.proxy().unsubscribe(self.actor_ref)
        for futures in self._waiting.values():
            for future in futures:
                if not future.done():
                    future.set_exception(ElectionError(f"gossip on {self.node} stopped"))
        self._waiting.clear()

    # ---------------------------------------------------------------------- the API

    def status(self) -> dict[str, Any]:
        """Clock, alive workers, revoked count, bus state, mingle and elections."""
        assert self.core is not None
        return self.core.status()

    def alive_workers(self) -> list[str]:
        assert self.core is not None
        return self.core.alive_workers(time.time())

    def clock(self) -> int:
        assert self.core is not None
        return self.core.clock.value

    def is_revoked(self, task_id: str) -> bool:
        assert self.core is not None
        return self.core.is_revoked(task_id)

    def revoked_ids(self) -> list[str]:
        """Every id in the revoked set now (at most its maxlen), for callers in other processes
        that check many ids at once (a Spark task asks once, then tests ids locally)."""
        assert self.core is not None
        return [str(item) for item in self.core.revoked]

    def revoke(self, ids: Iterable[str]) -> None:
        """Revoke task ids here and on every node of the bus."""
        assert self.core is not None
        self._perform(self.core.revoke(list(ids), time.time()))

    def register_election_handler(self, topic: str, fn: Callable[[Any], Any]) -> None:
        """`fn(action)` runs on the node that wins an election on `topic`."""
        self._handlers[topic] = fn

    def add_callback(self, event: str, fn: Callable[..., Any]) -> None:
        """`event` is node_join, node_leave, node_lost (fn(node)) or revoked (fn(ids))."""
        kinds: dict[str, type] = {
            "node_join": NodeJoined,
            "node_leave": NodeLeft,
            "node_lost": NodeLost,
            "revoked": Revoked,
        }
        if event not in kinds:
            raise ValueError(f"unknown gossip event {event!r}; expected one of {sorted(kinds)}")
        self._callbacks[kinds[event]].append(fn)

    def election(self, eid: str, topic: str, action: Any = None) -> None:
        """Celery's election(id, topic, action): fire and forget."""
        assert self.core is not None
        self._perform(self.core.election(eid, topic, action, time.time()))

    def start_election(
        self, eid: str, topic: str, action: Any = None, timeout: float = 10.0
    ) -> concurrent.futures.Future[str]:
        """Start election `eid`; the future gets the winner's node name, or ElectionError.
        Use `elect()` to wait for it from another thread."""
        assert self.core is not None
        future: concurrent.futures.Future[str] = concurrent.futures.Future()
        self._waiting.setdefault(eid, []).append(future)
        self._perform(self.core.elect(eid, topic, action, timeout, time.time()))
        return future

    def _on_start_election(
        self, message: _StartElection, now: float
    ) -> concurrent.futures.Future[str]:
        return self.start_election(message.eid, message.topic, message.action, message.timeout)

    def mingled_event(self) -> threading.Event:
        """Set once the start-up sync is over; wait on it with `wait_mingled(ref)`, never
        inside this process's own handler."""
        return self._mingled

    # ---------------------------------------------------------------------- events

    # The incoming half is BusCoreShell's (monitors/core_shell.py): bus messages, the bus's
    # state, timers; and the node monitor's pause and resume.

    def on_bus_message(self, message: BusIn, now: float) -> None:
        core = self._core()
        self._perform(core.receive(message.routing_key, message.body, now, message.sender))

    def on_timer(self, key: str, now: float, data: Any) -> None:
        if key == TIMER_HEARTBEAT:
            with contextlib.suppress(OSError):
                self._core().set_stats(loadavg=list(os.getloadavg()))
        super().on_timer(key, now, data)

    def _on_node_event(self, message: NodeEvent, now: float) -> None:
        if message.event in ("paused", "resumed"):
            self._perform(self._core().set_paused(message.event == "paused", now))

    # ---------------------------------------------------------------------- effects

    def _perform(self, effects: Iterable[Any]) -> None:
        perform_all(effects, self._perform_one, log, f"gossip {self.node}")

    def _perform_one(self, effect: Any) -> None:
        if self._effects.perform(effect):
            return
        kind = type(effect)
        bus = self.bus
        assert bus is not None
        if kind is Publish:
            # worker-offline goes out as the bus closes: confirm it, or closing drops it
            confirm = effect.routing_key == wire.OFFLINE
            try:
                bus.publish(effect.routing_key, effect.body, confirm=confirm, timeout=2.0)
            except BusError as exc:  # counted by the bus; the core resends what matters
                log.debug("gossip %s: publish %s failed: %s", self.node, effect.routing_key, exc)
        elif kind is Direct:
            try:
                bus.send(effect.node, effect.routing_key, effect.body)
            except BusError as exc:
                log.debug("gossip %s: send to %s failed: %s", self.node, effect.node, exc)
        elif kind in (NodeJoined, NodeLeft, NodeLost):
            level = logging.INFO if kind is NodeLost else logging.DEBUG
            log.log(level, "gossip %s: %s %s", self.node, kind.__name__, effect.node)
            self._call(kind, effect.node)
        elif kind is Revoked:
            self._call(Revoked, effect.ids)
        elif kind is RunElection:
            self._run_election(effect)
        elif kind is ElectionDecided:
            # DEBUG: the core's own Log effect ("node elected" / "I won the election") says
            # it at INFO already; two INFO lines per node per election were a quarter of a
            # storm's log lines (docs/gossip.md)
            log.debug(
                "gossip %s: %s elected for %r (%s)",
                self.node,
                effect.winner,
                effect.topic,
                effect.election_id,
            )
            for future in self._waiting.pop(effect.election_id, []):
                if not future.done():
                    future.set_result(effect.winner)
        elif kind is ElectionFailed:
            log.warning(
                "gossip %s: election %s failed: %s", self.node, effect.election_id, effect.reason
            )
            for future in self._waiting.pop(effect.election_id, []):
                if not future.done():
                    future.set_exception(
                        ElectionError(f"election {effect.election_id!r} failed: {effect.reason}")
                    )
        elif kind is MingleDone:
            if effect.all_alone and not effect.skipped:
                log.info("gossip %s: mingle: all alone", self.node)
            elif not effect.skipped:
                log.info(
                    "gossip %s: mingle: synced with %d nodes", self.node, len(effect.synced_with)
                )
            self._mingled.set()
        else:
            log.error("gossip %s: unknown effect %r dropped", self.node, effect)

    def _call(self, kind: type, arg: Any) -> None:
        for fn in list(self._callbacks[kind]):
            try:
                fn(arg)
            except Exception:  # Celery: "Ignored error from handler"
                log.exception("gossip %s: ignored error from handler %r", self.node, fn)

    def _run_election(self, effect: RunElection) -> None:
        handler = self._handlers.get(effect.topic)
        if handler is None:
            log.error(
                "gossip %s: won %r, but no handler for topic %r",
                self.node,
                effect.election_id,
                effect.topic,
            )
            return
        log.debug("gossip %s: I won the election %r", self.node, effect.election_id)  # as above

        def run() -> None:
            try:
                handler(effect.action)
            except Exception:
                log.exception("gossip %s: election handler for %r failed", self.node, effect.topic)

        # A handler may take long (a Redis master switch): it must not hold up the gossip.
        threading.Thread(target=run, name=f"election-{effect.topic}", daemon=True).start()


class Mingle(Gossip):
    """Mingle alone (Celery's Mingle bootstep): sync on start, answer hellos, no heartbeats."""

    def __init__(self, bus: str | Bus, node: str, **options: Any) -> None:
        options["without_gossip"] = True
        options.setdefault("without_mingle", False)
        super().__init__(bus, node, **options)


def elect(ref: Any, eid: str, topic: str, action: Any = None, timeout: float = 10.0) -> str:
    """Run election `eid` on the Gossip process `ref` and return the winner's node name.

    Blocks the calling thread (never the gossip process); raises ElectionError if the election
    fails or no result comes within `timeout` seconds.
    """
    # A plain ask, not ref.proxy(): a proxy introspects every attribute of the actor when it
    # is made (pykka), which cost more CPU than the election itself when every node of a
    # storm asks at once (docs/gossip.md).
    future = ref.ask(_StartElection(eid, topic, action, timeout), timeout=10)
    try:
        return future.result(timeout + 1.0)
    except concurrent.futures.TimeoutError:
        raise ElectionError(f"election {eid!r}: no result within {timeout} s") from None


def wait_mingled(ref: Any, timeout: float | None = None) -> bool:
    """Wait, in the calling thread, until the Gossip or Mingle `ref` has synced at start."""
    return ref.proxy().mingled_event().get(timeout=10).wait(timeout)
