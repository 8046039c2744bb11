"""NetKernel: a node's distribution layer (Erlang's net_kernel) as a supervisors.Process.

It listens for peers, connects to them (from an address book: how *this* node reaches each
peer), authenticates both ways (handshake.py), keeps one connection per pair, ticks
(ticks.py), delivers registered-name sends and calls, carries links and monitors across
(remote.py), and tells subscribers NodeUp/NodeDown.

The public methods are thread-safe and called directly on the object (`NetKernel.of(ref)`),
not through the mailbox: a send is a socket write from the caller's thread, and a call waits
only for its own reply. The Process's own thread does nothing but start and stop it, which is
what lets it sit in a supervision tree.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

import pykka
from pykka import ActorDeadError

from monitors.dist.connection import Connection
from monitors.dist.errors import (
    DistTimeout,
    FrameTooLarge,
    NodeUnreachable,
    RemoteCallError,
)
from monitors.dist.frames import FrameError, encode
from monitors.dist.gate import FailureGate
from monitors.dist.handshake import (
    NAME_IN_USE,
    NOK,
    NONCE_SIZE,
    NOT_ALLOWED,
    OK,
    ROLE_CONFLICT,
    Acceptor,
    Connector,
    Established,
    Failed,
    NeedDecision,
)
from monitors.dist.ioloop import IoLoop
from monitors.dist.messages import (
    CONNECTION_CLOSED,
    CONNECTION_SETUP_FAILED,
    DISCONNECT,
    Message,
    NodeDown,
    NodeUp,
)
from monitors.dist.name_check import PING, PONG, NameCheck, Pings, refused_log_line
from monitors.dist.names import (
    format_address,
    new_creation,
    parse_address,
    validate_node,
    validate_registered_name,
)
from monitors.dist.pending import PendingLoop
from monitors.dist.remote import _KERNELS, SIGNAL_FRAMES, RemoteRef, SignalRouter
from monitors.dist.tarpit import Tarpit
from monitors.dist.ticks import PeerDown, SendTick
from monitors.dist.tls_stream import TlsStream, TlsStreamError
from monitors.effects import SetTimer
from monitors.retry_log import RetryLog
from monitors.tls import TlsContexts, describe_san, peer_san, san_names_node
from supervisors import Process, format_reason

__all__ = ["NetKernel"]

log = logging.getLogger("monitors.dist")

_BY_URN: weakref.WeakValueDictionary[str, NetKernel] = weakref.WeakValueDictionary()
# Connect failures that retrying soon will not fix: the peer is not a dist peer of our kind
# (plain vs TLS), speaks another version, or refused our certificate or cookie. We back off.
_HOPELESS = frozenset({"garbage", "bad_version", "bad_cookie", "tls"})
# Refusals that no retry of this process can fix (name_check.py): it must not run.
_FOR_GOOD = frozenset({NAME_IN_USE, ROLE_CONFLICT, "role_checked"})
_TELL_AGAIN_AFTER = 60.0  # the same failure for the same peer is logged once a minute
# A TCP connect whose SYN got no answer within this is tried again with a fresh SYN (the
# kernel's own first retransmit comes only after 1 s, then 3 s, 7 s): a SYN dropped by a
# cut that has since healed must not hold the link down.
_SYN_RETRY = 0.25


class _Pending:
    """An outgoing connection attempt: who waits for it, and what auto-connect queued."""

    __slots__ = ("done", "frames", "queued", "superseded")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.frames: list[bytes] = []
        self.queued = 0
        self.superseded = False  # an incoming connection from the same node won instead


class _Slot:
    """Where a call's reply lands. A bare lock: the cheapest wake-up CPython has."""

    __slots__ = ("_lock", "error", "reply")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self.reply: dict[str, Any] | None = None
        self.error: Exception | None = None

    def set(self, reply: dict[str, Any]) -> None:
        self.reply = reply
        self._lock.release()

    def fail(self, error: Exception) -> None:
        self.error = error
        self._lock.release()

    def wait(self, timeout: float | None) -> bool:
        if timeout is None:
            return self._lock.acquire()
        return self._lock.acquire(timeout=max(timeout, 0.0))


class _Envelope:
    """A mailbox envelope with our own reply object (duck-typed as pykka's): the handler's
    thread writes the reply frame as it returns, so no thread sits between them."""

    __slots__ = ("message", "reply_to")

    def __init__(self, message: Any, reply_to: Any) -> None:
        self.message = message
        self.reply_to = reply_to


class _Reply:
    """Stands in for a pykka future: Process calls set()/set_exception() when the handler is
    done (or the process ends first). It must never raise into the handler's thread."""

    __slots__ = ("_conn", "_id", "_name")

    def __init__(self, conn: Connection, call_id: Any, name: str) -> None:
        self._conn = conn
        self._id = call_id
        self._name = name

    def set(self, value: Any = None) -> None:
        try:
            frame = {"v": 1, "t": "reply", "id": self._id, "ok": True, "m": value}
            data = encode(frame, self._conn.max_frame)
        except (TypeError, ValueError, FrameError) as exc:
            self.error("bad_reply", f"the reply of {self._name!r} is not a JSON frame: {exc}")
            return
        self._conn.write(data, block=False)

    def set_exception(self, exc_info: Any = None) -> None:
        exc = (exc_info or sys.exc_info())[1]
        if isinstance(exc, ActorDeadError):
            self.error("exit", f"{self._name!r} ended before replying")
        else:
            self.error("exception", format_reason(exc))

    def error(self, kind: str, detail: str) -> None:
        with contextlib.suppress(Exception):
            frame = {"v": 1, "t": "reply", "id": self._id, "ok": False, "kind": kind}
            frame["error"] = detail[:4096]
            self._conn.write(encode(frame), block=False)


def _roundtrip(msg: dict[str, Any]) -> dict[str, Any]:
    """What a message looks like after the wire: local delivery behaves as remote does."""
    return json.loads(json.dumps(msg, allow_nan=False))


def _check_limits(node: str, *, seconds: dict[str, Any], ban: Any, counts: dict[str, Any]) -> None:
    """The kernel's timing and size options, each with the error that names it."""
    for what, value in seconds.items():
        if not isinstance(value, int | float) or not value > 0:
            raise ValueError(f"{node}: {what} must be seconds > 0; got {value!r}")
    if not isinstance(ban, int | float) or ban < 0:
        raise ValueError(f"{node}: disconnect_ban must be seconds >= 0; got {ban!r}")
    for what, value in counts.items():
        if type(value) is not int or value < 1:
            raise ValueError(f"{node}: {what} must be an int >= 1; got {value!r}")


