"""Keyed timers for the actor shell of a pure core: SetTimer/CancelTimer performed for real.

A core names its timers by key; re-arming a key replaces the pending timer. The timer tells
the owning Process a `Fired(key, generation, data)`; the shell passes it to `fired()`, which
answers the key only if that arming is still current (a timer replaced or cancelled after it
had already queued its message is dropped). Timers run through `Process.send_after`, so every
pending one is cancelled when the process ends.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

__all__ = ["CoreTimers", "Fired"]


@dataclass(frozen=True)
class Fired:
    """What a keyed timer tells its process when it fires."""

    key: str
    generation: int
    data: Any


class CoreTimers:
    """The armed timers of one shell, by key."""

    def __init__(self, owner: Any) -> None:
        self._owner = owner  # a supervisors.Process: send_after / cancel_timer
        self._armed: dict[str, tuple[int, threading.Timer]] = {}
        self._generation = 0

    def set(self, key: str, after: float, data: Any = None) -> None:
        """Arm `key` to fire in `after` seconds, replacing any pending arming."""
        self.cancel(key)
        self._generation += 1
        timer = self._owner.send_after(after, Fired(key, self._generation, data))
        self._armed[key] = (self._generation, timer)

    def cancel(self, key: str) -> None:
        entry = self._armed.pop(key, None)
        if entry is not None:
            self._owner.cancel_timer(entry[1])

    def fired(self, message: Fired) -> bool:
        """True if `message` is the current arming of its key (which is then disarmed)."""
        current = self._armed.get(message.key)
        if current is None or current[0] != message.generation:
            return False
        del self._armed[message.key]
        return True

    def clear(self) -> None:
        """Forget every arming (the timers themselves end with the process)."""
        self._armed.clear()

    def __contains__(self, key: str) -> bool:
        return key in self._armed
