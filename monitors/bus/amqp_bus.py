"""amqp://: RabbitMQ (pika) with a topic exchange, as Celery's event queues and Beetle's system
exchange use it.

Per node N on exchange E:
  - E: a transient (non-durable) topic exchange; not auto-delete, because a node that only
    publishes has no binding to keep an auto-delete exchange alive, and publishing to a vanished
    exchange closes the channel.
  - E.events.N.<random>: exclusive, auto-delete, x-message-ttl = heartbeat_interval (Celery's
    queue_ttl: a stale heartbeat is worse than none), x-max-length = max_incoming (oldest
    dropped first). One binding per subscribed pattern. A new random suffix per connection,
    because after a silent network cut the broker may still hold the old exclusive queue.
  - E.direct.N: direct sends, through the default exchange. Not exclusive and not auto-delete,
    so it outlives a reconnect or a node restart; x-expires = direct_expires removes it once
    the node is gone for good. No TTL: a direct send is a command that must not vanish.
    x-max-length = direct_max with x-overflow reject-publish: a full queue refuses new
    messages (a confirmed sender is told) rather than dropping old ones.

pika's BlockingConnection is not thread-safe, so ONE I/O thread owns the connection and both
channels (plain and publisher-confirm). Callers queue requests and wake it with
add_callback_threadsafe; received frames go to the bus's inbox, and handlers run elsewhere.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from typing import Any

import pika
from pika.exceptions import AMQPError, NackError, UnroutableError

from monitors.bus.backoff import Backoff
from monitors.bus.base import Bus, log
from monitors.bus.errors import BusUnavailable, BusUnroutable
from monitors.bus.outbox import BIND, BROADCAST, UNBIND, Request

_DRAIN_BATCH = 500  # requests per loop turn, so consuming is never starved by publishing
_PREFETCH = 200  # unacked direct frames in flight to this node
_PROPERTIES = pika.BasicProperties(content_type="application/json", delivery_mode=1)


def event_queue_arguments(heartbeat_interval: float, max_incoming: int) -> dict[str, Any]:
    """Arguments of a node's broadcast queue (see the module docstring)."""
    return {"x-message-ttl": max(1, round(heartbeat_interval * 1000)), "x-max-length": max_incoming}


def direct_queue_arguments(direct_expires: float, direct_max: int) -> dict[str, Any]:
    """Arguments of a node's direct queue (see the module docstring)."""
    return {
        "x-expires": max(1, round(direct_expires * 1000)),
        "x-max-length": direct_max,
        "x-overflow": "reject-publish",
    }


