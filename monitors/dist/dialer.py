"""Connecting out: one short-lived thread per attempt runs TCP connect, TLS and the cookie
handshake as the connector, then hands the connection to the kernel (which publishes it and
gives it to the I/O loop).

Why a thread per attempt and not the I/O loop: an attempt is rare (a node connects to each
peer once, and a down peer is retried about once a second by the node monitor), it ends
within connect_timeout, and the acceptor may make it wait for a name check (name_check.py).
Messages sent meanwhile are queued on the attempt (`Attempt.frames`), in order.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

from monitors.dist.handshake import (
    NAME_IN_USE,
    NOK,
    NONCE_SIZE,
    ROLE_CONFLICT,
    Acceptor,
    Connector,
    Established,
    Failed,
)
from monitors.dist.names import format_address
from monitors.dist.tls_stream import TlsStream, TlsStreamError, cert_mismatch

if TYPE_CHECKING:
    from monitors.dist.netkernel import NetKernel

log = logging.getLogger("monitors.dist")

# Connect failures that retrying soon will not fix: the peer is not a dist peer of our kind
# (plain vs TLS), speaks another version, or refused our certificate or cookie. We back off.
_HOPELESS = frozenset({"garbage", "bad_version", "bad_cookie", "tls"})
# Refusals that no retry of this process can fix (name_check.py): it must not run.
_FOR_GOOD = frozenset({NAME_IN_USE, ROLE_CONFLICT, "role_checked"})
# A TCP connect whose SYN got no answer within this is tried again with a fresh SYN (the
# kernel's own first retransmit comes only after 1 s, then 3 s, 7 s): a SYN dropped by a
# cut that has since healed must not hold the link down.
_SYN_RETRY = 0.25


class Attempt:
    """An outgoing connection attempt: who waits for it, and what auto-connect queued."""

    __slots__ = ("done", "frames", "queued", "superseded")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.frames: list[bytes] = []
        self.queued = 0
        self.superseded = False  # an incoming connection from the same node won instead


class Dialer:
    """The kernel's outgoing side. `start` is called with the kernel's lock held."""

    def __init__(self, kernel: NetKernel, cookie: bytes) -> None:
        self._k = kernel
        self._cookie = cookie
        self._handshaking: set[socket.socket] = set()  # shut on stop, so no thread lingers

    def start(self, node: str) -> Attempt | None:
        """With the kernel's lock held: begin connecting to `node`, unless we may not."""
        k = self._k
        if k._stopped.is_set() or k._ban_left(node) or k.backoff.blocked(node):
            return None  # banned, or backing off after a failure retrying cannot fix
        address = k._addresses.get(node)
        if address is None:
            log.debug("dist %s: no address for %s", k.node, node)
            return None
        attempt = Attempt()
        k._outgoing[node] = attempt
        thread = threading.Thread(
            target=self._connector,
            args=(node, address, attempt),
            name=f"dist-connect {k.node}->{node}",
            daemon=True,
        )
        thread.start()
        return attempt

    def stop(self) -> None:
        """With the kernel stopped: wake every handshake under way (its thread then ends)."""
        with self._k._lock:
            socks = list(self._handshaking)
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _connector(self, node: str, address: tuple[str, int], attempt: Attempt) -> None:
        k = self._k
        where = format_address(*address)
        try:
            sock = self._tcp_connect(address)
        except OSError as exc:
            k._retries.failure(
                node, "dist %s: cannot connect to %s at %s: %s", k.node, node, where, exc
            )
            self._failed(node, attempt)
            return
        # The acceptor may ask a live holder of our name first (name_check.py): wait for that.
        deadline = time.monotonic() + k.connect_timeout + k.names.timeout
        try:
            stream = None
            if k._tls is not None:
                try:
                    stream = self._client_tls(sock, node, deadline)
                except TlsStreamError as exc:
                    close(sock)
                    if exc.kind == "refused":
                        k.backoff.refused(node, f"cannot connect to {node} at {where}", str(exc))
                    else:
                        k._retries.failure(
                            node,
                            "dist %s: cannot connect to %s at %s: %s",
                            k.node,
                            node,
                            where,
                            exc,
                        )
                    self._failed(node, attempt)
                    return
            core = Connector(
                self._cookie,
                k.node,
                k.creation,
                node,
                nonce=os.urandom(NONCE_SIZE),
                max_frame=k.max_frame,
                role=k.names.role,
            )
            verdict = self._handshake(sock, core, deadline, stream)
            if isinstance(verdict, Established) and self._role_refused(verdict, where):
                verdict = Failed("role_checked", "")  # logged and counted: back off quietly
            if isinstance(verdict, Established):
                sock.settimeout(None)
                with k._lock:
                    mine = k._outgoing.get(node) is attempt and not k._stopped.is_set()
                    conn = k._publish(sock, verdict, True, where, stream=stream) if mine else None
                if conn is None:  # disconnect()ed, stopped, or superseded meanwhile
                    close(sock)
                    self._failed(node, attempt)
                else:
                    k._start(conn)
                return
            close(sock)
            self._verdict_failed(node, where, verdict, attempt)
        except Exception:
            log.exception("dist %s: connecting to %s failed", k.node, node)
            close(sock)
            self._failed(node, attempt)

    def _verdict_failed(self, node: str, where: str, verdict: Any, attempt: Attempt) -> None:
        """The handshake ended without a connection: wait, back off, or log, by why."""
        k = self._k
        if isinstance(verdict, Failed) and verdict.reason == "refused" and NOK in verdict.detail:
            # Simultaneous connect: the peer's connection to us wins; wait for it.
            log.debug("dist %s: %s prefers its own connection to us", k.node, node)
            attempt.done.wait(k.handshake_timeout)
        elif isinstance(verdict, Failed) and verdict.reason in _FOR_GOOD:
            k.backoff.refused_for_good(node, verdict)
        elif isinstance(verdict, Failed) and verdict.reason in _HOPELESS:
            k.backoff.refused(
                node,
                f"cannot connect to {node} at {where}",
                f"{verdict.reason} ({verdict.detail})",
            )
        elif isinstance(verdict, Failed):
            k._retries.failure(
                node,
                "dist %s: cannot connect to %s at %s: %s (%s)",
                k.node,
                node,
                where,
                verdict.reason,
                verdict.detail,
                level=logging.WARNING,
            )
        self._failed(node, attempt)

    def _client_tls(self, sock: socket.socket, node: str, deadline: float) -> TlsStream:
        """The TLS handshake as the connector; the acceptor's certificate must name `node`
        before anything of ours (even our name) goes out."""
        tls = self._k._tls
        assert tls is not None
        stream = TlsStream(sock, tls.dist_client(), server_side=False)
        stream.handshake(deadline)
        wrong = cert_mismatch(stream, node)
        if wrong:
            raise TlsStreamError(wrong)
        return stream

    def _role_refused(self, est: Established, where: str) -> bool:
        """The connector's side of the role check: the node we reached holds a name of the
        cluster under the other role (a copied config with `role:` changed, say)."""
        names = self._k.names
        why = names.role_check(est.node, est.role) if names.role_check is not None else ""
        if why:
            names.count(ROLE_CONFLICT, est.node, why)
            self._k.backoff.tell(est.node, f"dropped the connection to {est.node} at {where}", why)
        return bool(why)

    def _tcp_connect(self, address: tuple[str, int]) -> socket.socket:
        """TCP connect within `connect_timeout`, sending a fresh SYN every _SYN_RETRY s
        rather than waiting for the kernel's retransmits; raises OSError (TimeoutError when
        no try got an answer in time)."""
        k = self._k
        deadline = time.monotonic() + k.connect_timeout
        while True:
            left = deadline - time.monotonic()
            try:
                sock = socket.create_connection(address, timeout=max(min(_SYN_RETRY, left), 0.01))
            except TimeoutError:
                if deadline - time.monotonic() <= 0.01 or k._stopped.is_set():
                    raise TimeoutError(
                        f"no answer within {k.connect_timeout:g} s (connect_timeout)"
                    ) from None
                continue
            # as Erlang's dist_nodelay: a small frame goes out at once, not after the
            # peer's delayed ACK of the one before it (40 ms on Linux); the accepting side
            # sets it too (pending.py)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock

    def _failed(self, node: str, attempt: Attempt) -> None:
        k = self._k
        with k._lock:
            if k._outgoing.get(node) is attempt:
                del k._outgoing[node]
            dropped = len(attempt.frames)
            attempt.frames = []
        if dropped:
            log.debug("dist %s: dropped %d queued message(s) for %s", k.node, dropped, node)
        attempt.done.set()

    def _handshake(
        self,
        sock: socket.socket,
        core: Acceptor | Connector,
        deadline: float,
        stream: TlsStream | None = None,
    ) -> Any:
        """Drive a handshake core over a socket (inside TLS if `stream`) until it gives a
        verdict (or needs a decision). Every write the core asks for is done here."""
        k = self._k
        with k._lock:
            if k._stopped.is_set():
                return core.closed().verdict
            self._handshaking.add(sock)
        try:
            return _drive(sock, core, deadline, stream)
        finally:
            with k._lock:
                self._handshaking.discard(sock)


def _drive(
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


def close(sock: socket.socket) -> None:
    """Shut down and close, whatever state the socket is in."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
