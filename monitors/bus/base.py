"""The Bus: what every backend shares.

A backend only moves frames: it gives received bytes to `_receive` and takes publishes from
`_transmit`. Everything else lives here once: encoding and checking (so memory:// behaves like
the brokers), subscriptions and topic matching, the bounded inbox and the dispatcher thread that
runs handlers, state listeners, stats and close.

Handlers run on the dispatcher thread, never on the publisher's thread or a backend's I/O thread,
and no lock is held while they run. So a handler may publish (even with confirm=True), subscribe,
cancel or close the bus without deadlocking anything.

The one exception is asked for: `subscribe(..., inline=True)` and `add_state_listener(...,
inline=True)` run on the thread that received the frame or saw the link change, before anything
is queued, for handlers that only hand the message on (an actor shell's tell). That saves the
hop through the dispatcher thread, a thread wake-up per message: with ten nodes in one process
a third of the cost of a delivery (docs/gossip.md). Messages and state changes reach inline
handlers in the order the backend saw them, as queued ones do.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, ClassVar

from monitors.bus.envelope import BadFrame, BusMessage, decode, encode, to_message
from monitors.bus.errors import BusError, BusUnavailable
from monitors.bus.options import BusOptions, validate_node
from monitors.bus.outbox import BROADCAST, DIRECT, Outbox, Request
from monitors.bus.topic import topic_matches, validate_pattern
from monitors.bus.urls import BusURL
from monitors.retry_log import RetryLog

log = logging.getLogger("monitors.bus")

Handler = Callable[[BusMessage], Any]
StateListener = Callable[[bool], Any]

STAT_KEYS = (
    "published",  # broadcasts handed to the broker
    "sent",  # direct sends handed to the broker
    "received",  # valid frames taken from the broker
    "delivered",  # handler calls
    "unrouted",  # valid frames no subscription matched
    "handler_errors",  # handler calls that raised
    "dropped_bad",  # invalid frames (not JSON, wrong version, too big, ...)
    "dropped_unconfirmed",  # unconfirmed publishes lost to a disconnected or failing broker
    "dropped_outgoing_full",  # unconfirmed publishes refused by a full outgoing buffer
    "dropped_incoming_full",  # received messages refused by a full inbox
    "returned",  # unconfirmed direct sends the broker could not route (no such node)
    "confirm_failures",  # confirmed publishes that raised BusUnavailable
    "reconnects",  # times the bus got its broker back after losing it
)

_STATE = object()  # marks a state change in the inbox


class Subscription:
    """A handler for a routing-key pattern. `cancel()` stops deliveries (a handler already
    running finishes); it is idempotent. `inline`: see `Bus.subscribe`."""

    def __init__(self, bus: Bus, pattern: str, handler: Handler, inline: bool = False) -> None:
        self.bus, self.pattern, self.handler = bus, pattern, handler
        self.inline = inline
        self.active = True

    def cancel(self) -> None:
        self.bus._cancel(self)

    def __repr__(self) -> str:
        state = "active" if self.active else "cancelled"
        return f"<Subscription {self.pattern!r} {state} on {self.bus.node}>"


class _RateLimitedLog:
    """Logs the first event of a kind at once and then at most once per `every` seconds with a
    count: an overflow or a hostile peer must not turn the log into the next overflow."""

    def __init__(self, every: float = 5.0) -> None:
        self.every = every
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self._lock = threading.Lock()

    def warning(self, key: str, message: str, *args: Any) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(key, -1e9) < self.every:
                self._suppressed[key] = self._suppressed.get(key, 0) + 1
                return
            self._last[key] = now
            suppressed = self._suppressed.pop(key, 0)
        if suppressed:
            message += " (and %d more like it since the last report)"
            args = (*args, suppressed)
        log.warning(message, *args)


class Bus:
    """Broker pub/sub for one node. Made by `connect_bus`; see docs/bus.md."""

    scheme: ClassVar[str] = ""

    def __init__(self, url: BusURL, node: str, options: BusOptions) -> None:
        self.url, self.node, self.options = url, validate_node(node), options
        self.exchange = options.exchange
        self._lock = threading.Lock()  # subscriptions, listeners, stats, connected
        self._state_changed = threading.Condition(self._lock)
        self._stats = dict.fromkeys(STAT_KEYS, 0)
        self._subs: tuple[Subscription, ...] = ()  # copy-on-write: the dispatcher reads freely
        # the same, split: handlers called where the frame arrives, and whether any is queued
        self._inline_subs: tuple[Subscription, ...] = ()
        self._queued_subs = False
        self._patterns: dict[str, int] = {}  # pattern -> number of active subscriptions
        self._listeners: list[StateListener] = []
        self._inline_listeners: list[StateListener] = []
        self._connected = False
        self._ever_connected = False
        self._closed = False
        self.last_error = ""  # the latest broker error, for messages and debugging
        self._outbox = Outbox(options.max_outgoing)
        self._inbox: deque[Any] = deque()
        self._inbox_messages = 0
        self._inbox_cond = threading.Condition()
        self._stopping = False
        self._ratelog = _RateLimitedLog()
        # Reconnect attempts that keep failing: the first failure, one line per back-off
        # step with a count, and the recovery (monitors/retry_log.py).
        self._retries = RetryLog(log)
        self._dispatcher = threading.Thread(
            target=self._dispatch_loop, name=self._thread_name("dispatch"), daemon=True
        )

    # ---- public API -------------------------------------------------------------------------

    def publish(
        self, routing_key: str, body: dict[str, Any], *, confirm: bool = False, timeout: float = 5.0
    ) -> None:
        """Broadcast to every node subscribed to a matching pattern (this one too, unless
        echo=False). With confirm=True, block until the broker has taken it or raise
        BusUnavailable; without, never block on the network (a loss is counted in stats)."""
        self._check_open()
        _, frame = encode(self.node, routing_key, body, max_frame=self.options.max_frame)
        describe = f"publish {routing_key!r} on {self._where()}"
        deadline = time.monotonic() + timeout
        request = Request(BROADCAST, routing_key, frame, None, confirm, deadline, describe)
        self._transmit(request, timeout, describe)

    def send(
        self,
        node: str,
        routing_key: str,
        body: dict[str, Any],
        *,
        confirm: bool = False,
        timeout: float = 5.0,
    ) -> None:
        """Send to one node's queue; its handlers for patterns matching `routing_key` get it
        with direct=True. confirm=True: block until the broker holds it in that node's queue,
        or raise BusUnavailable (BusUnroutable if the node has no queue)."""
        self._check_open()
        validate_node(node)
        _, frame = encode(self.node, routing_key, body, to=node, max_frame=self.options.max_frame)
        describe = f"send {routing_key!r} to {node} on {self._where()}"
        deadline = time.monotonic() + timeout
        request = Request(DIRECT, routing_key, frame, node, confirm, deadline, describe)
        self._transmit(request, timeout, describe)

    def subscribe(self, pattern: str, handler: Handler, *, inline: bool = False) -> Subscription:
        """Call `handler(BusMessage)` on the bus thread for each message whose routing key
        matches `pattern` (AMQP topic: `*` one word, `#` zero or more). Returns once the broker
        routes the pattern to this node, if connected.

        `inline=True`: call it instead on the thread the frame arrives on (a backend's I/O
        thread; on memory:// the publisher's), without the hop through the bus thread. Only
        for a handler that returns at once and never calls the bus, such as a tell to an
        actor: while it runs, this node receives nothing."""
        self._check_open()
        validate_pattern(pattern)
        if not callable(handler):
            raise TypeError(f"handler must be callable, not {type(handler).__name__}")
        sub = Subscription(self, pattern, handler, inline)
        with self._lock:
            self._subs = (*self._subs, sub)
            self._split_subs()
            first = self._patterns.get(pattern, 0) == 0
            self._patterns[pattern] = self._patterns.get(pattern, 0) + 1
            # Ask the backend while holding the lock so that pattern changes reach it in order.
            waiter = self._pattern_added(pattern) if first else None
        if waiter is not None and self.connected:
            try:
                waiter.wait(self.options.connect_timeout or 5.0, f"subscribe {pattern!r}")
            except BusError as exc:
                # The pattern stays registered and is bound again on every reconnect.
                log.warning("bus %s: binding %r not confirmed yet: %s", self.node, pattern, exc)
        return sub

    @property
    def connected(self) -> bool:
        """True while the broker link works (subscriptions in place)."""
        return self._connected

    def add_state_listener(self, listener: StateListener, *, inline: bool = False) -> None:
        """Call `listener(connected)` on the bus thread at each change of `connected`.
        `inline=True`: on the backend's thread that saw the change, as `subscribe`'s inline
        handlers are, so that an inline subscriber hears of a reconnect before the messages
        that follow it."""
        with self._lock:
            (self._inline_listeners if inline else self._listeners).append(listener)

    def remove_state_listener(self, listener: StateListener) -> None:
        with self._lock:
            for listeners in (self._listeners, self._inline_listeners):
                if listener in listeners:
                    listeners.remove(listener)

    def wait_connected(self, timeout: float) -> bool:
        """Block until connected (True) or `timeout` passes (False)."""
        with self._state_changed:
            return (
                self._state_changed.wait_for(lambda: self._connected or self._closed, timeout)
                and self._connected
            )

    def stats(self) -> dict[str, int]:
        """Counters since connect (see STAT_KEYS), plus the current buffer sizes."""
        with self._lock:
            stats = dict(self._stats)
        stats["pending_outgoing"] = len(self._outbox)
        stats["pending_incoming"] = self._inbox_messages
        return stats

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Stop every thread and close every connection; idempotent. Waiting confirmed callers
        get BusError at once. Safe to call from a handler."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._connected = False
            self._state_changed.notify_all()
        self._outbox.fail_all(BusError(f"bus of {self.node} on {self._where()} was closed"))
        try:
            self._shutdown()
        finally:
            self._outbox.fail_all(BusError(f"bus of {self.node} on {self._where()} was closed"))
            with self._inbox_cond:
                self._stopping = True
                self._inbox.clear()
                self._inbox_messages = 0
                self._inbox_cond.notify_all()
            if self._dispatcher.is_alive() and threading.current_thread() is not self._dispatcher:
                self._dispatcher.join(10)

    def __enter__(self) -> Bus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "connected" if self._connected else "disconnected"
        return f"<{type(self).__name__} {self.node} on {self._where()} {state}>"

    # ---- for backends -----------------------------------------------------------------------

    def _start(self) -> None:
        """Start threads and begin connecting. Backends extend this."""
        self._dispatcher.start()

    def _shutdown(self) -> None:
        """Stop the backend's threads and close its connections (joining them)."""

    def _wake(self) -> None:
        """Tell the I/O thread there is work in the outbox."""
        self._outbox.wake()

    def _pattern_added(self, pattern: str) -> Request | None:
        """A pattern got its first subscription. Return a request to wait on, if any."""
        return None

    def _pattern_removed(self, pattern: str) -> None:
        """A pattern lost its last subscription."""

    def _patterns_snapshot(self) -> list[str]:
        with self._lock:
            return list(self._patterns)

    def _transmit(self, request: Request, timeout: float, describe: str) -> None:
        """Queue a publish for the I/O thread; for a confirmed one, wait for the outcome."""
        if not request.confirm and not self._connected:
            # A heartbeat that would arrive after the outage is stale anyway: drop and count.
            self._count("dropped_unconfirmed")
            if not self._ever_connected:  # the first connection is still being made: no outage
                log.debug("bus %s: not connected yet; dropping %s", self.node, describe)
                return
            self._ratelog.warning(
                "disconnected",
                "bus %s: not connected to %s; dropping unconfirmed messages (counted as dropped_unconfirmed)",
                self.node,
                self._where(),
            )
            return
        if not self._outbox.put(request):
            if request.confirm:
                self._count("confirm_failures")
                raise BusUnavailable(
                    f"{describe}: the outgoing buffer is full ({self.options.max_outgoing} "
                    "messages); the broker is slow or unreachable"
                )
            self._count("dropped_outgoing_full")
            self._ratelog.warning(
                "outgoing-full",
                "bus %s: outgoing buffer full (%d); dropping (counted as dropped_outgoing_full)",
                self.node,
                self.options.max_outgoing,
            )
            return
        self._wake()
        if request.confirm:
            try:
                request.wait(timeout, describe)
            except BusUnavailable:
                self._count("confirm_failures")
                raise

    def _receive(self, data: bytes, *, direct: bool, expect_rk: str | None = None) -> bool:
        """Check a frame from the broker and queue it for the handlers. Called on an I/O thread;
        never raises. Returns False if it was dropped."""
        try:
            envelope = decode(data, max_frame=self.options.max_frame)
            to = envelope.get("to")
            if direct and to != self.node:
                raise BadFrame(
                    "misaddressed", f"direct frame addressed to {to!r}, not to this node"
                )
            if not direct and to is not None:
                raise BadFrame("misaddressed", f"broadcast frame carries a 'to' ({to!r})")
            if expect_rk is not None and envelope["rk"] != expect_rk:
                raise BadFrame(
                    "key_mismatch",
                    f"routing key {envelope['rk']!r} differs from the broker's {expect_rk!r}",
                )
        except BadFrame as exc:
            self._count("dropped_bad")
            self._ratelog.warning(
                f"bad-frame:{exc.kind}",
                "bus %s: dropped a bad %s frame (%d bytes) from %s: %s",
                self.node,
                "direct" if direct else "broadcast",
                len(data) if hasattr(data, "__len__") else -1,
                self._where(),
                exc.reason,
            )
            return False
        if not direct and not self.options.echo and envelope["from"] == self.node:
            return True
        message = to_message(envelope)
        inline = self._inline_subs
        if inline:
            if self._closed:
                return False
            matched = self._deliver_to(inline, message)
            if not self._queued_subs:  # nothing for the bus thread: no hop, no queue
                self._count_delivery(1, matched)
                return True
            self._count("delivered", matched)
        with self._inbox_cond:
            if self._stopping:
                return False
            if self._inbox_messages >= self.options.max_incoming:
                full = True
            else:
                full = False
                self._inbox.append(message)
                self._inbox_messages += 1
                self._inbox_cond.notify()
        if full:
            self._count("dropped_incoming_full")
            self._ratelog.warning(
                "incoming-full",
                "bus %s: inbox full (%d messages; handlers too slow); dropping %r",
                self.node,
                self.options.max_incoming,
                message.routing_key,
            )
            return False
        self._count("received")
        return True

    def _inbox_room(self) -> int:
        return max(0, self.options.max_incoming - self._inbox_messages)

    def _set_connected(self, value: bool) -> None:
        """Backends report link changes here; listeners hear of them on the bus thread."""
        with self._lock:
            if self._closed or value == self._connected:
                return
            self._connected = value
            if value:
                if self._ever_connected:
                    self._stats["reconnects"] += 1
                self._ever_connected = True
            self._state_changed.notify_all()
            # Only listeners registered now hear of this change, even if it is delivered later.
            listeners = tuple(self._listeners)
            inline = tuple(self._inline_listeners)
        if value:
            self._retries.success(
                "broker", "bus %s: connected to %s", self.node, self._where(), always=True
            )
        else:
            log.warning(
                "bus %s: lost %s (%s); reconnecting", self.node, self._where(), self.last_error
            )
        for listener in inline:  # here, before any message read after the change
            try:
                listener(value)
            except Exception:
                log.exception("bus %s: state listener %r raised; ignored", self.node, listener)
        with self._inbox_cond:
            # State changes bypass the inbox bound: they are rare and must not be lost.
            self._inbox.append((_STATE, value, listeners))
            self._inbox_cond.notify()

    def _connect_failed(self, error: str) -> None:
        """A backend's (re)connect attempt failed with `error`: logged with back-off."""
        self.last_error = error
        self._retries.failure(
            "broker",
            "bus %s: cannot reach %s: %s",
            self.node,
            self._where(),
            error,
            level=logging.WARNING,
        )

    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._stats[key] += n

    def _count_delivery(self, received: int, delivered: int) -> None:
        """A message handled inline only: its counters under one hold of the lock."""
        with self._lock:
            stats = self._stats
            stats["received"] += received
            stats["delivered"] += delivered
            if not delivered:
                stats["unrouted"] += 1

    def _split_subs(self) -> None:
        """After `_subs` changed (under the lock): the inline ones, and whether any is not."""
        self._inline_subs = tuple(s for s in self._subs if s.inline)
        self._queued_subs = any(not s.inline for s in self._subs)

    def _where(self) -> str:
        return f"{self.url.redacted()} exchange {self.exchange!r}"

    def _thread_name(self, role: str) -> str:
        return f"rabbitry-bus-{self.scheme}-{role}:{self.node}"

    def _check_open(self) -> None:
        if self._closed:
            raise BusError(f"the bus of {self.node} on {self._where()} is closed")

    def _cancel(self, sub: Subscription) -> None:
        with self._lock:
            if not sub.active:
                return
            sub.active = False
            self._subs = tuple(s for s in self._subs if s is not sub)
            self._split_subs()
            left = self._patterns[sub.pattern] - 1
            if left:
                self._patterns[sub.pattern] = left
            else:
                del self._patterns[sub.pattern]
                if not self._closed:
                    self._pattern_removed(sub.pattern)

    # ---- the dispatcher thread --------------------------------------------------------------

    def _dispatch_loop(self) -> None:
        while True:
            with self._inbox_cond:
                while not self._inbox and not self._stopping:
                    self._inbox_cond.wait()
                if self._stopping:
                    return
                item = self._inbox.popleft()
                if isinstance(item, BusMessage):
                    self._inbox_messages -= 1
            if isinstance(item, BusMessage):
                self._deliver(item)
            else:
                self._notify_listeners(item[1], item[2])

    def _deliver(self, message: BusMessage) -> None:
        matched = self._deliver_to(self._subs, message, queued=True)
        self._count("delivered", matched)
        if not matched and not self._matches_inline(message):
            self._count("unrouted")

    def _matches_inline(self, message: BusMessage) -> bool:
        key = message.routing_key
        return any(topic_matches(s.pattern, key) for s in self._inline_subs)

    def _deliver_to(
        self, subs: tuple[Subscription, ...], message: BusMessage, queued: bool = False
    ) -> int:
        """Call the handlers of `subs` (the queued ones only, if `queued`) whose pattern
        matches; returns how many were called."""
        matched = 0
        key = message.routing_key
        for sub in subs:
            if not sub.active or (queued and sub.inline) or not topic_matches(sub.pattern, key):
                continue
            matched += 1
            try:
                sub.handler(message)
            except Exception:
                self._count("handler_errors")
                log.exception(
                    "bus %s: handler %r for %r raised on message %s from %s; the bus goes on",
                    self.node,
                    sub.handler,
                    sub.pattern,
                    message.id,
                    message.sender,
                )
        return matched

    def _notify_listeners(self, connected: bool, listeners: tuple[StateListener, ...]) -> None:
        with self._lock:
            current = list(self._listeners)
        for listener in [fn for fn in listeners if fn in current]:  # removed since: skip
            try:
                listener(connected)
            except Exception:
                log.exception("bus %s: state listener %r raised; ignored", self.node, listener)
