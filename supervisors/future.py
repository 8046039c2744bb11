"""LatchFuture: pykka's ThreadingFuture with a lock as its latch instead of a Condition.

Every ask makes a future. pykka's ThreadingFuture builds a threading.Condition for it (a
Python object, its lock and a waiter deque: about 1 KB and 4 us), and its waiters take that
Condition in turn. Here the future is done when its latch, a plain lock taken at creation, is
released by `set()`. A waiter acquires the latch and at once releases it again, so any number
of waiters pass, in turn, as with the Condition. Results, exceptions, timeouts, get hooks and
`queue.Full` on a second set behave as ThreadingFuture's; it is a ThreadingFuture subclass so
that code testing for one still works.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from typing import Any

from pykka import Future, Timeout
from pykka._threading import ThreadingFuture, ThreadingFutureResult

_set_lock = threading.Lock()  # makes "not set yet? then set" atomic across setters


class LatchFuture(ThreadingFuture[Any]):
    """A ThreadingFuture that costs a lock, not a Condition; see the module docstring."""

    def __init__(self) -> None:
        Future.__init__(self)  # not ThreadingFuture's: no Condition
        self._result: ThreadingFutureResult | None = None
        self._latch = threading.Lock()
        self._latch.acquire()

    def get(self, *, timeout: float | None = None) -> Any:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._get_hook is not None:
                return Future.get(self, timeout=timeout)
            result = self._result
            if result is not None:
                break
            if deadline is None:
                self._latch.acquire()
            else:
                remaining = deadline - time.monotonic()
                acquired = (
                    self._latch.acquire(timeout=remaining)
                    if remaining > 0
                    else self._latch.acquire(False)
                )
                if not acquired:
                    raise Timeout(f"{timeout} seconds")
            self._latch.release()  # let the next waiter through too
        if result.exc_info is not None:
            exc_type, exc_value, exc_traceback = result.exc_info
            assert exc_type is not None
            if exc_value is None:
                exc_value = exc_type()
            if exc_value.__traceback__ is not exc_traceback:
                raise exc_value.with_traceback(exc_traceback)
            raise exc_value
        return result.value

    def _complete(self, result: ThreadingFutureResult) -> None:
        with _set_lock:
            if self._result is not None or self._get_hook is not None:
                raise queue.Full
            self._result = result
        self._latch.release()

    def set(self, value: Any | None = None) -> None:
        self._complete(ThreadingFutureResult(value=value))

    def set_exception(self, exc_info: Any = None) -> None:
        assert exc_info is None or len(exc_info) == 3
        self._complete(ThreadingFutureResult(exc_info=exc_info or sys.exc_info()))

    def set_get_hook(self, func: Any) -> None:
        with _set_lock:
            if self._result is not None:
                raise queue.Full
            Future.set_get_hook(self, func)
        self._latch.release()  # waiters wake up and run the hook
