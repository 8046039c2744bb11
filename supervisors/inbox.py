"""A mailbox with a priority lane for exit signals.

Erlang delivers an exit signal to a process ahead of the messages already in its queue; a plain
pykka inbox is one FIFO. Messages go into a C-implemented SimpleQueue (fast path); signals go
into a deque and a wake-up token is queued so that a blocked `get()` returns. `get()` always
looks at the signal lane first.

`close()` marks the inbox dead. A `put()` that races with the close drains the inbox itself, so
no asker is ever left waiting on a reply that cannot come.
"""

from __future__ import annotations

import queue
from collections import deque
from collections.abc import Callable
from typing import Any

_WAKE = object()
CLOSED = object()
"""Returned by `get()` once the inbox is closed, so a reader blocked in `get()` wakes up."""


class Inbox:
    """Two-lane mailbox; see the module docstring."""

    __slots__ = ("_closed", "_messages", "_on_drain", "_signals")
    # close() queues CLOSED so that a reader blocked in get() wakes up; a mailbox read without
    # blocking (PooledInbox) has no such reader and must not see the token
    _wakes_reader = True

    def __init__(self) -> None:
        self._messages: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._signals: deque[Any] = deque()
        self._closed = False
        self._on_drain: Callable[[Any], None] | None = None

    def put(self, envelope: Any, /) -> None:
        self._messages.put(envelope)
        if self._closed:
            self._drain()

    def put_signal(self, signal: Any) -> None:
        self._signals.append(signal)
        self._messages.put(_WAKE)

    def get(self) -> Any:
        while True:
            if self._signals:
                return self._signals.popleft()
            item = self._messages.get()
            if item is not _WAKE:
                return item

    def empty(self) -> bool:
        return not self._signals and self._messages.empty()

    def close(self, on_drain: Callable[[Any], None]) -> None:
        """Refuse further delivery: every envelope queued now or later goes to `on_drain`."""
        self._on_drain = on_drain
        self._closed = True
        self._drain()

    def _drain(self) -> None:
        on_drain = self._on_drain
        self._signals.clear()
        while True:
            try:
                item = self._messages.get_nowait()
            except queue.Empty:
                break
            if item is not _WAKE and item is not CLOSED and on_drain is not None:
                on_drain(item)
        if self._closed and self._wakes_reader:
            self._messages.put(CLOSED)
