"""The pre-handshake phase of incoming dist connections: one thread, one selector.

Why: a thread per pending connection, under a global cap of 64, let 64 silent sockets (or 64
stalled TLS handshakes) turn every joining node away. Erlang gives a pending connection a
cheap process and a deadline (`net_setuptime`) and no global cap; here a pending connection is
an entry in a selector: no thread, a deadline, and a small buffer. The loop accepts, drives
the TLS handshake (memory BIOs) and the cookie handshake core (pure) to the hello, and hands
the socket to the kernel (`host.hello`) only once the peer has proved the cookie and named
itself. What the loop holds is bounded per source address (`per_address`, the oldest pending
one goes to make room, so a newcomer is never refused) and in all (`max_pending`).

Failed cookie proofs go to the tarpit (tarpit.py): the connection is held here, silent, then
closed. Logs are rate-limited per (address, reason): a flood of silent sockets writes a line,
not thousands.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Protocol

from monitors.dist.handshake import ANSWER_SIZE, MAGIC, Acceptor, Failed, NeedDecision
from monitors.dist.names import format_address
from monitors.dist.tarpit import Tarpit
from monitors.dist.tls_stream import TlsStream, TlsStreamError, tls_hint
from monitors.tls import describe_san, peer_san

log = logging.getLogger("monitors.dist")

READ_SIZE = 16 * 1024
_ACCEPT_BURST = 64  # connections accepted per wake-up, so a flood cannot starve the others
_LOG_EVERY = 10.0  # one line per (address, reason) this often; the rest at debug level
_MAX_HELD_PER_ADDRESS = 64  # tarpitted connections held per address; beyond, closed at once


class Host(Protocol):
    """What the loop needs from its kernel."""

    node: str

    def new_acceptor(self) -> Acceptor: ...
    def tls_server_stream(self, sock: socket.socket) -> TlsStream | None: ...
    def hello(  # noqa: PLR0917
        self,
        sock: socket.socket,
        core: Acceptor,
        verdict: NeedDecision,
        stream: TlsStream | None,
        where: str,
        source: str,
    ) -> None: ...


@dataclass(eq=False)
class _Entry:
    sock: socket.socket
    where: str
    source: str
    deadline: float
    core: Acceptor
    stream: TlsStream | None
    state: str = "tls"  # tls | cookie | token | hold
    early: bytes = b""  # plaintext read before the proof could be checked
    first: bytes = b""  # the peer's first raw bytes (for the TLS hint)
    out: bytearray = field(default_factory=bytearray)
    until: float = 0.0  # hold: close at; token: retry at
    proof_at: float = 0.0  # token: when its proof arrived (served in that order)
    name: str = ""


class PendingLoop:
    """Accepts on `listener` and drives every incoming handshake, all on the caller's
    thread (`run`); `stop()` from any thread ends it and closes what it holds."""

    def __init__(
        self,
        host: Host,
        listener: socket.socket,
        tarpit: Tarpit,
        *,
        deadline: float,
        per_address: int = 256,
        max_pending: int = 4096,
    ) -> None:
        self.host = host
        self.listener = listener
        self.tarpit = tarpit
        self.deadline = deadline
        self.per_address = per_address
        self.max_pending = max_pending
        self._entries: dict[socket.socket, _Entry] = {}
        self._by_address: dict[str, OrderedDict[_Entry, None]] = {}
        self._told: dict[tuple[str, str], tuple[float, int]] = {}
        self._holds: dict[str, float] = {}  # the last hold per tarpit key: a line per step
        self._stopping = False
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)

    def __len__(self) -> int:
        return len(self._entries)

    def stop(self) -> None:
        self._stopping = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    # ------------------------------------------------------------------ the loop

    def run(self) -> None:
        self.listener.setblocking(False)
        self._selector.register(self.listener, selectors.EVENT_READ, None)
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        try:
            while not self._stopping:
                timeout = self._next_timer() - time.monotonic()
                try:
                    events = self._selector.select(max(min(timeout, 1.0), 0.0))
                except OSError as exc:  # e.g. EINTR on an old kernel: try again
                    log.debug("dist %s: select failed: %s", self.host.node, exc)
                    continue
                for key, mask in events:
                    if key.data is None:
                        self._accept()
                    elif key.data == "wake":
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(4096)
                    else:
                        self._event(key.data, mask)
                self._timers(time.monotonic())
        finally:
            for entry in list(self._entries.values()):
                self._close(entry)
            self._selector.close()
            self._wake_r.close()
            self._wake_w.close()

    def _event(self, entry: _Entry, mask: int) -> None:
        if entry.sock not in self._entries:
            return
        try:
            if mask & selectors.EVENT_WRITE:
                self._flush(entry)
            if mask & selectors.EVENT_READ and entry.sock in self._entries:
                self._readable(entry)
        except Exception:
            log.exception("dist %s: handshake with %s failed", self.host.node, entry.where)
            self._close(entry)

    def _next_timer(self) -> float:
        now = time.monotonic()
        soonest = now + 1.0
        for entry in self._entries.values():
            soonest = min(soonest, entry.until if entry.state in ("hold", "token") else soonest)
            soonest = min(soonest, entry.deadline if entry.state != "hold" else soonest)
        return soonest

    def _timers(self, now: float) -> None:
        # Proofs waiting for their address's token, in the order they arrived. A guesser
        # that hangs up leaves the queue at once, so a right-cookie node that arrives
        # during a flood waits about as long as a guesser is willing to wait (measured in
        # benchmarks/hostile.py).
        waiting = [e for e in self._entries.values() if e.state == "token" and now >= e.until]
        for entry in sorted(waiting, key=lambda e: e.proof_at):
            if now < entry.deadline:
                self._check_proof(entry, now)
        for entry in list(self._entries.values()):
            if entry.state == "hold":
                if now >= entry.until:
                    self._close(entry)
            elif now >= entry.deadline:
                if entry.state == "tls":
                    hint = tls_hint(entry.first, server_side=True)
                    self._reject(entry, "tls", f"no TLS handshake within the timeout{hint}")
                else:
                    self._reject_failed(entry, entry.core.timeout().verdict, "timeout")

    def _reject_failed(self, entry: Any, verdict: Any, why: str) -> None:
        """Close a pending connection on the handshake core's verdict; a core that had already
        ended (it waits for the kernel's decision) gives none, and the shell's reason stands."""
        if isinstance(verdict, Failed):
            self._reject(entry, verdict.reason, verdict.detail)
        else:
            self._reject(entry, why, f"the handshake did not end ({why})")

    # ------------------------------------------------------------------ accepting

    def _accept(self) -> None:
        for _ in range(_ACCEPT_BURST):
            if self._stopping:
                return
            try:
                sock, peer = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                # e.g. out of file descriptors: shed the oldest pending one, try later
                self._tell(("", "accept"), "dist %s: accept failed: %s", self.host.node, exc)
                self._evict_oldest()
                return
            self._admit(sock, str(peer[0]), format_address(peer[0], peer[1]))

    def _admit(self, sock: socket.socket, source: str, where: str) -> None:
        group = self._by_address.setdefault(source, OrderedDict())
        if len(group) >= self.per_address:
            self._evict(next(iter(group)), "too many pending connections from its address")
        if len(self._entries) >= self.max_pending:
            self._evict_oldest()
        sock.setblocking(False)
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            stream = self.host.tls_server_stream(sock)
        except Exception as exc:  # the TLS files went bad: say so, keep the loop alive
            self._tell(("", "tls-context"), "dist %s: TLS unavailable: %s", self.host.node, exc)
            sock.close()
            return
        entry = _Entry(
            sock,
            where,
            source,
            time.monotonic() + self.deadline,
            self.host.new_acceptor(),
            stream,
            state="tls" if stream is not None else "cookie",
        )
        self._entries[sock] = entry
        group[entry] = None
        self._selector.register(sock, selectors.EVENT_READ, entry)
        if stream is None:
            self._send(entry, entry.core.start().out)

    def _evict_oldest(self) -> None:
        if not self._entries:
            return
        source = max(self._by_address, key=lambda s: len(self._by_address[s]))
        group = self._by_address.get(source)
        if group:
            self._evict(next(iter(group)), "too many pending connections")

    def _evict(self, entry: _Entry, why: str) -> None:
        self._tell(
            (entry.source, "evicted"),
            "dist %s: closed a pending connection from %s: %s",
            self.host.node,
            entry.where,
            why,
        )
        self._close(entry)

    # ------------------------------------------------------------------ reading, writing

    def _readable(self, entry: _Entry) -> None:
        try:
            data = entry.sock.recv(READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if entry.state == "hold":
            if not data:  # the guesser hung up: nothing left to hold
                self._close(entry)
            return
        if not data:
            if entry.state == "tls":
                hint = tls_hint(entry.first, server_side=True)
                self._reject(
                    entry, "tls", f"the peer closed the connection during the TLS handshake{hint}"
                )
            else:
                self._reject_failed(entry, entry.core.closed().verdict, "closed")
            return
        if len(entry.first) < 8:
            entry.first += data[: 8 - len(entry.first)]
        if entry.stream is not None and entry.state == "tls":
            self._tls(entry, data)
            return
        if entry.stream is not None:
            try:
                data = entry.stream.open(data)
            except TlsStreamError as exc:
                self._reject(entry, "tls", str(exc))
                return
        self._plain(entry, data)

    def _tls(self, entry: _Entry, data: bytes) -> None:
        assert entry.stream is not None
        try:
            out, done = entry.stream.handshake_step(data, entry.first)
        except TlsStreamError as exc:
            self._send(entry, entry.stream.alert)
            self._reject(entry, "tls", str(exc), rejected_tls=True)
            return
        self._send(entry, out)
        if done:
            entry.state = "cookie"
            self._send(entry, entry.stream.seal(entry.core.start().out))

    def _plain(self, entry: _Entry, data: bytes) -> None:
        """Cookie-phase plaintext. The proof (the first ANSWER_SIZE bytes) is collected
        before the core sees it, so that checking it can wait for the address's token."""
        if entry.state == "token":
            entry.early += data
            return
        if not entry.early and entry.core.state != "await_answer":
            self._step(entry, entry.core.feed(data))
            return
        entry.early += data
        head = entry.early[: len(MAGIC)]
        if len(entry.early) >= ANSWER_SIZE or not MAGIC.startswith(head):
            self._check_proof(entry, time.monotonic())

    def _check_proof(self, entry: _Entry, now: float) -> None:
        garbage = not MAGIC.startswith(entry.early[: len(MAGIC)])
        if not garbage and not self.tarpit.take(entry.source, now):
            if entry.state != "token":
                entry.proof_at = now
            entry.state = "token"
            entry.until = now + max(self.tarpit.wait(entry.source, now), 0.01)
            return
        entry.state = "cookie"
        data, entry.early = entry.early, b""
        step = entry.core.feed(data)
        verdict = step.verdict
        if not garbage and not (isinstance(verdict, Failed) and verdict.reason == "bad_cookie"):
            self.tarpit.refund(entry.source, now)
        self._step(entry, step)

    def _step(self, entry: _Entry, step: Any) -> None:
        if step.out:
            self._send(entry, entry.stream.seal(step.out) if entry.stream else step.out)
        verdict = step.verdict
        if isinstance(verdict, NeedDecision):
            self._hand_over(entry, verdict)
        elif isinstance(verdict, Failed):
            if verdict.reason == "bad_cookie":
                self._tarpit(entry)
            else:
                self._reject(entry, verdict.reason, verdict.detail)

    def _send(self, entry: _Entry, data: bytes) -> None:
        if data:
            entry.out += data
            self._flush(entry)

    def _flush(self, entry: _Entry) -> None:
        try:
            while entry.out:
                sent = entry.sock.send(entry.out)
                del entry.out[:sent]
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            entry.out.clear()
        want = selectors.EVENT_READ | (selectors.EVENT_WRITE if entry.out else 0)
        with contextlib.suppress(KeyError, ValueError):
            if self._selector.get_key(entry.sock).events != want:
                self._selector.modify(entry.sock, want, entry)

    # ------------------------------------------------------------------ endings

    def _hand_over(self, entry: _Entry, verdict: NeedDecision) -> None:
        """The peer proved the cookie and said hello: the kernel takes the socket."""
        self._forget(entry)
        sock = entry.sock
        try:
            sock.setblocking(True)
            if entry.out:  # rare: our ACK still queued; it must precede what the kernel sends
                sock.settimeout(1.0)
                sock.sendall(entry.out)
            sock.settimeout(None)
        except OSError as exc:
            self._reject(entry, "closed", f"while sending the handshake: {exc}", forgotten=True)
            return
        self.host.hello(sock, entry.core, verdict, entry.stream, entry.where, entry.source)

    def _tarpit(self, entry: _Entry) -> None:
        now = time.monotonic()
        name = ""
        if entry.stream is not None:
            with contextlib.suppress(Exception):
                name = describe_san(peer_san(entry.stream.peer_cert()))
        failures, hold = self.tarpit.failed(entry.source, name, now)
        claimed = f" claiming {name}" if name else ""
        log.debug("dist %s: wrong cookie from %s%s", self.host.node, entry.where, claimed)
        held = sum(1 for e in self._by_address.get(entry.source, ()) if e.state == "hold")
        if hold and (failures == 1 or hold > self._last_hold(entry.source, name)):
            log.warning(
                "dist %s: rejected connection from %s: bad_cookie (%d failed cookie proofs from "
                "%s%s; each is now held %g s before it is closed)",
                self.host.node,
                entry.where,
                failures,
                entry.source,
                claimed,
                hold,
            )
        if len(self._holds) >= 10_000:
            self._holds.clear()
        self._holds[f"{entry.source} {name}"] = hold
        if not hold or held >= _MAX_HELD_PER_ADDRESS:
            self._close(entry)
            return
        entry.state, entry.until = "hold", now + hold
        with contextlib.suppress(KeyError, ValueError):
            self._selector.modify(entry.sock, selectors.EVENT_READ, entry)

    def _last_hold(self, source: str, name: str) -> float:
        return self._holds.get(f"{source} {name}", 0.0)

    def _reject(
        self,
        entry: _Entry,
        reason: str,
        detail: str,
        *,
        rejected_tls: bool = False,
        forgotten: bool = False,
    ) -> None:
        self._tell(
            (entry.source, f"{reason} {detail}"),
            "dist %s: rejected connection from %s: %s (%s)",
            self.host.node,
            entry.where,
            reason,
            detail,
        )
        if forgotten:
            with contextlib.suppress(OSError):
                entry.sock.close()
        else:
            self._close(entry)

    def _forget(self, entry: _Entry) -> None:
        if self._entries.pop(entry.sock, None) is None:
            return
        group = self._by_address.get(entry.source)
        if group is not None:
            group.pop(entry, None)
            if not group:
                del self._by_address[entry.source]
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(entry.sock)

    def _close(self, entry: _Entry) -> None:
        self._forget(entry)
        with contextlib.suppress(OSError):
            entry.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            entry.sock.close()

    def _tell(self, key: tuple[str, str], msg: str, *args: Any) -> None:
        """A warning per key every _LOG_EVERY s, saying how many were not logged; the rest
        at debug level."""
        now = time.monotonic()
        last = self._told.get(key)
        if last is not None and now - last[0] < _LOG_EVERY:
            self._told[key] = (last[0], last[1] + 1)
            log.debug(msg, *args)
            return
        if len(self._told) >= 10_000:
            self._told.clear()
        self._told[key] = (now, 0)
        skipped = last[1] if last is not None else 0
        suffix = f" (and {skipped} more like it in the last {_LOG_EVERY:g} s)" if skipped else ""
        log.warning(msg + "%s", *args, suffix)
