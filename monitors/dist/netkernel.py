"""NetKernel: a node's distribution layer (Erlang's net_kernel) as a supervisors.Process.

It listens for peers, connects to them (from an address book: how *this* node reaches each
peer), authenticates both ways (handshake.py), keeps one connection per pair, ticks
(ticks.py), delivers registered-name sends and calls, carries links and monitors across
(remote.py), and tells subscribers NodeUp/NodeDown.

This module is the facade: the public API, the connection table (publish, down, ticks), the
registry and the address book. The work is done by its parts, each in its own module:

- `PendingLoop` (pending.py): one thread accepts and drives every incoming handshake to the
  hello; `Admission` (admission.py) decides on the hello and publishes or refuses.
- `Dialer` (dialer.py): an outgoing attempt, on a short-lived thread of its own.
- `Backoff` (backoff.py): peers we stop trying for a while, and one log line per reason.
- `IoLoop` (ioloop.py): one thread reads, flushes and ticks every established `Connection`
  (connection.py); senders write from their own threads while a connection is idle.
- `Messenger` (messaging.py): send, call, and the dispatch of incoming frames;
  `SignalRouter` (remote.py): links, monitors and exit signals across the wire.

So a node holds three dist threads however many peers it has (the listener, the I/O loop,
and a connect thread only while an attempt is under way).

The public methods are thread-safe and called directly on the object (`NetKernel.of(ref)`),
not through the mailbox: a send is a socket write from the caller's thread, and a call waits
only for its own reply. The Process's own thread does nothing but start and stop it, which is
what lets it sit in a supervision tree.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

from pykka import ActorDeadError

from monitors.dist.admission import Admission
from monitors.dist.backoff import Backoff
from monitors.dist.connection import Connection
from monitors.dist.dialer import Attempt, Dialer
from monitors.dist.errors import (
    NodeUnreachable,
)
from monitors.dist.gate import FailureGate
from monitors.dist.handshake import (
    Established,
)
from monitors.dist.ioloop import IoLoop
from monitors.dist.messages import (
    CONNECTION_CLOSED,
    CONNECTION_SETUP_FAILED,
    DISCONNECT,
    NodeDown,
    NodeUp,
)
from monitors.dist.messaging import Messenger
from monitors.dist.name_check import NameCheck
from monitors.dist.names import (
    format_address,
    new_creation,
    parse_address,
    validate_node,
    validate_registered_name,
)
from monitors.dist.pending import PendingLoop
from monitors.dist.remote import _KERNELS, RemoteRef, SignalRouter
from monitors.dist.tarpit import Tarpit
from monitors.dist.ticks import PeerDown, SendTick
from monitors.dist.tls_stream import TlsStream
from monitors.effects import SetTimer
from monitors.retry_log import RetryLog
from monitors.tls import TlsContexts
from supervisors import Process

__all__ = ["NetKernel"]

log = logging.getLogger("monitors.dist")

_BY_URN: weakref.WeakValueDictionary[str, NetKernel] = weakref.WeakValueDictionary()


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
      briefly (it asks the node monitor); it runs on the pending loop's thread (incoming)
      or the connect thread (outgoing), never on the I/O loop.
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
        io_loop: IoLoop | None = None,
    ) -> None:
        super().__init__()
        self.node = validate_node(node)
        self._listen = parse_address(listen, f"{node}: listen")
        if isinstance(cookie, str):
            cookie = cookie.encode()
        if not isinstance(cookie, bytes | bytearray) or not cookie:
            raise ValueError(f"{node}: cookie must be non-empty bytes or str")
        cookie = bytes(cookie)
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
        self._outgoing: dict[str, Attempt] = {}
        self._banned: dict[str, float] = {}
        self._names: dict[str, Any] = {}
        self._exposed: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
        self._subscribers: dict[str, Any] = {}
        self._max_pending_per_address = max_handshakes
        self._pending_loop: PendingLoop | None = None
        self._stopped = threading.Event()
        self._running = False
        self._io: IoLoop | None = None  # reads, flushes and ticks every connection
        # A loop given by the caller is shared with other kernels: started and stopped by
        # its owner, never by this kernel (rabbitry swarm: one loop per process).
        self._shared_io = io_loop
        self._listener: socket.socket | None = None
        self._threads: list[threading.Thread] = []
        self._tls = tls
        # The tarpit for failed cookie proofs (only the pending loop's thread uses it).
        self._tarpit = Tarpit(cookie_gate)
        # The name check (name_check.py); its refusals by reason feed /metrics and the UI.
        self.names = NameCheck(self.net_ticktime, name_check_timeout, on_refused, role, role_check)
        # The parts: see the module docstring.
        self.backoff = Backoff(self.node, self.names)
        self.dialer = Dialer(self, cookie)
        self.admission = Admission(self, cookie)
        self.messenger = Messenger(self)
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
            self.admission,
            sock,
            self._tarpit,
            deadline=self.handshake_timeout,
            per_address=self._max_pending_per_address,
        )
        if self._shared_io is not None:
            self._io = self._shared_io
        else:
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
        self.dialer.stop()
        for pending in pendings:
            pending.done.set()
        for conn in conns:
            self._connection_down(conn, DISCONNECT)
        if self._io is not None and self._shared_io is None:
            self._io.stop()  # it finishes (and closes) what it still holds
        elif self._io is not None:  # shared: the loop goes on; ours were closed just above
            deadline = time.monotonic() + 2.0
            while any(not c.finished for c in conns) and time.monotonic() < deadline:
                time.sleep(0.005)
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
            pending = self._outgoing.get(node) or self.dialer.start(node)
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

    def send(self, node: str, name: str, msg: dict[str, Any]) -> None:
        """Send `msg` (a JSON object) to the process registered as `name` on `node`.

        Connects first if need be, without waiting (the message is queued meanwhile). As in
        Erlang, a message to a node that cannot be reached is dropped (logged at debug).
        Raises only for a bad message (TypeError) or one over max_frame (FrameTooLarge).
        """
        self.messenger.send(node, name, msg)

    def send_many(self, node: str, name: str, msgs: list[dict[str, Any]]) -> None:
        """Send `msgs` in order to `name` on `node`, as `send` does each, but over a live
        connection in one write: the frames are joined and go out in one `send` call (one
        syscall instead of one per message, and the peer's reader gets them in one `recv`).
        A shell that releases several messages to one peer at once (a group commit's acks,
        commits or lock requests) uses this. A message that cannot be sent (not JSON, over
        max_frame) is left out and its error raised once the others are on their way."""
        self.messenger.send_many(node, name, msgs)

    def call(self, node: str, name: str, msg: dict[str, Any], timeout: float = 5.0) -> Any:
        """Send `msg` to `name` on `node` and return what its `on_receive` returns.

        Raises DistTimeout (no reply within `timeout` s), NodeUnreachable (no connection, or
        it went before the reply), RemoteCallError (no such name, the handler raised, ...).
        """
        return self.messenger.call(node, name, msg, timeout)

    # ------------------------------------------------------------------ connections

    def _connection_for_signals(self, node: str) -> Connection | None:
        """The connection for a link/monitor/exit signal, connecting if need be (blocking,
        as Erlang's link/2 auto-connects); None if `node` cannot be reached."""
        conn = self._conns.get(node)
        if conn is None and self.is_running and self.connect(node):
            conn = self._conns.get(node)
        return conn

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
            on_frame=self.messenger.on_frame,
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
        self.backoff.succeeded(est.node)
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
        conn.on_tick = self._run_ticks
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
        if core.silent(now) and conn.input_waiting():
            # The peer was not silent: its bytes reached us and wait for this loop, which
            # was late (a starved process: the GIL, a thousand connections). Erlang counts
            # bytes received as life too. Calling it down would punish the peer for our
            # lateness, and its reconnect would add to the load that made us late.
            core.received(now)
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
