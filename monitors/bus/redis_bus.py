"""redis://: broadcasts over Redis pub/sub, direct sends through a per-node list.

Keys and channels, for exchange E and node N:
    E:bc:<routing key>   pub/sub channel of a broadcast; a bus PSUBSCRIBEs one glob per pattern
                         it has (redis_globs.py: a superset, since Redis's `*` also matches
                         dots) and filters with the topic matcher, so Redis delivers a
                         broadcast only to the nodes that listen for it
    E:direct:N           list of N's direct frames (LPUSH by senders, RPOP by N): a direct send
                         survives until N reads it, for up to `direct_expires` without a push
    E:wake:N             pub/sub channel that tells N "your list has something" (no payload)

Threads: a reader (pub/sub connection, the wake-ups, draining the list) that owns `connected`,
and a sender that owns the publishing connection. The reader sleeps in select() on its pub/sub
socket and a local wake-up socket until Redis sends something, a pattern changes or its next
PING or drain is due, instead of polling: a `rabbitry swarm` process holds hundreds of buses,
and ten polls a second each kept its CPU busy doing nothing. redis-py's own retries are turned off: the
bus does its own reconnecting, with backoff, and must see every failure to report it.
"""

from __future__ import annotations

import collections
import contextlib
import select
import socket
import threading
import time
from typing import Any, cast

import redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

from monitors.bus.backoff import Backoff
from monitors.bus.base import Bus, log
from monitors.bus.errors import BusUnavailable
from monitors.bus.outbox import BIND, BROADCAST, UNBIND, Request
from monitors.bus.redis_globs import GlobSet, glob_for

# Atomic "push unless full": LPUSH+LTRIM would silently drop the OLDEST frame of a full list,
# which may be a confirmed one; refusing the NEW one lets its sender know.
_PUSH = """
local n = redis.call('LLEN', KEYS[1])
if n >= tonumber(ARGV[2]) then return -1 end
redis.call('LPUSH', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PUBLISH', KEYS[2], '')
return n + 1
"""


def _no_driver_info() -> dict[str, Any]:
    """Client options that skip CLIENT SETINFO. redis-py otherwise reads its own package
    metadata (importlib.metadata, an email-header parse) for every client it makes, and sends
    two more commands on every connect: 20 ms of a swarm member's start, for a label we
    replace with client_name anyway. Newer redis-py takes driver_info; older ones lib_*."""
    try:
        import redis.driver_info  # noqa: F401
    except ImportError:
        return {"lib_name": None, "lib_version": None}
    return {"driver_info": None}


_CLIENT_OPTIONS = _no_driver_info()

_PING_EVERY = 2.0  # seconds between PINGs on the pub/sub connection, when it is otherwise quiet
_DEAD_AFTER = 5.0  # no reply at all for this long: the connection is dead (blackhole, not reset)
# Re-read the direct list without a wake-up: soon while frames wait for room in the inbox
# (backpressure: no new wake-up comes for them), rarely otherwise (a wake-up published while
# subscribed cannot be missed; the drain at each (re)subscription covers the gaps).
_DRAIN_FULL_EVERY = 1.0
_DRAIN_EVERY = 5.0
_POP_BATCH = 100


