"""Outgoing requests and the bounded buffer between callers and a backend's I/O thread.

A caller never touches a broker connection: it queues a Request, wakes the I/O thread, and (for
a confirmed message) waits on the request. Waiting is the caller's; the I/O thread never blocks
on a caller. A caller that gives up abandons its request under the request's lock, so the I/O
thread either sees "abandoned" and skips it, or has already started it (and then the caller's
error says the message may still arrive).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

from monitors.bus.errors import BusError, BusUnavailable

BROADCAST, DIRECT, BIND, UNBIND = "broadcast", "direct", "bind", "unbind"

_PENDING, _STARTED, _DONE, _ABANDONED = range(4)


@dataclass(eq=False)
class Request:
    """One thing for the I/O thread to do: publish a frame, or (AMQP) bind/unbind a pattern."""

    kind: str
    routing_key: str
    frame: bytes = b""
    node: str | None = None  # the target of a direct send
    confirm: bool = False
    deadline: float = 0.0  # time.monotonic() after which a confirming caller has given up
    describe: str = ""  # "publish 'k' on redis://...": for error messages
    _state: int = field(default=_PENDING, repr=False)
    _error: BaseException | None = field(default=None, repr=False)
    _done: threading.Event = field(default_factory=threading.Event, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def start(self) -> bool:
        """I/O thread: claim the request; False if its caller already gave up."""
        with self._lock:
            if self._state != _PENDING:
                return False
            self._state = _STARTED
            return True

    def retry_later(self) -> None:
        """I/O thread: the attempt failed in a way worth retrying; hand it back to PENDING."""
        with self._lock:
            if self._state == _STARTED:
                self._state = _PENDING

    def finish(self, error: BaseException | None = None) -> None:
        """I/O thread: the request is done, with `error` for the caller if it failed."""
        with self._lock:
            if self._state == _DONE:
                return
            self._state, self._error = _DONE, error
        self._done.set()

    @property
    def abandoned(self) -> bool:
        return self._state == _ABANDONED

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def wait(self, timeout: float, describe: str) -> None:
        """Caller: block until done; raise its error, or BusUnavailable after `timeout`.
        `describe` says where the message was going, for the error text."""
        if not self._done.wait(timeout):
            with self._lock:
                state = self._state
                if state == _PENDING:
                    self._state = _ABANDONED
            if state in (_PENDING, _STARTED):
                maybe = " It was being sent and may still arrive." if state == _STARTED else ""
                raise BusUnavailable(
                    f"{describe}: not confirmed within {timeout:g} s.{maybe} Check that the "
                    "broker is up and reachable (bus.connected, bus.stats()), or pass a longer timeout."
                )
        if self._error is not None:
            raise self._error


class Outbox:
    """A bounded FIFO of Requests. Control requests (bind/unbind) bypass the bound: they are
    few (one per pattern change) and losing one would leave a subscription deaf."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._items: deque[Request] = deque()
        self._count = 0  # publishes in _items (the bounded kind)
        self._cond = threading.Condition()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, request: Request, force: bool = False) -> bool:
        """Append; False (nothing queued) if the buffer is full and `force` is not set."""
        with self._cond:
            counted = request.kind in (BROADCAST, DIRECT)
            if counted and not force and self._count >= self.limit:
                return False
            self._items.append(request)
            self._count += counted
            self._cond.notify()
            return True

    def put_front(self, request: Request) -> None:
        """Put back a request to retry it first (keeps per-sender order)."""
        with self._cond:
            self._items.appendleft(request)
            self._count += request.kind in (BROADCAST, DIRECT)
            self._cond.notify()

    def get(self, timeout: float | None = None) -> Request | None:
        """The next request, waiting up to `timeout` (0: don't wait); None if there is none."""
        with self._cond:
            if not self._items and timeout:
                self._cond.wait(timeout)
            if not self._items:
                return None
            request = self._items.popleft()
            self._count -= request.kind in (BROADCAST, DIRECT)
            return request

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def take_all(self) -> list[Request]:
        with self._cond:
            items = list(self._items)
            self._items.clear()
            self._count = 0
            return items

    def fail_all(self, error: BusError) -> None:
        """At close: every waiting caller gets `error` at once instead of its timeout."""
        for request in self.take_all():
            request.finish(error)
