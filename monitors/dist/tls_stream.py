"""TLS over a dist socket, through an `ssl.SSLObject` and memory BIOs.

Why not `ssl.SSLSocket`: a dist connection is read on the I/O loop's thread while senders
write from theirs, and an OpenSSL connection must not be used by two threads at once. Here the
socket stays a plain non-blocking socket (so a sender keeps its direct send), and every use of
the TLS state (`seal` before a write, `open` after a read) takes one short lock. With memory
BIOs the socket never raises SSLWantRead/SSLWantWrite: `open` returns what whole records
held, and a partial record waits in the BIO for the rest. Records are sealed by
whoever holds the writer's turn and sent in that order (connection.py), so they reach the
peer in sequence. After the handshake only our own records flow: the server sends no session
tickets (contexts.py), so reading never has to write.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from typing import Any

from monitors.dist.handshake import MAGIC
from monitors.tls import describe_san, peer_san, san_names_node

READ_SIZE = 256 * 1024
_TLS_RECORD = 0x16


class TlsStreamError(Exception):
    """The TLS handshake or a record failed; the message says why, for the log. `kind` is
    "refused" (TLS said no: a certificate, a protocol mismatch), "timeout" or "closed"; only
    "refused" is a reason to back off, the others may be a passing network fault."""

    def __init__(self, message: str, kind: str = "refused") -> None:
        super().__init__(message)
        self.kind = kind


def tls_hint(first: bytes, server_side: bool) -> str:
    if first and MAGIC.startswith(first[: len(MAGIC)]):
        return " (the peer speaks plain dist: it runs without `tls:`)"
    if not first and server_side:
        return (
            " (the peer sent nothing: a node without `tls:` waits for our challenge;"
            " is it running without `tls:`?)"
        )
    if first and first[0] != _TLS_RECORD and server_side:
        return f" (not a TLS client: first bytes {first[:8]!r})"
    return ""


class TlsStream:
    """One connection's TLS state over `sock` (which stays a plain, blocking socket)."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, server_side: bool) -> None:
        self._sock = sock
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._obj = context.wrap_bio(self._in, self._out, server_side=server_side)
        self._server_side = server_side
        self._lock = threading.Lock()
        self.alert = b""

    def handshake(self, deadline: float) -> None:
        """Run the TLS handshake on the socket until `deadline` (monotonic). Raises
        TlsStreamError saying why it failed."""
        sock, obj = self._sock, self._obj
        first = b""
        while True:
            try:
                obj.do_handshake()
                done = True
            except ssl.SSLWantReadError:
                done = False
            except ssl.SSLError as exc:
                self._flush_quietly()  # the alert tells the peer why
                hint = tls_hint(first, self._server_side)
                raise TlsStreamError(f"TLS handshake failed: {_reason(exc)}{hint}") from None
            out = self._out.read()
            if out:
                try:
                    sock.settimeout(max(deadline - time.monotonic(), 0.001))
                    sock.sendall(out)
                except OSError as exc:
                    raise TlsStreamError(
                        f"TLS handshake failed: {exc}{tls_hint(first, self._server_side)}", "closed"
                    ) from None
            if done:
                return
            remaining = deadline - time.monotonic()
            hint = tls_hint(first, self._server_side)
            if remaining <= 0:
                raise TlsStreamError(f"no TLS handshake within the timeout{hint}", "timeout")
            try:
                sock.settimeout(remaining)
                data = sock.recv(READ_SIZE)
            except TimeoutError:
                raise TlsStreamError(
                    f"no TLS handshake within the timeout{hint}", "timeout"
                ) from None
            except OSError as exc:
                raise TlsStreamError(f"TLS handshake failed: {exc}{hint}", "closed") from None
            if not data:
                raise TlsStreamError(
                    f"the peer closed the connection during the TLS handshake{hint}", "closed"
                )
            if len(first) < 8:
                first += data[: 8 - len(first)]
            self._in.write(data)

    def handshake_step(self, data: bytes, first: bytes = b"") -> tuple[bytes, bool]:
        """One step of the handshake without touching the socket (the pending loop's way:
        no thread waits on a peer that is slow to answer). Feed what arrived (b"" to begin);
        returns (bytes to send, done). Raises TlsStreamError; `first` is the peer's first
        bytes, for the hint."""
        if data:
            self._in.write(data)
        try:
            self._obj.do_handshake()
            done = True
        except ssl.SSLWantReadError:
            done = False
        except ssl.SSLError as exc:
            # The alert that tells the peer why is left in `alert` for the caller to send.
            hint = tls_hint(first, self._server_side)
            self.alert = self._out.read()
            raise TlsStreamError(f"TLS handshake failed: {_reason(exc)}{hint}") from None
        return self._out.read(), done

    def _flush_quietly(self) -> None:
        out = self._out.read()
        if out:
            try:
                self._sock.settimeout(1.0)
                self._sock.sendall(out)
            except OSError:
                pass

    def seal(self, data: bytes) -> bytes:
        """Encrypt `data` into records to send (in the order sealed)."""
        with self._lock:
            if data:
                self._obj.write(data)
            return self._out.read()

    def open(self, data: bytes) -> bytes:
        """Decrypt what arrived; returns the plaintext (maybe b"" until a record is whole).
        Raises TlsStreamError on a bad record, an alert, or a close_notify."""
        with self._lock:
            self._in.write(data)
            chunks = []
            while True:
                try:
                    chunk = self._obj.read(READ_SIZE)
                except ssl.SSLWantReadError:
                    break
                except ssl.SSLZeroReturnError:
                    raise TlsStreamError("the peer closed the TLS session") from None
                except ssl.SSLError as exc:
                    raise TlsStreamError(f"TLS error: {_reason(exc)}") from None
                if not chunk:
                    break
                chunks.append(chunk)
            if self._out.pending:
                # A post-handshake message that wants an answer (a KeyUpdate): our peers never
                # send one; answering from the reader could reorder records, so refuse.
                raise TlsStreamError("the peer sent a TLS message that needs an answer")
        return b"".join(chunks)

    def peer_cert(self) -> dict[str, Any] | None:
        return self._obj.getpeercert()

    def describe(self) -> str:
        cipher = self._obj.cipher()
        return f"{self._obj.version()} {cipher[0] if cipher else '?'}"


def cert_mismatch(stream: TlsStream, node: str) -> str:
    """ "" if the peer's certificate names `node`; else why not (for the log)."""
    san = peer_san(stream.peer_cert())
    if san_names_node(san, node):
        return ""
    return (
        f"its certificate names {describe_san(san)}, not {node} (a certificate names one "
        f"node by a URI SAN rabbitry://name@host, or all nodes of a host by a DNS/IP SAN)"
    )


def _reason(exc: ssl.SSLError) -> str:
    """OpenSSL's reason in words: "certificate has expired", "peer did not return a
    certificate", "tlsv13 alert certificate required"."""
    verify = getattr(exc, "verify_message", None)
    if verify:
        return str(verify)
    if exc.reason:
        return str(exc.reason).replace("_", " ").lower()
    return str(exc)
