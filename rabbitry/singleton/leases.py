"""The leases of the singletons this node holds now, for `rabbitry.singleton.current()`.

One OS process is one node, so a module-level table is the node's: the service writes it on
every start, renewal and stop, and a Process child reads it from any thread.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class SingletonLease:
    """A singleton instance's fencing token and the wall-clock end of its lease (seconds since
    the epoch). Check `valid()` before acting: never act after the lease has run out."""

    name: str
    token: int
    expires: float

    def valid(self, margin: float = 0.0) -> bool:
        """True while the lease has more than `margin` seconds left."""
        return time.time() + margin < self.expires


_lock = threading.Lock()
_held: dict[str, SingletonLease] = {}


def set_lease(name: str, token: int, expires: float) -> None:
    with _lock:
        _held[name] = SingletonLease(name, token, expires)


def drop(name: str) -> None:
    with _lock:
        _held.pop(name, None)


def clear() -> None:
    with _lock:
        _held.clear()


def current(name: str | None = None) -> SingletonLease | None:
    """The lease of singleton `name` if this node holds it (None otherwise). Without a name:
    the one singleton this node holds, None if it holds none; ValueError if it holds several."""
    with _lock:
        if name is not None:
            return _held.get(name)
        if len(_held) > 1:
            raise ValueError(
                f"this node holds several singletons ({', '.join(sorted(_held))}); "
                "name the one you mean: current(name)"
            )
        return next(iter(_held.values()), None)
