"""Refusals and back-off for connecting out: which peers we stop trying for a while, and one
log line per reason rather than one per attempt.

Why a part of its own: both sides of the handshake report here (a certificate that names
another node, a refused cookie, a peer that says our name is in use), and a misconfigured
peer is retried every second by several callers, so what is logged, counted and backed off
must be decided in one place.
"""

from __future__ import annotations

import logging
import threading
import time

from monitors.dist.gate import FailureGate
from monitors.dist.handshake import NAME_IN_USE, ROLE_CONFLICT, Failed
from monitors.dist.name_check import NameCheck, refused_log_line

log = logging.getLogger("monitors.dist")

_TELL_AGAIN_AFTER = 60.0  # the same failure for the same peer is logged once a minute


class Backoff:
    """Peers we failed to reach for a reason that retrying soon cannot fix (TLS refused, a
    plain/TLS mismatch, a wrong cookie): 1 s doubling to 30 s. Thread-safe."""

    def __init__(self, node: str, names: NameCheck) -> None:
        self.node = node
        self.names = names
        self._lock = threading.Lock()
        self._gate = FailureGate(free=0, initial=1.0, maximum=30.0)
        self._told: dict[str, tuple[str, float]] = {}  # key -> (last reason, when logged)

    def blocked(self, node: str) -> bool:
        """True while we back off from `node`."""
        with self._lock:
            return bool(self._gate.blocked_for(node, time.monotonic()))

    def succeeded(self, node: str) -> None:
        """A connection with `node` is up: start over."""
        with self._lock:
            self._gate.succeeded(node)
            self._told.pop(node, None)

    def tell(self, key: str, what: str, why: str, then: str = "") -> None:
        """Log `what: why` as a warning the first time (per key and reason, once a minute),
        at debug level after that: a misconfigured peer retries every second."""
        now = time.monotonic()
        with self._lock:
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

    def refused(self, node: str, what: str, why: str) -> None:
        """A connect failure retrying cannot fix: back off from `node` (1 s doubling to 30 s)."""
        with self._lock:
            _, step = self._gate.failed(node, time.monotonic())
        self.tell(node, what, why, f"; backing off, next attempt in {step:g} s")

    def refused_for_good(self, node: str, verdict: Failed) -> None:
        """`node` refused our hello: a running node holds our name (`detail` is where), or
        the cluster holds it under the other role (`detail` says why). Or we dropped the
        connection for a role conflict on our side ("role_checked"): just back off."""
        if verdict.reason == NAME_IN_USE:
            self._told_off(node, NAME_IN_USE, refused_log_line(self.node, verdict.detail))
        elif verdict.reason == ROLE_CONFLICT:
            self._told_off(node, ROLE_CONFLICT, f"node {self.node}: {verdict.detail}")
        else:
            with self._lock:
                self._gate.failed(node, time.monotonic())

    def _told_off(self, node: str, reason: str, line: str) -> None:
        """`node` refused us for `reason`, which this process cannot fix: count, log `line`,
        and tell the owner (the node exits 2), or back off without one."""
        self.names.count(reason, self.node, f"{node} refused us: {line}")
        log.error("dist %s (refused by %s)", line, node)
        callback = self.names.take_callback()
        if callback is not None:
            callback(reason, line)
        else:
            with self._lock:
                self._gate.failed(node, time.monotonic())
