"""Byte pumps for the in-process proxies of the TLS tests (tests/bus/test_tls.py's TLS
terminator, tests/dist/test_tls.py's recording proxy): one copy of the shutdown rules."""

from __future__ import annotations

import contextlib
import socket


def pump(src: socket.socket, dst: socket.socket, log: bytearray | None = None) -> None:
    """Copy `src` to `dst` until either side ends (keeping every byte in `log`, if given),
    then shut both down, so that the pump going the other way ends too."""
    try:
        while data := src.recv(65536):
            if log is not None:
                log += data
            dst.sendall(data)
    except OSError:
        pass
    for sock in (src, dst):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def close_all(listener: socket.socket, socks: list[socket.socket]) -> None:
    """Stop accepting, then close every connection the proxy made (their pumps end)."""
    listener.close()
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.close()