class AmqpBus(Bus):
    scheme = "amqp"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if len(self.direct_queue_name(self.node).encode()) > 255:
            raise ValueError(
                f"exchange {self.exchange!r} and node {self.node!r} together are too long for "
                "an AMQP queue name (255 bytes)"
            )
        self._stop = threading.Event()
        self._conn: pika.BlockingConnection | None = None
        self._channel: Any = None  # plain: declare, bind, consume, unconfirmed publishes
        self._confirm_channel: Any = None  # confirm_delivery: confirmed publishes
        self.events_queue = ""
        self._inflight: Request | None = None
        self._consuming_direct = False
        self._io = threading.Thread(target=self._io_loop, name=self._thread_name("io"), daemon=True)

    def direct_queue_name(self, node: str) -> str:
        return f"{self.exchange}.direct.{node}"

    def _start(self) -> None:
        super()._start()
        self._io.start()

    def _shutdown(self) -> None:
        self._stop.set()
        self._wake()
        if self._io.is_alive():
            self._io.join(15)

    def _wake(self) -> None:
        conn = self._conn
        if conn is not None:
            # Closing or closed: the I/O loop notices on its own.
            with contextlib.suppress(Exception):
                conn.add_callback_threadsafe(_nothing)

    def _pattern_added(self, pattern: str) -> Request | None:
        request = Request(BIND, pattern)
        self._outbox.put(request, force=True)
        self._wake()
        return request

    def _pattern_removed(self, pattern: str) -> None:
        self._outbox.put(Request(UNBIND, pattern), force=True)
        self._wake()

    # ---- the I/O thread ---------------------------------------------------------------------

    def _io_loop(self) -> None:
        backoff = Backoff(self.options.reconnect_initial, self.options.reconnect_max)
        while not self._stop.is_set():
            try:
                self._open()
                self._set_connected(True)
                backoff.reset()
                while not self._stop.is_set():
                    assert self._conn is not None
                    self._conn.process_data_events(time_limit=0.2)
                    self._drain()
            except (AMQPError, OSError) as exc:
                self._connect_failed(f"{type(exc).__name__}: {exc}")
            except Exception as exc:  # a bug must not end the thread: log it and reconnect
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("bus %s: unexpected error in the AMQP I/O thread", self.node)
            finally:
                self._close_connection()
                self._set_connected(False)
                self._after_disconnect()
            if not self._stop.is_set():
                self._stop.wait(backoff.next())

    def _open(self) -> None:
        timeout = max(1.0, self.options.connect_timeout or 5.0)
        params = pika.ConnectionParameters(
            host=self.url.host,
            port=self.url.port,
            virtual_host=self.url.vhost,
            credentials=pika.PlainCredentials(self.url.username or "", self.url.password or ""),
            heartbeat=self.options.broker_heartbeat,
            blocked_connection_timeout=30,
            socket_timeout=timeout,
            stack_timeout=timeout * 2,
            connection_attempts=1,
            client_properties={"connection_name": f"rabbitry-bus {self.exchange} {self.node}"},
            # amqps://: pika's own TLS, verifying the broker's certificate and host name
            ssl_options=(
                pika.SSLOptions(self.url.ssl_context(), server_hostname=self.url.host)
                if self.url.tls
                else None
            ),
        )
        self._conn = conn = pika.BlockingConnection(params)
        channel = conn.channel()
        self._channel = channel
        channel.exchange_declare(self.exchange, "topic", durable=False, auto_delete=False)
        events = f"{self.exchange}.events.{self.node}.{uuid.uuid4().hex[:8]}"
        args = event_queue_arguments(self.options.heartbeat_interval, self.options.max_incoming)
        channel.queue_declare(events, exclusive=True, auto_delete=True, arguments=args)
        # Bind what is subscribed now; later changes arrive as BIND/UNBIND requests, which
        # were queued after the snapshot's pattern set changed (see Bus.subscribe).
        for pattern in self._patterns_snapshot():
            channel.queue_bind(events, self.exchange, routing_key=pattern)
        self.events_queue = events
        direct = self.direct_queue_name(self.node)
        args = direct_queue_arguments(self.options.direct_expires, self.options.direct_max)
        channel.queue_declare(direct, arguments=args)
        channel.basic_qos(prefetch_count=_PREFETCH)
        # Events: no-ack, as Celery does; they are stale in seconds anyway.
        channel.basic_consume(events, self._on_event, auto_ack=True)
        self._consuming_direct = False
        if self._patterns:
            self._consume_direct()
        channel.add_on_return_callback(self._on_return)
        self._confirm_channel = conn.channel()
        self._confirm_channel.confirm_delivery()

    def _consume_direct(self) -> None:
        """Start reading our direct queue. Only once something is subscribed: frames queued
        for this node before it subscribed must wait for their handlers in the broker, not be
        taken and found "unrouted". Acked once in our inbox, so frames in flight at a cut are
        redelivered."""
        if not self._consuming_direct:
            queue = self.direct_queue_name(self.node)
            self._channel.basic_consume(queue, self._on_direct, auto_ack=False)
            self._consuming_direct = True

    def _close_connection(self) -> None:
        conn, self._conn = self._conn, None
        self._channel = self._confirm_channel = None
        if conn is not None and conn.is_open:
            # Already broken: the socket is closed either way.
            with contextlib.suppress(Exception):
                conn.close()

    def _after_disconnect(self) -> None:
        """The link is gone: drop what only made sense on it, keep confirmed work to retry."""
        inflight, self._inflight = self._inflight, None
        keep: list[Request] = []
        for request in ([inflight] if inflight else []) + self._outbox.take_all():
            if request.kind in (BIND, UNBIND):
                # The next connection binds the current pattern set from scratch.
                request.finish(BusUnavailable("disconnected before the binding was made"))
            elif request.confirm and request.remaining() > 0 and not self._stop.is_set():
                request.retry_later()  # at-least-once: it may have landed before the cut
                keep.append(request)
            elif request.confirm:
                request.finish(
                    BusUnavailable(
                        f"{request.describe}: not confirmed, link lost: {self.last_error}"
                    )
                )
            else:
                self._count("dropped_unconfirmed")
                request.finish()
        for request in reversed(keep):
            self._outbox.put_front(request)

    def _drain(self) -> None:
        for _ in range(_DRAIN_BATCH):
            request = self._outbox.get(0)
            if request is None:
                return
            if request.kind in (BIND, UNBIND):
                self._bind(request)
                continue
            if not request.start():
                continue  # its caller gave up
            self._inflight = request
            self._publish(request)
            self._inflight = None

    def _bind(self, request: Request) -> None:
        try:
            if request.kind == BIND:
                self._channel.queue_bind(
                    self.events_queue, self.exchange, routing_key=request.routing_key
                )
                self._consume_direct()
            else:
                self._channel.queue_unbind(
                    self.events_queue, self.exchange, routing_key=request.routing_key
                )
        except BaseException:
            request.finish(
                BusUnavailable(f"{request.kind} {request.routing_key!r} failed: link lost")
            )
            raise
        request.finish()

    def _publish(self, request: Request) -> None:
        channel = self._confirm_channel if request.confirm else self._channel
        if request.kind == BROADCAST:
            channel.basic_publish(self.exchange, request.routing_key, request.frame, _PROPERTIES)
            self._count("published")
            request.finish()
            return
        assert request.node is not None
        queue = self.direct_queue_name(request.node)
        try:
            # mandatory: an unroutable send comes back (counted, or raised when confirmed)
            # instead of vanishing.
            channel.basic_publish("", queue, request.frame, _PROPERTIES, mandatory=True)
        except UnroutableError:
            self._count("returned")
            request.finish(
                BusUnroutable(
                    f"{request.describe}: no queue {queue!r}; the node is not running or has been gone longer than "
                    "direct_expires"
                )
            )
            return
        except NackError:
            request.finish(
                BusUnavailable(
                    f"{request.describe}: refused by the broker; "
                    f"its queue is probably full ({self.options.direct_max} messages)"
                )
            )
            return
        self._count("sent")
        request.finish()

    # ---- pika callbacks (on the I/O thread) -------------------------------------------------

    def _on_event(self, _channel: Any, method: Any, _props: Any, body: bytes) -> None:
        self._receive(body, direct=False, expect_rk=method.routing_key)

    def _on_direct(self, channel: Any, method: Any, _props: Any, body: bytes) -> None:
        self._receive(body, direct=True)
        channel.basic_ack(method.delivery_tag)

    def _on_return(self, _channel: Any, method: Any, _props: Any, _body: bytes) -> None:
        self._count("returned")
        self._ratelog.warning(
            "returned",
            "bus %s: a direct send to queue %r came back unroutable (node not running?)",
            self.node,
            method.routing_key,
        )


def _nothing() -> None:
    """Scheduled by _wake: running it makes process_data_events return at once."""
