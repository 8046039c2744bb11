"""Lamport's logical clock and the ordering of stamped events, as kombu's `clocks` module
offers them to Celery's gossip, with kombu's `sort_heap` quirks fixed.

Gossip stamps every event it sends with `forward()` and calls `adjust(clock)` with every clock it
receives, so a later event (in the happened-before sense) always carries a larger clock. An
election collects one `(clock, "host.pid", ...)` candidate per node and every node picks the same
winner with `sort_heap`: the lowest clock, ties going to the lowest process id. That pick depends
only on the candidates, never on who computes it or in which order they arrived.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, NamedTuple, TypeVar

__all__ = ["LamportClock", "TimeTuple"]

Event = TypeVar("Event", bound=tuple[Any, ...])


class LamportClock:
    """A Lamport clock shared by the threads of one node.

    `value` is a plain int attribute (reading it needs no lock); the two updates hold a lock, so
    two threads that forward at once get two different values.
    """

    def __init__(self, initial_value: int = 0) -> None:
        self.value = initial_value
        self._lock = threading.Lock()

    def adjust(self, other: int) -> int:
        """On receiving a message stamped `other`: move past both clocks, return the new value."""
        with self._lock:
            self.value = max(self.value, other) + 1
            return self.value

    def forward(self) -> int:
        """Before a local event or a send: tick once, return the new value to stamp it with."""
        with self._lock:
            self.value += 1
            return self.value

    @staticmethod
    def sort_heap(h: Sequence[Event]) -> Event:
        """The winning event of an election: the lowest clock, ties to the lowest process id.

        `h` holds tuples `(clock, process_id, ...)`; extra fields ride along untouched. It is
        usually a heapq heap, but nothing here relies on that. kombu's version does: it reads
        `h[1]`, so a one-candidate election raises IndexError; it collects the tie run pairwise
        and never considers the run's last member; and it takes "the run" as the leading slice of
        the list, which in a heap is not where equal clocks sit (a heap is only partly sorted).
        One linear pass over every event fixes all three and costs no more than kombu's walk.
        """
        if not h:
            raise ValueError("sort_heap() needs at least one event: nobody stood in the election")
        return min(h, key=_election_key)

    def __repr__(self) -> str:
        return f"<LamportClock: {self.value}>"

    def __str__(self) -> str:
        return str(self.value)

    def __reduce__(self) -> tuple[type[LamportClock], tuple[int]]:
        # The lock can't be pickled and must never be shared by two clocks: a copy or an
        # unpickled clock starts from the same value with a lock of its own.
        return (type(self), (self.value,))


def _election_key(event: tuple[Any, ...]) -> tuple[Any, Any]:
    return (event[0], event[1])


class TimeTuple(NamedTuple):
    """An event's stamp for ordering in a heap: by Lamport clock when both sides have one,
    otherwise by wall-clock timestamp; equal keys fall back to the process id.

    kombu's `timetuple` treats a clock of 0 as missing (it tests truthiness); here only `None`
    is missing, since 0 is a real clock value. The ordering ignores `obj`, and the timestamp
    when clocks decide. Equality stays plain tuple equality over all four fields.
    """

    clock: int | None
    timestamp: float
    id: str
    obj: Any = None

    def _keys(self, other: object) -> tuple[tuple[Any, str], tuple[Any, str]] | None:
        if not isinstance(other, TimeTuple):
            return None
        if self.clock is not None and other.clock is not None:
            return (self.clock, self.id), (other.clock, other.id)
        return (self.timestamp, self.id), (other.timestamp, other.id)

    # The four comparisons are overridden together so that heapq (which uses <) and sorted()
    # agree with <=, > and >=. Against anything but a TimeTuple they return NotImplemented, and
    # Python then falls back to the other side (plain field-by-field order for a plain tuple).
    def __lt__(self, other: object) -> bool:
        keys = self._keys(other)
        return NotImplemented if keys is None else keys[0] < keys[1]

    def __le__(self, other: object) -> bool:
        keys = self._keys(other)
        return NotImplemented if keys is None else keys[0] <= keys[1]

    def __gt__(self, other: object) -> bool:
        keys = self._keys(other)
        return NotImplemented if keys is None else keys[0] > keys[1]

    def __ge__(self, other: object) -> bool:
        keys = self._keys(other)
        return NotImplemented if keys is None else keys[0] >= keys[1]
