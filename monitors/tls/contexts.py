"""The SSL contexts of a node, built from its `tls:` files and rebuilt when they change.

Rotation without a restart: every new connection asks for a context, and the context is
rebuilt first if a file's (inode, size, mtime) changed since the last build, or after
`reload()` (SIGHUP). A connection keeps the context it was made with, so established links
stay up while new ones use the new certificate and CA. A rebuild that fails (a file being
rewritten, a key that does not match yet) keeps the last good contexts and logs once per
change of the files.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from pathlib import Path

from monitors.tls.files import TlsFileError, TlsFiles, check_tls_files

log = logging.getLogger("monitors.tls")

_Signature = tuple[tuple[int, int, int], ...]


def _signature(files: TlsFiles) -> _Signature:
    out = []
    for path in files.paths().values():
        try:
            info = os.stat(path)
            out.append((info.st_ino, info.st_size, info.st_mtime_ns))
        except OSError:
            out.append((0, 0, 0))
    return tuple(out)


def _dist_context(files: TlsFiles, server: bool) -> ssl.SSLContext:
    """Mutual TLS 1.3: both sides present a certificate chaining to the CA. The client does
    not match the peer's host name: the node name check (names.py) is stricter and is done
    by the dist layer once it knows which node the peer claims to be."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    if not server:
        ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_cert_chain(files.certfile, files.keyfile)
    ctx.load_verify_locations(cafile=str(files.cafile))
    if files.crlfile is not None:
        # A revoked peer certificate fails the handshake, in both directions. The CRL is
        # loaded with the contexts, which are rebuilt when its file changes or on SIGHUP.
        ctx.load_verify_locations(cafile=str(files.crlfile))
        ctx.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    if server:
        # No session tickets: nothing is ever sent after the handshake but our own records,
        # which keeps the reader and writer of a connection independent (tls_stream.py).
        ctx.num_tickets = 0
    return ctx


def _https_context(files: TlsFiles) -> ssl.SSLContext:
    """HTTPS for the control API, metrics and the failover status: server authentication
    only (clients prove themselves with the control token), TLS 1.2 or later."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(files.certfile, files.keyfile)
    return ctx


def https_client_context(cafile: str | os.PathLike[str] | None) -> ssl.SSLContext:
    """A client context that trusts `cafile` (the cluster CA; None: the system's) and checks
    the server's host name, as a browser does."""
    return ssl.create_default_context(cafile=str(cafile) if cafile is not None else None)


class TlsContexts:
    """The node's contexts: `dist_server()`, `dist_client()` and `https_server()`.

    Raises TlsFileError at construction if the files are unusable (see check_tls_files)."""

    def __init__(self, files: TlsFiles, node: str | None = None) -> None:
        self.files = files
        self.node = node
        self._lock = threading.Lock()
        self._failed: _Signature | None = None
        self._build(_signature(files))

    def _build(self, signature: _Signature) -> None:
        files = self.files
        check_tls_files(files, self.node)
        try:
            built = (
                _dist_context(files, server=True),
                _dist_context(files, server=False),
                _https_context(files),
            )
        except (ssl.SSLError, OSError) as exc:
            raise TlsFileError("certfile", f"cannot load {files.certfile}: {exc}") from None
        self._dist_server, self._dist_client, self._https = built
        self._signature = signature
        self.generation = getattr(self, "generation", 0) + 1

    def reload(self, force: bool = True) -> bool:
        """Rebuild the contexts (force) or only if the files changed. True if rebuilt; a
        failure is logged and the previous contexts stay in use."""
        signature = _signature(self.files)
        with self._lock:
            if not force and signature in (self._signature, self._failed):
                return False
            try:
                self._build(signature)
            except TlsFileError as exc:
                if self._failed != signature:
                    log.error("tls: keeping the previous certificates: %s", exc)
                self._failed = signature
                return False
            self._failed = None
        log.info(
            "tls: loaded %s (CA %s), generation %d",
            self.files.certfile,
            self.files.cafile,
            self.generation,
        )
        return True

    def dist_server(self) -> ssl.SSLContext:
        self.reload(force=False)
        return self._dist_server

    def dist_client(self) -> ssl.SSLContext:
        self.reload(force=False)
        return self._dist_client

    def https_server(self) -> ssl.SSLContext:
        self.reload(force=False)
        return self._https


def tls_files(certfile: str | Path, keyfile: str | Path, cafile: str | Path) -> TlsFiles:
    """TlsFiles from three paths."""
    return TlsFiles(Path(certfile), Path(keyfile), Path(cafile))
