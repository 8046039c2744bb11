"""Effects: what a pure protocol core asks its actor shell (or the simulator) to do.

Every protocol in rabbitry (dist handshake and ticks, the node monitor and its partition modes,
autoheal, mingle, elections, replication, RCS/RCC) is a plain class with no threads, sockets,
sleeps or clock reads. It is fed events together with the current time and returns a list of
effects. The pykka actor around it performs them on real sockets and timers; the deterministic
simulator in tests/sim performs them on a simulated network in virtual time. Keeping one set
of effect types for all cores is what lets the simulator drive any of them.

Protocol-specific effects (pause the application, persist the cluster files, ...) live next to
their core; these are the ones every networked core needs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Send:
    """Send `msg` (a JSON-able dict) to the process registered as `name` on `node`.

    Sending to a node that is not connected connects first, as Erlang's auto-connect does.
    """

    node: str
    name: str
    msg: dict[str, Any]


@dataclass(frozen=True)
class SetTimer:
    """Arm the timer `key` to fire `after` seconds from now; re-arming replaces it."""

    key: str
    after: float
    data: Any = None


@dataclass(frozen=True)
class CancelTimer:
    """Cancel the timer `key`, if armed. Cancelling an unarmed timer is a no-op."""

    key: str


@dataclass(frozen=True)
class Connect:
    """Try to connect to `node` (net_adm:ping); the outcome arrives as nodeup or not at all."""

    node: str


@dataclass(frozen=True)
class Disconnect:
    """Drop the connection to `node` and refuse to reconnect for `ban` seconds."""

    node: str
    ban: float = 1.0


@dataclass(frozen=True)
class Log:
    """A log line the shell writes with the core's logger (cores do no I/O, logging included)."""

    level: int
    text: str
    fields: dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def info(text: str, **fields: Any) -> Log:
        return Log(logging.INFO, text, fields)

    @staticmethod
    def warning(text: str, **fields: Any) -> Log:
        return Log(logging.WARNING, text, fields)

    @staticmethod
    def error(text: str, **fields: Any) -> Log:
        return Log(logging.ERROR, text, fields)


Effect = Send | SetTimer | CancelTimer | Connect | Disconnect | Log


def perform_all(
    effects: Iterable[Any], perform_one: Callable[[Any], None], logger: logging.Logger, who: str
) -> None:
    """Perform `effects` in order with `perform_one`, as every actor shell does: one effect
    that fails is logged (naming `who`) and does not stop the ones after it."""
    for effect in effects:
        try:
            perform_one(effect)
        except Exception:
            logger.exception("%s: performing %r failed", who, effect)
