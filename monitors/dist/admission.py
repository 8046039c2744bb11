"""Letting a peer in: the decision on an incoming connection whose peer proved the cookie and
said hello (handed over by the pending loop, pending.py).

It checks the claim (the certificate names the node; no running node holds the name, asking
the old link with a ping if need be; the role fits the cluster's membership), applies the
tie-break against a connection of ours to the same node, and publishes the connection or
sends the refusal. It runs on the pending loop's thread, never on the I/O loop's: the name
check waits for a pong that the I/O loop must be free to read.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from typing import TYPE_CHECKING

from monitors.dist.dialer import close
from monitors.dist.handshake import (
    NAME_IN_USE,
    NOK,
    NONCE_SIZE,
    NOT_ALLOWED,
    OK,
    ROLE_CONFLICT,
    Acceptor,
    Established,
    NeedDecision,
)
from monitors.dist.messages import CONNECTION_CLOSED
from monitors.dist.names import format_address
from monitors.dist.tls_stream import TlsStream, cert_mismatch

if TYPE_CHECKING:
    from monitors.dist.connection import Connection
    from monitors.dist.netkernel import NetKernel

log = logging.getLogger("monitors.dist")


class Admission:
    """The kernel's incoming side: what the pending loop calls back (its `Host`)."""

    def __init__(self, kernel: NetKernel, cookie: bytes) -> None:
        self._k = kernel
        self._cookie = cookie
        self.node = kernel.node

    def new_acceptor(self) -> Acceptor:
        k = self._k
        return Acceptor(
            self._cookie,
            k.node,
            k.creation,
            nonce=os.urandom(NONCE_SIZE),
            max_frame=k.max_frame,
            role=k.names.role,
        )

    def tls_server_stream(self, sock: socket.socket) -> TlsStream | None:
        tls = self._k._tls
        return TlsStream(sock, tls.dist_server(), server_side=True) if tls else None

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
        k = self._k
        conn: Connection | None = None
        try:
            impostor, holder, why = self.check_claim(verdict, stream, source, where)
            with k._lock:
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
                    old = k._conns.get(verdict.node)
                    if old is not None:  # a restarted peer, or one that saw ours die
                        k._connection_down(old, CONNECTION_CLOSED)
                    conn = k._publish(sock, step.verdict, False, where, step.out, stream)
            if conn is None:
                log.debug("dist %s: refused %s from %s: %s", k.node, verdict.node, where, status)
                with contextlib.suppress(OSError):
                    sock.settimeout(1.0)
                    sock.sendall(stream.seal(step.out) if stream is not None else step.out)
                close(sock)
            else:
                k._start(conn)
        except Exception:
            log.exception("dist %s: handshake with %s failed", k.node, where)
            if conn is None:
                close(sock)

    def check_claim(
        self, hello: NeedDecision, stream: TlsStream | None, source: str, where: str
    ) -> tuple[str, str, str]:
        """Why the certificate does not name the node the hello claims ("" if it does),
        where a running node of that name is ("" if none, see _live_holder), and why its
        role conflicts with the cluster's membership ("" if it does not)."""
        k = self._k
        impostor = cert_mismatch(stream, hello.node) if stream is not None else ""
        if impostor:
            k.backoff.tell(source, f"refused {hello.node} from {where}", impostor)
            return impostor, "", ""
        holder = self._live_holder(hello.node, hello.creation)
        if holder or k.names.role_check is None:
            return "", holder, ""
        why = k.names.role_check(hello.node, hello.role)
        if why:
            k.names.count(ROLE_CONFLICT, hello.node, why)
            log.warning("dist %s: refused %s from %s: %s", k.node, hello.node, where, why)
        return "", "", why

    def _live_holder(self, node: str, creation: int) -> str:
        """Where a running node of the name `node` is ("" if none): ourselves, or the peer
        behind a live link of another incarnation that answers a ping within
        name_check_timeout. Called without the kernel's lock: the ping waits."""
        k = self._k
        if node == k.node:
            return str(k.address) if creation != k.creation else ""
        with k._lock:
            old = k._conns.get(node)
        if old is None or old.creation == creation or old.down is not None:
            return ""
        if k.names.pings.ask(old, k.names.timeout) is None:
            log.info(
                "dist %s: %s (creation %d) connects while our link to its creation %d is "
                "silent: a restart, letting it in",
                k.node,
                node,
                creation,
                old.creation,
            )
            return ""
        with k._lock:
            address = k._addresses.get(node)
        return format_address(*address) if address is not None else old.address

    def _refuse_name(self, node: str, where: str, holder: str) -> str:
        """Count and log refusing a hello from `where` that claims `node`, held at `holder`."""
        self._k.names.count(
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

    def _decide(self, node: str, creation: int) -> str:
        """With the kernel's lock held: may `node` connect to us now? (See handshake.py.)"""
        k = self._k
        if k._stopped.is_set() or node == k.node or k._ban_left(node):
            return NOT_ALLOWED
        old = k._conns.get(node)
        if old is not None:
            # Ours, same incarnation, and ours wins the tie-break: keep it. Otherwise the peer
            # has restarted, or believes the old connection dead: replace it.
            if old.creation == creation and old.outgoing and k.node > node:
                return NOK
            return OK
        if node in k._outgoing and k.node > node:
            return NOK  # simultaneous connect: the greater name's connection wins, as Erlang
        return OK
