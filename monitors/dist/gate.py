"""Back-off after repeated failures, per key (a source address, a peer node). Pure: fed the
time, it returns what to do, and the shell logs and refuses.

Why: the cookie is the only secret between nodes without TLS, and Erlang puts no limit on
failed handshakes, so a weak cookie falls to guessing (ecosystem_security.md §3). After
`free` failures from one address, each further failure refuses that address for twice as
long as the last time, up to `maximum`; a success or `forget_after` seconds of quiet start
over. The table is bounded: the oldest key goes first.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class _Entry:
    failures: int = 0
    last: float = 0.0
    until: float = 0.0


class FailureGate:
    """Per-key failure counts and back-off windows."""

    def __init__(
        self,
        free: int = 3,
        initial: float = 1.0,
        maximum: float = 60.0,
        forget_after: float = 600.0,
        max_keys: int = 10_000,
    ) -> None:
        if free < 0 or not 0 < initial <= maximum or forget_after <= 0 or max_keys < 1:
            raise ValueError(
                "FailureGate needs free >= 0, 0 < initial <= maximum, forget_after > 0 and "
                f"max_keys >= 1; got {free}, {initial}, {maximum}, {forget_after}, {max_keys}"
            )
        self.free, self.initial, self.maximum = free, initial, maximum
        self.forget_after, self.max_keys = forget_after, max_keys
        self._entries: dict[str, _Entry] = {}

    def blocked_for(self, key: str, now: float) -> float:
        """Seconds `key` is still refused (0.0: let it try)."""
        entry = self._entries.get(key)
        return max(entry.until - now, 0.0) if entry is not None else 0.0

    def failed(self, key: str, now: float) -> tuple[int, float]:
        """Count a failure: (failures so far, the new back-off in seconds or 0.0 if none)."""
        entry = self._entries.get(key)
        if entry is None or now - entry.last > self.forget_after:
            if key not in self._entries and len(self._entries) >= self.max_keys:
                oldest = min(self._entries, key=lambda k: self._entries[k].last)
                del self._entries[oldest]
            entry = self._entries[key] = _Entry()
        entry.failures += 1
        entry.last = now
        over = entry.failures - self.free
        if over <= 0:
            return entry.failures, 0.0
        step = min(self.initial * 2 ** min(over - 1, 30), self.maximum)
        entry.until = now + step
        return entry.failures, step

    def succeeded(self, key: str) -> None:
        """A success: forget the key's failures."""
        self._entries.pop(key, None)

    def __len__(self) -> int:
        return len(self._entries)