class RedisBus(Bus):
    scheme = "redis"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stop = threading.Event()
        self._bc_prefix = f"{self.exchange}:bc:"
        self._wake_channel = f"{self.exchange}:wake:{self.node}"
        self._drain_soon = False  # set by the first subscription: read the list now
        # Pattern changes for the reader thread, which owns the pub/sub connection: it
        # (un)subscribes their globs and finishes a BIND request once Redis confirms it.
        self._glob_changes: collections.deque[Request] = collections.deque()
        self._globs = GlobSet()  # confirmed on the current connection (reader thread only)
        # Wakes the reader from its select(): a pattern change, a drain asked for, the stop.
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._waiting: dict[str, list[Request]] = {}  # glob -> BIND requests (reader only)
        self._reader = threading.Thread(
            target=self._read_loop, name=self._thread_name("reader"), daemon=True
        )
        self._sender = threading.Thread(
            target=self._send_loop, name=self._thread_name("sender"), daemon=True
        )

    def _list_key(self, node: str) -> str:
        return f"{self.exchange}:direct:{node}"

    def _client(self, timeout: float = 5.0) -> redis.Redis:
        """A fresh client with redis-py's retries off; timeouts bound every blocking call."""
        tls: dict[str, Any] = {}
        if self.url.tls:  # rediss://: redis-py's own TLS, verifying the server and its name
            tls = {
                "ssl": True,
                "ssl_cert_reqs": "required",
                "ssl_check_hostname": True,
                "ssl_ca_certs": self.url.cafile,
                "ssl_certfile": self.url.certfile,
                "ssl_keyfile": self.url.keyfile,
            }
        return redis.Redis(
            **tls,
            host=self.url.host,
            port=self.url.port,
            db=self.url.db,
            username=self.url.username,
            password=self.url.password,
            socket_connect_timeout=timeout,
            socket_timeout=timeout,
            socket_keepalive=True,
            retry=Retry(NoBackoff(), 0),
            client_name=f"rabbitry-bus:{self.exchange}:{self.node}",
            # each client belongs to one thread; one connection of its own spares every
            # command the pool's check for stray data (three system calls, each letting go
            # of the GIL: a wait in line for it when many nodes share a process)
            single_connection_client=True,
            **_CLIENT_OPTIONS,
        )

    def _start(self) -> None:
        super()._start()
        self._reader.start()
        self._sender.start()

    def _shutdown(self) -> None:
        self._stop.set()
        self._outbox.wake()
        self._wake_reader()
        for thread in (self._reader, self._sender):
            if thread.is_alive():
                thread.join(10)
        for sock in (self._wake_r, self._wake_w):
            sock.close()

    def _wake_reader(self) -> None:
        with contextlib.suppress(OSError):  # full (a wake-up is pending anyway) or closed
            self._wake_w.send(b"x")

    def _pattern_added(self, pattern: str) -> Request:
        request = Request(BIND, pattern)
        self._glob_changes.append(request)
        self._drain_soon = True
        self._wake_reader()
        return request

    def _pattern_removed(self, pattern: str) -> None:
        self._glob_changes.append(Request(UNBIND, pattern))
        self._wake_reader()

    def _glob_counts(self) -> collections.Counter[str]:
        return collections.Counter(glob_for(self._bc_prefix, p) for p in self._patterns_snapshot())

    def _apply_glob_changes(self, pubsub: Any) -> None:
        """Reader thread: (un)subscribe the globs of the patterns added or removed since."""
        if not self._glob_changes:
            return
        counts = self._glob_counts()
        while self._glob_changes:
            request = self._glob_changes.popleft()
            glob = glob_for(self._bc_prefix, request.routing_key)
            if request.kind == BIND:
                if glob in self._globs.active:
                    request.finish()
                else:
                    self._waiting.setdefault(glob, []).append(request)
                    pubsub.psubscribe(glob)
            elif counts[glob] == 0 and (glob in self._globs.active or glob in self._waiting):
                pubsub.punsubscribe(glob)

    def _glob_confirmed(self, glob: str) -> None:
        self._globs.confirmed(glob)
        for request in self._waiting.pop(glob, []):
            request.finish()

    def _backoff(self) -> Backoff:
        return Backoff(self.options.reconnect_initial, self.options.reconnect_max)

    # ---- receiving --------------------------------------------------------------------------

    def _read_loop(self) -> None:
        backoff = self._backoff()
        while not self._stop.is_set():
            client = pubsub = None
            try:
                client = self._client()
                pubsub = client.pubsub()
                self._listen(client, pubsub, backoff)
            except (RedisError, OSError) as exc:
                self._connect_failed(f"{type(exc).__name__}: {exc}")
            except Exception as exc:  # a bug must not end the thread: log it and reconnect
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("bus %s: unexpected error in the Redis reader", self.node)
            finally:
                for closable in (pubsub, client):
                    if closable is not None:
                        with contextlib.suppress(Exception):
                            closable.close()
            self._set_connected(False)
            if not self._stop.is_set():
                self._stop.wait(backoff.next())

    def _listen(self, client: redis.Redis, pubsub: Any, backoff: Backoff) -> None:
        self._globs.clear()
        self._glob_changes.clear()  # the snapshot below has every pattern there is
        globs = set(self._glob_counts())
        for glob in sorted(globs):
            pubsub.psubscribe(glob)
        pubsub.subscribe(self._wake_channel)
        # connected only once Redis confirmed every glob and the wake-up channel
        awaiting: set[Any] = {("psubscribe", g) for g in globs} | {("subscribe", None)}
        now = time.monotonic()
        last_heard, next_ping, next_drain = now, now + _PING_EVERY, now
        while not self._stop.is_set():
            self._apply_glob_changes(pubsub)
            message = pubsub.get_message(timeout=0)
            if message is None and not self._glob_changes and not self._drain_soon:
                due = min(next_ping, last_heard + _DEAD_AFTER)
                if awaiting == {"done"} and self._patterns:
                    due = min(due, next_drain)
                message = self._idle_wait(pubsub, due - time.monotonic())
            now = time.monotonic()
            if message is not None:
                last_heard = now
                kind = message["type"]
                if kind == "pmessage":
                    self._on_broadcast(message["pattern"], message["channel"], message["data"])
                elif kind == "message":
                    next_drain = now  # a wake-up: our list has something
                elif kind == "psubscribe":
                    glob = _text(message["channel"])
                    self._glob_confirmed(glob)
                    awaiting.discard((kind, glob))
                elif kind == "punsubscribe":
                    self._globs.dropped(_text(message["channel"]))
                elif kind == "subscribe":
                    awaiting.discard((kind, None))
                if kind in ("psubscribe", "subscribe") and awaiting == set():
                    awaiting = {"done"}
                    self._set_connected(True)
                    backoff.reset()
            # The list is read only once something is subscribed: frames queued for this node
            # before it subscribed must wait for their handlers, not become "unrouted".
            connected = awaiting == {"done"}
            if connected and self._patterns and (now >= next_drain or self._drain_soon):
                self._drain_soon = False
                full = self._drain(client)
                next_drain = time.monotonic() + (_DRAIN_FULL_EVERY if full else _DRAIN_EVERY)
            if now >= next_ping:
                if now - last_heard >= _PING_EVERY:  # traffic already shows it alive
                    pubsub.ping()
                next_ping = now + _PING_EVERY
            if now - last_heard > _DEAD_AFTER:
                raise ConnectionError(f"no reply from Redis for {_DEAD_AFTER:g} s")

    def _on_broadcast(self, glob: Any, channel: bytes, data: Any) -> None:
        name = _text(channel)
        if self._globs.owner(name) != _text(glob):
            return  # another of our globs matches it too: that copy is the one handled
        key = name[len(self._bc_prefix) :]
        if not isinstance(data, bytes):
            data = str(data).encode()
        self._receive(data, direct=False, expect_rk=key)

    def _idle_wait(self, pubsub: Any, timeout: float) -> dict[str, Any] | None:
        """Sleep until Redis sends something, the reader is woken, or `timeout`; then the
        message that came, if any. Over TLS, decrypted bytes may wait in the SSL object where
        select() cannot see them, so there redis-py's own short poll is used instead."""
        timeout = max(0.0, timeout)
        connection = getattr(pubsub, "connection", None)
        sock = getattr(connection, "_sock", None)
        if self.url.tls or not isinstance(sock, socket.socket):
            return cast("dict[str, Any] | None", pubsub.get_message(timeout=min(timeout, 0.1)))
        # poll(), not select(): a swarm process has thousands of descriptors, past FD_SETSIZE
        poller = select.poll()
        try:
            fd = sock.fileno()
            poller.register(fd, select.POLLIN)
            poller.register(self._wake_r.fileno(), select.POLLIN)
            ready = {f for f, _ in poller.poll(timeout * 1000)}
        except (OSError, ValueError):  # closed under us: the next read says how
            return None
        if self._wake_r.fileno() in ready:
            with contextlib.suppress(OSError):
                self._wake_r.recv(4096)
        if fd in ready:
            return cast("dict[str, Any] | None", pubsub.get_message(timeout=0))
        return None

    def _drain(self, client: redis.Redis) -> bool:
        """Take direct frames from our list, never more than the inbox has room for: what we
        cannot take yet stays safe in Redis (backpressure instead of loss). True if frames
        may be left for want of room."""
        while not self._stop.is_set():
            room = min(self._inbox_room(), _POP_BATCH)
            if room <= 0:
                return True
            # with a count, RPOP answers a list (or nil); our clients never decode responses
            frames = cast("list[bytes] | None", client.rpop(self._list_key(self.node), room))
            if not frames:
                return False
            for frame in frames:
                self._receive(frame, direct=True)
            if len(frames) < room:
                return False
        return False

    # ---- sending ----------------------------------------------------------------------------

    def _send_loop(self) -> None:
        backoff = self._backoff()
        client: redis.Redis | None = None
        push = None
        while not self._stop.is_set():
            request = self._outbox.get(timeout=5.0)  # the stop wakes it
            if request is None or not request.start():
                continue
            try:
                if client is None:
                    client = self._client()
                    push = client.register_script(_PUSH)
                self._send_one(client, push, request)
                backoff.reset()
            except (RedisError, OSError) as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                if client is not None:
                    client.close()
                client = None
                self._failed(request, backoff)
            except Exception as exc:  # a bug: fail this request, keep the thread
                log.exception("bus %s: unexpected error in the Redis sender", self.node)
                request.finish(BusUnavailable(f"internal error: {exc!r}"))
        if client is not None:
            client.close()

    def _send_one(self, client: redis.Redis, push: Any, request: Request) -> None:
        if request.kind == BROADCAST:
            client.publish(self._bc_prefix + request.routing_key, request.frame)
            self._count("published")
            request.finish()
            return
        assert request.node is not None
        expires_ms = int(self.options.direct_expires * 1000)
        args = [request.frame, self.options.direct_max, expires_ms]
        keys = [self._list_key(request.node), f"{self.exchange}:wake:{request.node}"]
        if push(keys=keys, args=args) == -1:
            error = BusUnavailable(
                f"{request.describe}: the node's queue is full "
                f"({self.options.direct_max} messages); is the node running?"
            )
            if not request.confirm:
                self._count("dropped_unconfirmed")
            request.finish(error)
            return
        self._count("sent")
        request.finish()

    def _failed(self, request: Request, backoff: Backoff) -> None:
        """A Redis error on `request`: retry a confirmed one while its caller waits (the
        attempt may have landed, so a retry can duplicate: at-least-once), drop the rest."""
        if request.confirm and request.remaining() > 0:
            request.retry_later()
            self._outbox.put_front(request)
            self._stop.wait(min(backoff.next(), max(0.0, request.remaining())))
            return
        if request.confirm:
            request.finish(
                BusUnavailable(
                    f"{request.describe}: not confirmed, Redis failed: {self.last_error}"
                )
            )
        else:
            self._count("dropped_unconfirmed")
            request.finish()


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