class NetKernel(Process):
    """One node's distribution layer. Start with `NetKernel.start(node, ...)`, or as a
    supervisor child; get the object for its API with `NetKernel.of(ref)`.

    - `node`: this node's name, `name@host`.
    - `listen`: "host:port" to listen on; port 0 picks a free port (see `address`).
    - `cookie`: the shared secret (bytes or str).
    - `peers`: {node: "host:port"}, how this node reaches each peer.
    - `net_ticktime`: a peer silent this long is down; ticks go out every quarter of it.
    - `disconnect_ban`: after `disconnect(node)`, no connection to it for this long.
    - `max_frame`: the largest frame accepted or sent, in bytes.
    - `handshake_timeout`: an incoming connection that has not finished its handshake within
      this is closed (default: net_ticktime, at most 7 s, as Erlang's net_setuptime).
    - `connect_timeout`: an outgoing attempt's TCP connect, and then its handshake, must each
      finish within this (default 1 s, the node monitor's ping interval, as RabbitMQ pings
      down nodes every second). An attempt that started during a cut thus never holds a link
      down for long after the heal: the next ping starts a fresh one.
    - `max_queue`: bytes queued per connection before `send` waits (busy dist port).
    - `max_handshakes`: pending incoming connections per source address; past it the oldest
      one from that address is closed, so a newcomer is never refused (pending.py). A pending
      connection costs no thread.
    - `creation`: normally left out: a fresh one per start.
    - `tls`: a monitors.tls.TlsContexts: every connection is then mutual TLS 1.3 with the
      cookie handshake inside, and a peer's certificate must name the node it claims to be.
    - `cookie_gate`: how long a failed cookie proof is held before its connection is closed,
      doubling per (address, claimed name) (the tarpit, tarpit.py).
    - `name_check_timeout`: how long a hello that claims the name of a node we hold a live
      link from waits for that link to answer a ping (name_check.py); default
      min(1 s, net_ticktime / 4). An outgoing handshake gets this much longer to finish.
    - `on_refused(reason, line)`: called (once) when a peer refused us for a reason this
      process cannot fix: `name_in_use` (a running node holds our name) or `role` (the
      cluster holds our name under the other role); the node exits 2 printing `line`
      (rabbitry/node.py). Without it we back off.
    - `role`: this node's role ("core" or "ephemeral"), said in the handshake.
    - `role_check(node, role)`: "" if a peer of that name may connect with that role, else
      why not (a core name attaching as ephemeral, or the other way round). It may block
      briefly (it asks the node monitor); it runs in the handshake's own thread.
    """

    DEFAULT_NET_TICKTIME: ClassVar[float] = 4.0

    def __init__(
        self,
        node: str,
        listen: str = "127.0.0.1:0",
        cookie: bytes | str = b"",
        peers: Mapping[str, str] | None = None,
        *,
        net_ticktime: float = 4.0,
        disconnect_ban: float = 1.0,
        max_frame: int = 1 << 20,
        handshake_timeout: float | None = None,
        connect_timeout: float = 1.0,
        max_queue: int = 8 << 20,
        max_handshakes: int = 256,
        creation: int | None = None,
        tls: TlsContexts | None = None,
        cookie_gate: FailureGate | None = None,
        name_check_timeout: float | None = None,
        on_refused: Callable[[str, str], None] | None = None,
        role: str = "core",
        role_check: Callable[[str, str], str] | None = None,
    ) -> None:
        super().__init__()
        self.node = validate_node(node)
        self._listen = parse_address(listen, f"{node}: listen")
        if isinstance(cookie, str):
            cookie = cookie.encode()
        if not isinstance(cookie, bytes | bytearray) or not cookie:
            raise ValueError(f"{node}: cookie must be non-empty bytes or str")
        self._cookie = bytes(cookie)
        handshake_timeout = _setup_time(handshake_timeout, net_ticktime)
        _check_limits(
            node,
            seconds={
                "net_ticktime": net_ticktime,
                "handshake_timeout": handshake_timeout,
                "connect_timeout": connect_timeout,
            },
            ban=disconnect_ban,
            counts={
                "max_frame": max_frame,
                "max_queue": max_queue,
                "max_handshakes": max_handshakes,
            },
        )
        self.net_ticktime = float(net_ticktime)
        self.disconnect_ban = float(disconnect_ban)
        self.max_frame = max_frame
        self.handshake_timeout = float(handshake_timeout)
        self.connect_timeout = float(connect_timeout)
        # Per peer: the first failed connect of an outage, then one line per back-off step,
        # then the recovery (a down peer is retried every second, by several callers).
        self._retries = RetryLog(log)
        self._max_queue = max_queue
        self.creation = creation if creation is not None else new_creation()
        self._addresses: dict[str, tuple[str, int]] = {}
        for peer, address in (peers or {}).items():
            validate_node(peer, f"{node}: peer name")
            self._addresses[peer] = parse_address(address, f"{node}: address of {peer}")
        self.address: str | None = None
        self.signals = SignalRouter(self)
        # One lock for the connection tables; per-connection state has its own (conn.lock).
        # Order: self._lock before conn.lock, never the other way round.
        self._lock = threading.RLock()
        self._conns: dict[str, Connection] = {}
        self._outgoing: dict[str, _Pending] = {}
        self._banned: dict[str, float] = {}
        self._names: dict[str, Any] = {}
        self._exposed: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
        self._subscribers: dict[str, Any] = {}
        self._call_ids = itertools.count(1)
        self._max_pending_per_address = max_handshakes
        self._pending_loop: PendingLoop | None = None
        self._stopped = threading.Event()
        self._running = False
        self._io: IoLoop | None = None  # reads, flushes and ticks every connection
        self._listener: socket.socket | None = None
        self._handshaking: set[socket.socket] = set()  # closed on stop, so no thread lingers
        self._threads: list[threading.Thread] = []
        self._tls = tls
        # The tarpit for failed cookie proofs (only the pending loop's thread uses it), and
        # peers we failed to reach for a reason that retrying soon cannot fix (TLS refused, a
        # plain/TLS mismatch, a wrong cookie), under _gate_lock. `_told` keeps logs to one
        # line per reason.
        self._gate_lock = threading.Lock()
        self._tarpit = Tarpit(cookie_gate)
        self._connect_gate = FailureGate(free=0, initial=1.0, maximum=30.0)
        self._told: dict[str, tuple[str, float]] = {}
        # The name check (name_check.py); its refusals by reason feed /metrics and the UI.
        self.names = NameCheck(self.net_ticktime, name_check_timeout, on_refused, role, role_check)
        _BY_URN[self.actor_urn] = self

    def __repr__(self) -> str:
        return f"<NetKernel {self.node} at {self.address}>"

    # ------------------------------------------------------------------ lifecycle

    @staticmethod
    def of(ref: Any) -> NetKernel:
        """The NetKernel object behind `ref` (what `NetKernel.start` returned)."""
        if isinstance(ref, NetKernel):
            return ref
        urn = getattr(ref, "actor_urn", None)
        kernel = _BY_URN.get(urn) if isinstance(urn, str) else None
        if kernel is None:
            raise ValueError(f"{ref!r} is not the ref of a NetKernel (or it has ended)")
        return kernel

    @property
    def is_running(self) -> bool:
        return self._running and not self._stopped.is_set()

    def on_start(self) -> None:
        host, port = self._listen
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(128)
        except OSError as exc:
            sock.close()
            raise OSError(
                exc.errno, f"{self.node}: cannot listen on {format_address(host, port)}: {exc}"
            ) from exc
        self._listener = sock
        self.address = format_address(host, sock.getsockname()[1])
        self._running = True
        _KERNELS.add(self)
        self._pending_loop = PendingLoop(
            self,
            sock,
            self._tarpit,
            deadline=self.handshake_timeout,
            per_address=self._max_pending_per_address,
        )
        self._io = IoLoop(self.node, self._run_ticks)
        self._io.start()
        thread = threading.Thread(
            target=self._pending_loop.run, name=f"dist-listener {self.node}", daemon=True
        )
        thread.start()
        self._threads.append(thread)
        log.info(
            "dist %s: listening on %s (creation %d, net_ticktime %g s, %s)",
            self.node,
            self.address,
            self.creation,
            self.net_ticktime,
            "mutual TLS 1.3" if self._tls is not None else "plain TCP, no TLS",
        )

    def on_stop(self) -> None:
        self._shutdown()

    def on_failure(self, *_exc_info: Any) -> None:
        self._shutdown()

    def on_kill(self) -> None:
        self._shutdown()

    def _shutdown(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        _KERNELS.discard(self)
        if self._pending_loop is not None:
            self._pending_loop.stop()  # it closes the listener's pending connections
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
        with self._lock:
            conns = list(self._conns.values())
            pendings = list(self._outgoing.values())
            self._outgoing.clear()
            handshaking = list(self._handshaking)
        for sock in handshaking:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for pending in pendings:
            pending.done.set()
        for conn in conns:
            self._connection_down(conn, DISCONNECT)
        if self._io is not None:
            self._io.stop()  # it finishes (and closes) what it still holds
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(2.0)
        if self._listener is not None:
            self._listener.close()
        for conn in conns:
            conn.finish()  # one published as we stopped never reached the loop
        log.info("dist %s: stopped", self.node)

    # ------------------------------------------------------------------ registry

    def register(self, name: str, ref: Any) -> None:
        """Register a local Process under `name`, for sends and calls from other nodes.

        Raises ValueError if another live process holds the name (Erlang's badarg).
        """
        validate_registered_name(name)
        if not hasattr(ref, "actor_inbox") or not hasattr(ref, "actor_urn"):
            raise TypeError(
                f"register({name!r}): expected the ActorRef of a local Process; got {ref!r}"
            )
        with self._lock:
            current = self._names.get(name)
            if current is not None and current is not ref and current.is_alive():
                raise ValueError(f"{name!r} is already registered on {self.node} to {current}")
            self._names[name] = ref

    def unregister(self, name: str) -> bool:
        """Forget `name`; True if it was registered."""
        with self._lock:
            return self._names.pop(name, None) is not None

    def whereis(self, name: str) -> Any:
        """The live ref registered as `name`, or None."""
        return self._resolve(name)

    def registered(self) -> list[str]:
        """The names registered now (with live processes)."""
        with self._lock:
            return sorted(name for name, ref in self._names.items() if ref.is_alive())

    def _resolve(self, key: str) -> Any:
        ref = self._exposed.get(key) if key.startswith("urn:") else self._names.get(key)
        if ref is not None and not ref.is_alive():
            return None
        return ref

    def _expose(self, ref: Any) -> None:
        """Let peers address a local process by its URN (a signal's sender, a linker)."""
        self._exposed[ref.actor_urn] = ref

    def remote_ref(self, node: str, name: str) -> RemoteRef:
        """A RemoteRef to `name` on `node` that goes through this kernel."""
        return RemoteRef(validate_node(node), name, self)

    # ------------------------------------------------------------------ address book

    def set_address(self, node: str, address: str | None) -> None:
        """Set (or with None, forget) how this node reaches `node`: "host:port"."""
        validate_node(node, "peer name")
        with self._lock:
            if address is None:
                self._addresses.pop(node, None)
            else:
                self._addresses[node] = parse_address(address, f"address of {node}")

    def addresses(self) -> dict[str, str]:
        """The address book: {node: "host:port"}."""
        with self._lock:
            return {node: format_address(*addr) for node, addr in self._addresses.items()}

    # ------------------------------------------------------------------ nodes

    def nodes(self) -> list[str]:
        """The nodes connected now (Erlang's nodes()), sorted."""
        with self._lock:
            return sorted(self._conns)

    def connecting(self) -> list[str]:
        """The nodes an outgoing connect attempt is under way to."""
        with self._lock:
            return sorted(self._outgoing)

    def peer_creation(self, node: str) -> int | None:
        """The creation of the connected `node`, or None if not connected."""
        conn = self._conns.get(node)
        return None if conn is None else conn.creation

    def monitor_nodes(self, subscriber: Any) -> None:
        """Deliver NodeUp/NodeDown to `subscriber` (any Process ref) from now on."""
        if not hasattr(subscriber, "tell"):
            raise TypeError(f"monitor_nodes: expected an ActorRef; got {subscriber!r}")
        with self._lock:
            self._subscribers[subscriber.actor_urn] = subscriber

    def demonitor_nodes(self, subscriber: Any) -> None:
        """Stop delivering NodeUp/NodeDown to `subscriber`."""
        with self._lock:
            self._subscribers.pop(subscriber.actor_urn, None)

    def _notify(self, event: NodeUp | NodeDown) -> None:
        """Called with self._lock held, so that subscribers see ups and downs in order."""
        for urn, ref in list(self._subscribers.items()):
            try:
                ref.tell(event)
            except ActorDeadError:
                self._subscribers.pop(urn, None)

    def connect(self, node: str, timeout: float | None = None) -> bool:
        """Connect to `node` if not connected (net_adm:ping); True if connected."""
        validate_node(node)
        if node == self.node or node in self._conns:
            return True
        with self._lock:
            if node in self._conns:
                return True
            pending = self._outgoing.get(node) or self._start_connect(node)
        if pending is None:
            return False
        # The connector's own deadlines: connect_timeout for TCP and as much for the
        # handshake, plus handshake_timeout if it waits for the peer's simultaneous connection.
        longest = self.connect_timeout * 2 + self.handshake_timeout + 1.0
        pending.done.wait(longest if timeout is None else timeout)
        return node in self._conns

    def disconnect(self, node: str) -> bool:
        """Drop the connection to `node` (NodeDown "disconnect") and refuse to connect to it,
        either way, for `disconnect_ban` seconds. True if it was connected."""
        validate_node(node)
        with self._lock:
            self._banned[node] = time.monotonic() + self.disconnect_ban
            conn = self._conns.get(node)
            pending = self._outgoing.pop(node, None)
        if pending is not None:
            pending.done.set()
        if conn is None:
            return False
        self._connection_down(conn, DISCONNECT)
        return True

    def block(self, nodes: Iterable[str], seconds: float) -> list[str]:
        """Fault injection: cut this node off from `nodes`, both ways, for `seconds`.

        Like RabbitMQ's test-suite dist proxy (block_traffic_between), but on one side only:
        the connections close as if the network reset them (NodeDown "connection_closed" here,
        the same on the peer), and neither side may connect again until the time is up, so
        the peers see a partition and the node monitors act on it. Returns the nodes that were
        connected. For partitioning a node whose peers' addresses we do not control (a Spark
        executor's node); tests with fixed addresses use the fault proxy instead.
        """
        if not isinstance(seconds, int | float) or seconds <= 0:
            raise ValueError(f"block: seconds must be a number > 0, got {seconds!r}")
        cut = []
        for node in nodes:
            validate_node(node)
            if node == self.node:
                continue
            with self._lock:
                self._banned[node] = max(
                    self._banned.get(node, 0.0), time.monotonic() + float(seconds)
                )
                conn = self._conns.get(node)
                pending = self._outgoing.pop(node, None)
            if pending is not None:
                pending.done.set()
            if conn is not None:
                cut.append(node)
                self._connection_down(conn, CONNECTION_CLOSED)
        log.warning("dist %s: blocked %s for %.1f s (fault injection)", self.node, cut, seconds)
        return cut

    def unblock(self, nodes: Iterable[str] | None = None) -> list[str]:
        """Fault injection: end a `block` early, for `nodes` (None: every blocked node).

        Tests hold a cut for as long as a check needs and then heal it at once, rather than
        guessing a duration that a loaded machine may outlast. Returns the nodes let through;
        reconnecting is left to whoever next needs the link, as after a timed block.
        """
        with self._lock:
            names = list(self._banned) if nodes is None else [n for n in nodes if n in self._banned]
            for node in names:
                self._banned.pop(node, None)
        log.warning("dist %s: unblocked %s (fault injection)", self.node, names)
        return names

    def _ban_left(self, node: str) -> float:
        until = self._banned.get(node)
        if until is None:
            return 0.0
        left = until - time.monotonic()
        if left <= 0:
            self._banned.pop(node, None)
            return 0.0
        return left

    def _why_unreachable(self, node: str) -> str:
        with self._lock:
            if self._stopped.is_set():
                return f"the NetKernel of {self.node} has stopped"
            left = self._ban_left(node)
            if left:
                return f"banned for {left:.2f} s more after disconnect() or block()"
            if node not in self._addresses:
                return f"{self.node} has no address for it (see peers= / set_address)"
            addr = format_address(*self._addresses[node])
        return f"could not connect to {addr} within the timeout (see the log)"

    # ------------------------------------------------------------------ send and call

    def _encode(self, frame: dict[str, Any], node: str, name: str, verb: str) -> bytes:
        try:
            return encode(frame, self.max_frame)
        except FrameError as exc:
            raise FrameTooLarge(f"{verb} to {name!r} on {node}: {exc}") from None
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"{verb} to {name!r} on {node}: the message must be a JSON object: {exc}"
            ) from None

    def send(self, node: str, name: str, msg: dict[str, Any]) -> None:
        """Send `msg` (a JSON object) to the process registered as `name` on `node`.

        Connects first if need be, without waiting (the message is queued meanwhile). As in
        Erlang, a message to a node that cannot be reached is dropped (logged at debug).
        Raises only for a bad message (TypeError) or one over max_frame (FrameTooLarge).
        """
        if type(msg) is not dict:
            raise TypeError(f"send to {name!r} on {node}: msg must be a dict; got {msg!r}")
        conn = self._conns.get(node)
        if conn is not None:
            data = self._encode({"v": 1, "t": "send", "to": name, "m": msg}, node, name, "send")
            if not conn.write(data):
                log.debug(
                    "dist %s: send to %r on %s dropped: connection closed", self.node, name, node
                )
            return
        if node == self.node:
            self._deliver_local(name, msg)
            return
        validate_node(node)
        data = self._encode({"v": 1, "t": "send", "to": name, "m": msg}, node, name, "send")
        with self._lock:
            conn = self._conns.get(node)
            if conn is None:
                pending = self._outgoing.get(node) or self._start_connect(node)
                if pending is None:
                    log.debug(
                        "dist %s: send to %r on %s dropped: %s",
                        self.node,
                        name,
                        node,
                        self._why_unreachable(node),
                    )
                elif pending.queued + len(data) > self._max_queue:
                    log.debug("dist %s: send to %s dropped: connect queue full", self.node, node)
                else:
                    pending.frames.append(data)
                    pending.queued += len(data)
                return
        conn.write(data)

    def send_many(self, node: str, name: str, msgs: list[dict[str, Any]]) -> None:
        """Send `msgs` in order to `name` on `node`, as `send` does each, but over a live
        connection in one write: the frames are joined and go out in one `send` call (one
        syscall instead of one per message, and the peer's reader gets them in one `recv`).
        A shell that releases several messages to one peer at once (a group commit's acks,
        commits or lock requests) uses this. A message that cannot be sent (not JSON, over
        max_frame) is left out and its error raised once the others are on their way."""
        conn = self._conns.get(node) if len(msgs) > 1 else None
        if conn is None:
            for msg in msgs:
                self.send(node, name, msg)
            return
        frames: list[bytes] = []
        error: Exception | None = None
        for msg in msgs:
            try:
                if type(msg) is not dict:
                    raise TypeError(f"send to {name!r} on {node}: msg must be a dict; got {msg!r}")
                frame = {"v": 1, "t": "send", "to": name, "m": msg}
                frames.append(self._encode(frame, node, name, "send"))
            except (TypeError, FrameTooLarge) as exc:
                error = error or exc
        if frames and not conn.write(b"".join(frames)):
            log.debug(
                "dist %s: %d sends to %r on %s dropped: connection closed",
                self.node,
                len(frames),
                name,
                node,
            )
        if error is not None:
            raise error

    def _deliver_local(self, name: str, msg: dict[str, Any]) -> None:
        ref = self._resolve(name)
        if ref is None:
            log.debug("dist %s: local send to %r dropped: not registered", self.node, name)
            return
        with contextlib.suppress(ActorDeadError):
            ref.tell(Message(self.node, _roundtrip(msg)))

    def call(self, node: str, name: str, msg: dict[str, Any], timeout: float = 5.0) -> Any:
        """Send `msg` to `name` on `node` and return what its `on_receive` returns.

        Raises DistTimeout (no reply within `timeout` s), NodeUnreachable (no connection, or
        it went before the reply), RemoteCallError (no such name, the handler raised, ...).
        """
        if type(msg) is not dict:
            raise TypeError(f"call to {name!r} on {node}: msg must be a dict; got {msg!r}")
        if node == self.node:
            return self._call_local(name, msg, timeout)
        deadline = time.monotonic() + timeout
        conn = self._conns.get(node)
        if conn is None:
            if not self.connect(node, timeout=timeout):
                raise NodeUnreachable(node, self._why_unreachable(node))
            conn = self._conns.get(node)
            if conn is None:
                raise NodeUnreachable(node, "the connection went down as it came up")
        call_id = next(self._call_ids)
        data = self._encode(
            {"v": 1, "t": "call", "id": call_id, "to": name, "m": msg}, node, name, "call"
        )
        slot = _Slot()
        with conn.lock:
            if conn.down is not None:
                raise NodeUnreachable(node, f"the connection went down ({conn.down})")
            calls = conn.calls  # keep this dict: a teardown swaps in a new one
            calls[call_id] = slot
        if not conn.write(data):
            calls.pop(call_id, None)
            raise NodeUnreachable(node, "the connection closed before the call went out")
        if not slot.wait(deadline - time.monotonic()):
            if calls.pop(call_id, None) is not None:
                raise DistTimeout(node, name, timeout)
            slot.wait(None)  # resolved just now by the reader or a teardown: it is set
        if slot.error is not None:
            raise slot.error
        reply = slot.reply
        assert reply is not None
        if reply.get("ok") is True:
            return reply.get("m")
        raise RemoteCallError(node, name, str(reply.get("kind")), str(reply.get("error")))

    def _call_local(self, name: str, msg: dict[str, Any], timeout: float) -> Any:
        ref = self._resolve(name)
        if ref is None:
            raise RemoteCallError(self.node, name, "noproc", f"no process registered as {name!r}")
        try:
            result = ref.ask(Message(self.node, _roundtrip(msg)), timeout=timeout)
        except pykka.Timeout:
            raise DistTimeout(self.node, name, timeout) from None
        except ActorDeadError:
            raise RemoteCallError(
                self.node, name, "exit", f"{name!r} ended before replying"
            ) from None
        except Exception as exc:
            raise RemoteCallError(self.node, name, "exception", format_reason(exc)) from exc
        try:
            return _roundtrip({"m": result})["m"]
        except (TypeError, ValueError) as exc:
            raise RemoteCallError(self.node, name, "bad_reply", str(exc)) from None

    # ------------------------------------------------------------------ frames in

    def _on_frame(self, conn: Connection, frame: dict[str, Any]) -> None:
        """The I/O loop's thread: one authenticated frame. A malformed one is logged and
        dropped. Nothing here waits: `tell`s, a reply slot, writes that never block."""
        kind = frame["t"]
        try:
            if kind == "send":
                ref = self._resolve(frame["to"])
                if ref is None:
                    log.debug(
                        "dist %s: message for %r dropped: not registered", self.node, frame["to"]
                    )
                    return
                try:
                    ref.tell(Message(conn.node, frame["m"]))
                except ActorDeadError:
                    log.debug("dist %s: message for %r dropped: it ended", self.node, frame["to"])
            elif kind == "reply":
                slot = conn.calls.pop(frame["id"], None)
                if slot is not None:  # else it timed out: a late reply is dropped
                    slot.set(frame)
            elif kind == "call":
                self._serve_call(conn, frame)
            elif kind in SIGNAL_FRAMES:
                self.signals.on_frame(conn, frame)
            elif kind == PING:
                Pings.answer(conn, frame)
            elif kind == PONG:
                self.names.pings.on_pong(frame)
            else:
                log.info(
                    "dist %s: ignored a frame of unknown type %r from %s",
                    self.node,
                    kind,
                    conn.node,
                )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            log.warning(
                "dist %s: dropped a malformed %r frame from %s at %s: %s",
                self.node,
                kind,
                conn.node,
                conn.address,
                format_reason(exc),
            )

    def _serve_call(self, conn: Connection, frame: dict[str, Any]) -> None:
        name, call_id, msg = frame["to"], frame["id"], frame["m"]
        if not isinstance(name, str):
            raise TypeError(f"'to' must be a string; got {name!r}")
        reply = _Reply(conn, call_id, name)
        ref = self._resolve(name)
        if ref is None:
            reply.error("noproc", f"no process registered as {name!r} on {self.node}")
            return
        # Straight into the mailbox with our reply object: the reader never waits for the
        # handler, and the reply is written from the handler's thread (see _Reply).
        ref.actor_inbox.put(_Envelope(Message(conn.node, msg), reply))

    # ------------------------------------------------------------------ connections

    def _connection_for_signals(self, node: str) -> Connection | None:
        """The connection for a link/monitor/exit signal, connecting if need be (blocking,
        as Erlang's link/2 auto-connects); None if `node` cannot be reached."""
        conn = self._conns.get(node)
        if conn is None and self.is_running and self.connect(node):
            conn = self._conns.get(node)
        return conn

    def _start_connect(self, node: str) -> _Pending | None:
        """With self._lock held: begin connecting to `node`, unless we may not."""
        if self._stopped.is_set() or self._ban_left(node):
            return None
        with self._gate_lock:
            if self._connect_gate.blocked_for(node, time.monotonic()):
                return None  # backing off after a failure retrying cannot fix (see _refused)
        address = self._addresses.get(node)
        if address is None:
            log.debug("dist %s: no address for %s", self.node, node)
            return None
        pending = _Pending()
        self._outgoing[node] = pending
        thread = threading.Thread(
            target=self._connector,
            args=(node, address, pending),
            name=f"dist-connect {self.node}->{node}",
            daemon=True,
        )
        thread.start()
        return pending

    def _connector(self, node: str, address: tuple[str, int], pending: _Pending) -> None:
        where = format_address(*address)
        try:
            sock = self._tcp_connect(address)
        except OSError as exc:
            self._retries.failure(
                node, "dist %s: cannot connect to %s at %s: %s", self.node, node, where, exc
            )
            self._pending_failed(node, pending)
            return
        # The acceptor may ask a live holder of our name first (name_check.py): wait for that.
        deadline = time.monotonic() + self.connect_timeout + self.names.timeout
        try:
            stream = None
            if self._tls is not None:
                try:
                    stream = self._client_tls(sock, node, deadline)
                except TlsStreamError as exc:
                    _close(sock)
                    if exc.kind == "refused":
                        self._refused(node, f"cannot connect to {node} at {where}", str(exc))
                    else:
                        self._retries.failure(
                            node,
                            "dist %s: cannot connect to %s at %s: %s",
                            self.node,
                            node,
                            where,
                            exc,
                        )
                    self._pending_failed(node, pending)
                    return
            core = Connector(
                self._cookie,
                self.node,
                self.creation,
                node,
                nonce=os.urandom(NONCE_SIZE),
                max_frame=self.max_frame,
                role=self.names.role,
            )
            verdict = self._handshake(sock, core, deadline, stream)
            if isinstance(verdict, Established) and self._role_refused(verdict, where):
                verdict = Failed("role_checked", "")  # logged and counted: back off quietly
            if isinstance(verdict, Established):
                sock.settimeout(None)
                with self._lock:
                    mine = self._outgoing.get(node) is pending and not self._stopped.is_set()
                    conn = (
                        self._publish(sock, verdict, True, where, stream=stream) if mine else None
                    )
                if conn is None:  # disconnect()ed, stopped, or superseded meanwhile
                    _close(sock)
                    self._pending_failed(node, pending)
                else:
                    self._start(conn)
                return
            _close(sock)
            if (
                isinstance(verdict, Failed)
                and verdict.reason == "refused"
                and NOK in verdict.detail
            ):
                # Simultaneous connect: the peer's connection to us wins; wait for it.
                log.debug("dist %s: %s prefers its own connection to us", self.node, node)
                pending.done.wait(self.handshake_timeout)
            elif isinstance(verdict, Failed) and verdict.reason in _FOR_GOOD:
                self._refused_for_good(node, verdict)
            elif isinstance(verdict, Failed) and verdict.reason in _HOPELESS:
                self._refused(
                    node,
                    f"cannot connect to {node} at {where}",
                    f"{verdict.reason} ({verdict.detail})",
                )
            elif isinstance(verdict, Failed):
                self._retries.failure(
                    node,
                    "dist %s: cannot connect to %s at %s: %s (%s)",
                    self.node,
                    node,
                    where,
                    verdict.reason,
                    verdict.detail,
                    level=logging.WARNING,
                )
            self._pending_failed(node, pending)
        except Exception:
            log.exception("dist %s: connecting to %s failed", self.node, node)
            _close(sock)
            self._pending_failed(node, pending)

    # ------------------------------------------------------------------ TLS and back-off

    def _client_tls(self, sock: socket.socket, node: str, deadline: float) -> TlsStream:
        """The TLS handshake as the connector; the acceptor's certificate must name `node`
        before anything of ours (even our name) goes out."""
        assert self._tls is not None
        stream = TlsStream(sock, self._tls.dist_client(), server_side=False)
        stream.handshake(deadline)
        wrong = self._impostor(stream, node)
        if wrong:
            raise TlsStreamError(wrong)
        return stream

    @staticmethod
    def _impostor(stream: TlsStream, node: str) -> str:
        """ "" if the peer's certificate names `node`; else why not (for the log)."""
        san = peer_san(stream.peer_cert())
        if san_names_node(san, node):
            return ""
        return (
            f"its certificate names {describe_san(san)}, not {node} (a certificate names one "
            f"node by a URI SAN rabbitry://name@host, or all nodes of a host by a DNS/IP SAN)"
        )

    def _tell(self, key: str, what: str, why: str, then: str = "") -> None:
        """Log `what: why` as a warning the first time (per key and reason, once a minute),
        at debug level after that: a misconfigured peer retries every second."""
        now = time.monotonic()
        with self._gate_lock:
            last = self._told.get(key)
            fresh = last is None or last[0] != why or now - last[1] > _TELL_AGAIN_AFTER
            if fresh:
                if len(self._told) >= 10_000:
                    self._told.clear()
                self._told[key] = (why, now)
        log.log(
            logging.WARNING if fresh else logging.DEBUG,
            "dist %s: %s: %s%s",
            self.node,
            what,
            why,
            then,
        )

    def _refused(self, node: str, what: str, why: str) -> None:
        """A connect failure retrying cannot fix: back off from `node` (1 s doubling to 30 s)."""
        with self._gate_lock:
            _, step = self._connect_gate.failed(node, time.monotonic())
        self._tell(node, what, why, f"; backing off, next attempt in {step:g} s")

    def _tcp_connect(self, address: tuple[str, int]) -> socket.socket:
        """TCP connect within `connect_timeout`, sending a fresh SYN every _SYN_RETRY s
        rather than waiting for the kernel's retransmits; raises OSError (TimeoutError when
        no try got an answer in time)."""
        deadline = time.monotonic() + self.connect_timeout
        while True:
            left = deadline - time.monotonic()
            try:
                return socket.create_connection(address, timeout=max(min(_SYN_RETRY, left), 0.01))
            except TimeoutError:
                if deadline - time.monotonic() <= 0.01 or self._stopped.is_set():
                    raise TimeoutError(
                        f"no answer within {self.connect_timeout:g} s (connect_timeout)"
                    ) from None

    def _pending_failed(self, node: str, pending: _Pending) -> None:
        with self._lock:
            if self._outgoing.get(node) is pending:
                del self._outgoing[node]
            dropped = len(pending.frames)
            pending.frames = []
        if dropped:
            log.debug("dist %s: dropped %d queued message(s) for %s", self.node, dropped, node)
        pending.done.set()

    # The pending loop (pending.py) accepts and drives each incoming handshake to the hello,
    # on one thread; these are its calls back into the kernel.

    def new_acceptor(self) -> Acceptor:
        return Acceptor(
            self._cookie,
            self.node,
            self.creation,
            nonce=os.urandom(NONCE_SIZE),
            max_frame=self.max_frame,
            role=self.names.role,
        )

    def tls_server_stream(self, sock: socket.socket) -> TlsStream | None:
        return TlsStream(sock, self._tls.dist_server(), server_side=True) if self._tls else None

    def hello(  # noqa: PLR0917
        self,
        sock: socket.socket,
        core: Acceptor,
        verdict: NeedDecision,
        stream: TlsStream | None,
        where: str,
        source: str,
    ) -> None:
        """`verdict.node` proved the cookie and said hello on `sock` (blocking again): decide,
        and publish the connection or refuse it."""
        conn = None
        try:
            impostor, holder, why = self._check_claim(verdict, stream, source, where)
            with self._lock:
                status = (
                    self._refuse_name(verdict.node, where, holder)
                    if holder
                    else ROLE_CONFLICT
                    if why
                    else NOT_ALLOWED
                    if impostor
                    else self._decide(verdict.node, verdict.creation)
                )
                step = core.decide(status, holder or why)
                if isinstance(step.verdict, Established):
                    old = self._conns.get(verdict.node)
                    if old is not None:  # a restarted peer, or one that saw ours die
                        self._connection_down(old, CONNECTION_CLOSED)
                    conn = self._publish(sock, step.verdict, False, where, step.out, stream)
            if conn is None:
                log.debug("dist %s: refused %s from %s: %s", self.node, verdict.node, where, status)
                with contextlib.suppress(OSError):
                    sock.settimeout(1.0)
                    sock.sendall(stream.seal(step.out) if stream is not None else step.out)
                _close(sock)
            else:
                self._start(conn)
        except Exception:
            log.exception("dist %s: handshake with %s failed", self.node, where)
            if conn is None:
                _close(sock)

    def _handshake(
        self,
        sock: socket.socket,
        core: Acceptor | Connector,
        deadline: float,
        stream: TlsStream | None = None,
    ) -> Any:
        """Drive a handshake core over a socket (inside TLS if `stream`) until it gives a
        verdict (or needs a decision). Every write the core asks for is done here."""
        with self._lock:
            if self._stopped.is_set():
                return core.closed().verdict
            self._handshaking.add(sock)
        try:
            return self._drive(sock, core, deadline, stream)
        finally:
            with self._lock:
                self._handshaking.discard(sock)

    def _drive(
        self,
        sock: socket.socket,
        core: Acceptor | Connector,
        deadline: float,
        stream: TlsStream | None,
    ) -> Any:
        step = core.start()
        while True:
            if step.out:
                try:
                    sock.settimeout(max(deadline - time.monotonic(), 0.001))
                    sock.sendall(stream.seal(step.out) if stream is not None else step.out)
                except OSError:
                    step = core.closed()
                    continue
            if step.verdict is not None:
                return step.verdict
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                step = core.timeout()
                continue
            try:
                sock.settimeout(remaining)
                data = sock.recv(4096)
            except TimeoutError:
                step = core.timeout()
                continue
            except OSError:
                step = core.closed()
                continue
            if data and stream is not None:
                try:
                    data = stream.open(data)
                except TlsStreamError as exc:
                    core.closed()
                    return Failed("tls", str(exc))
                step = core.feed(data)
                continue
            step = core.feed(data) if data else core.closed()

    def _check_claim(
        self, hello: NeedDecision, stream: TlsStream | None, source: str, where: str
    ) -> tuple[str, str, str]:
        """Why the certificate does not name the node the hello claims ("" if it does),
        where a running node of that name is ("" if none, see _live_holder), and why its
        role conflicts with the cluster's membership ("" if it does not)."""
        impostor = self._impostor(stream, hello.node) if stream is not None else ""
        if impostor:
            self._tell(source, f"refused {hello.node} from {where}", impostor)
            return impostor, "", ""
        holder = self._live_holder(hello.node, hello.creation)
        if holder or self.names.role_check is None:
            return "", holder, ""
        why = self.names.role_check(hello.node, hello.role)
        if why:
            self.names.count(ROLE_CONFLICT, hello.node, why)
            log.warning("dist %s: refused %s from %s: %s", self.node, hello.node, where, why)
        return "", "", why

    def _role_refused(self, est: Established, where: str) -> bool:
        """The connector's side of the role check: the node we reached holds a name of the
        cluster under the other role (a copied config with `role:` changed, say)."""
        why = self.names.role_check(est.node, est.role) if self.names.role_check is not None else ""
        if why:
            self.names.count(ROLE_CONFLICT, est.node, why)
            self._tell(est.node, f"dropped the connection to {est.node} at {where}", why)
        return bool(why)

    def _live_holder(self, node: str, creation: int) -> str:
        """Where a running node of the name `node` is ("" if none): ourselves, or the peer
        behind a live link of another incarnation that answers a ping within
        name_check_timeout. Called without self._lock: the ping waits."""
        if node == self.node:
            return str(self.address) if creation != self.creation else ""
        with self._lock:
            old = self._conns.get(node)
        if old is None or old.creation == creation or old.down is not None:
            return ""
        if self.names.pings.ask(old, self.names.timeout) is None:
            log.info(
                "dist %s: %s (creation %d) connects while our link to its creation %d is "
                "silent: a restart, letting it in",
                self.node,
                node,
                creation,
                old.creation,
            )
            return ""
        address = self._addresses.get(node)
        return format_address(*address) if address is not None else old.address

    def _refuse_name(self, node: str, where: str, holder: str) -> str:
        """Count and log refusing a hello from `where` that claims `node`, held at `holder`."""
        self.names.count(
            NAME_IN_USE, node, f"refused a second process from {where}; it runs at {holder}"
        )
        log.warning(
            "dist %s: refused %s from %s: the name is in use by a running node at %s",
            self.node,
            node,
            where,
            holder,
        )
        return NAME_IN_USE

    def _refused_for_good(self, node: str, verdict: Failed) -> None:
        """`node` refused our hello: a running node holds our name (`detail` is where), or
        the cluster holds it under the other role (`detail` says why). Or we dropped the
        connection for a role conflict on our side ("role_checked"): just back off."""
        if verdict.reason == NAME_IN_USE:
            self._told_off(node, NAME_IN_USE, refused_log_line(self.node, verdict.detail))
        elif verdict.reason == ROLE_CONFLICT:
            self._told_off(node, ROLE_CONFLICT, f"node {self.node}: {verdict.detail}")
        else:
            with self._gate_lock:
                self._connect_gate.failed(node, time.monotonic())

    def _told_off(self, node: str, reason: str, line: str) -> None:
        """`node` refused us for `reason`, which this process cannot fix: count, log `line`,
        and tell the owner (the node exits 2), or back off without one."""
        self.names.count(reason, self.node, f"{node} refused us: {line}")
        log.error("dist %s (refused by %s)", line, node)
        callback = self.names.take_callback()
        if callback is not None:
            callback(reason, line)
        else:
            with self._gate_lock:
                self._connect_gate.failed(node, time.monotonic())

    def _decide(self, node: str, creation: int) -> str:
        """With self._lock held: may `node` connect to us now? (See handshake.py.)"""
        if self._stopped.is_set() or node == self.node or self._ban_left(node):
            return NOT_ALLOWED
        old = self._conns.get(node)
        if old is not None:
            # Ours, same incarnation, and ours wins the tie-break: keep it. Otherwise the peer
            # has restarted, or believes the old connection dead: replace it.
            if old.creation == creation and old.outgoing and self.node > node:
                return NOK
            return OK
        if node in self._outgoing and self.node > node:
            return NOK  # simultaneous connect: the greater name's connection wins, as Erlang
        return OK

    def _publish(  # noqa: PLR0917
        self,
        sock: socket.socket,
        est: Established,
        outgoing: bool,
        where: str,
        first: bytes = b"",
        stream: TlsStream | None = None,
    ) -> Connection:
        """With self._lock held: make the connection live, flush what auto-connect queued,
        and tell subscribers NodeUp. The caller then hands it to the I/O loop (`_start`)."""
        conn = Connection(
            sock,
            node=est.node,
            creation=est.creation,
            address=where,
            outgoing=outgoing,
            net_ticktime=self.net_ticktime,
            max_frame=self.max_frame,
            max_queue=self._max_queue,
            rest=est.rest,
            confirmed=outgoing,
            on_frame=self._on_frame,
            on_lost=self._connection_lost,
            local=self.node,
            stream=stream,
        )
        if first:
            # Queued, not written: the peer must not see the welcome (and act on it) before
            # this node has published the connection.
            conn.enqueue(first)
        pending = self._outgoing.pop(est.node, None)
        if pending is not None:
            for data in pending.frames:
                conn.write(data, block=False)
            pending.frames = []
            pending.superseded = not outgoing
            pending.done.set()
        self._conns[est.node] = conn
        with self._gate_lock:
            self._connect_gate.succeeded(est.node)
            self._told.pop(est.node, None)
        self._retries.success(
            est.node,
            "dist %s: node up: %s (creation %d) %s %s%s",
            self.node,
            est.node,
            est.creation,
            "via" if outgoing else "from",
            where,
            f" over {stream.describe()}" if stream is not None else "",
            always=True,
        )
        self._notify(NodeUp(est.node, est.creation))
        return conn

    def _start(self, conn: Connection) -> None:
        """Hand a published connection to the I/O loop."""
        assert self._io is not None  # published only while running
        conn.start(self._io)

    def _connection_lost(self, conn: Connection, reason: str) -> None:
        """The I/O loop saw the socket close. Before the connector confirmed the handshake,
        that is a failed setup rather than a closed connection."""
        if reason == CONNECTION_CLOSED and not conn.confirmed:
            reason = CONNECTION_SETUP_FAILED
        self._connection_down(conn, reason)

    def _connection_down(self, conn: Connection, reason: str) -> None:
        """The connection is gone (any thread, any number of times: the first reason
        counts). Fails its calls, fires remote links/monitors, tells subscribers."""
        with conn.lock:
            if conn.down is not None:
                return
            conn.down = reason
            calls, conn.calls = conn.calls, {}
            links, conn.links = conn.links, {}
            conn.link_keys = {}
            mon_out, conn.mon_out = conn.mon_out, {}
            mon_in, conn.mon_in = conn.mon_in, {}
        with self._lock:
            if self._conns.get(conn.node) is conn:
                del self._conns[conn.node]
                log.info("dist %s: node down: %s (%s)", self.node, conn.node, reason)
                self._notify(NodeDown(conn.node, reason))
        conn.close()
        for call_id in list(calls):
            slot = calls.pop(call_id, None)
            if slot is not None:
                slot.fail(NodeUnreachable(conn.node, f"the connection went down ({reason})"))
        self.signals.connection_lost(links, mon_out, mon_in)

    # ------------------------------------------------------------------ ticks

    def _run_ticks(self, conn: Connection, now: float) -> None:
        core = conn.ticks
        core.sent(conn.last_sent)
        core.received(conn.last_received)
        for effect in core.timer(now):
            if isinstance(effect, SendTick):
                conn.send_tick()
            elif isinstance(effect, PeerDown):
                log.warning(
                    "dist %s: %s silent for %g s: %s",
                    self.node,
                    conn.node,
                    self.net_ticktime,
                    effect.reason,
                )
                self._connection_down(conn, effect.reason)
            elif isinstance(effect, SetTimer):
                conn.tick_due = now + effect.after


def _setup_time(handshake_timeout: float | None, net_ticktime: Any) -> Any:
    """The pending-connection deadline: as given, else net_ticktime up to 7 s (Erlang's
    net_setuptime default)."""
    if handshake_timeout is not None:
        return handshake_timeout
    return min(net_ticktime, 7.0) if isinstance(net_ticktime, int | float) else 7.0


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
