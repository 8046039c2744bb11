"""One timer thread per OS process for every `Process.send_after` (Erlang's timer wheel).

A `threading.Timer` per send_after cost a thread per pending timer: a node arms three or four
(ticks, heartbeats, deadlines), so a `rabbitry swarm` process with 500 members held 1,500-2,000
timer threads, each made and torn down again on every re-arm. Erlang keeps its timers in one
wheel per scheduler; here one heap and one thread serve them all.

Decisions worth knowing:
- A fired timer's callback runs on the timer thread. The callbacks are `Process`'s own
  (`_sv_timer_fired`: a mailbox put), so nothing slow ever runs there; an exception is logged
  and the thread goes on.
- Cancelling marks the timer; the heap drops it lazily when its time comes, or in one pass
  when the cancelled entries outnumber the live ones (re-armed ticks cancel a timer per tick).
- `SendAfterTimer` keeps the part of threading.Timer's interface that callers used:
  `cancel()`, `is_alive()` (pending) and `join(timeout)` (until it fired or was cancelled).
- After a fork the child starts with no timers and no thread; the first send_after in the
  child makes a new thread (the parent's thread does not exist there).
"""

from __future__ import annotations

import heapq
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("supervisors.timers")

THREAD_NAME = "supervisors-send-after"  # the one timer thread, so a leak check can tell it apart


class SendAfterTimer:
    """A pending timer: `cancel()` calls it off; `is_alive()` is True until it fired or was
    cancelled, and `join(timeout)` waits for that."""

    __slots__ = ("_args", "_callback", "_done", "_event", "when")

    def __init__(self, when: float, callback: Callable[..., Any] | None, args: tuple) -> None:
        self.when = when
        self._callback: Callable[..., Any] | None = callback
        self._args = args
        self._done = False
        self._event: threading.Event | None = None  # made by the first join()

    @classmethod
    def ended(cls) -> SendAfterTimer:
        """A timer that was never armed (its owner had ended): not alive, never fires."""
        timer = cls(0.0, None, ())
        timer._done = True
        return timer

    def cancel(self) -> None:
        """Call it off; a no-op once it fired. Its message may already be in the mailbox."""
        if not self._done:
            self._finish()
            _service.cancelled()

    def is_alive(self) -> bool:
        return not self._done

    def join(self, timeout: float | None = None) -> None:
        if self._done:
            return
        with _event_lock:
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        if not self._done:
            event.wait(timeout)

    def _finish(self) -> None:
        self._done = True
        self._callback = None
        self._args = ()
        event = self._event  # join() looks at _done again after making its event
        if event is not None:
            event.set()

    def _fire(self) -> None:
        callback, args = self._callback, self._args
        if self._done or callback is None:
            return
        self._finish()
        try:
            callback(self, *args)
        except Exception:
            log.exception("send_after: a timer's callback failed")


_event_lock = threading.Lock()


class TimerService:
    """The heap of pending timers and the thread that fires them."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, SendAfterTimer]] = []
        self._seq = 0
        self._cancelled = 0
        self._thread: threading.Thread | None = None

    def start(
        self, seconds: float, callback: Callable[..., Any], args: tuple = ()
    ) -> SendAfterTimer:
        """A timer that calls `callback(timer, *args)` on the timer thread after `seconds`."""
        timer = SendAfterTimer(time.monotonic() + max(0.0, seconds), callback, args)
        with self._cond:
            self._seq += 1
            first = not self._heap or timer.when < self._heap[0][0]
            heapq.heappush(self._heap, (timer.when, self._seq, timer))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
                self._thread.start()
            elif first:
                self._cond.notify()
        return timer

    def cancelled(self) -> None:
        """Count a cancelled entry; compact the heap once they are the majority."""
        with self._cond:
            self._cancelled += 1
            if self._cancelled > 64 and self._cancelled * 2 > len(self._heap):
                self._heap = [e for e in self._heap if not e[2]._done]
                heapq.heapify(self._heap)
                self._cancelled = 0

    def pending(self) -> int:
        """Timers armed and neither fired nor cancelled (for tests and thread dumps)."""
        with self._cond:
            return sum(1 for e in self._heap if not e[2]._done)

    def _run(self) -> None:
        heap, cond = self._heap, self._cond
        while True:
            due: list[SendAfterTimer] = []
            with cond:
                heap = self._heap  # compaction may have replaced the list
                now = time.monotonic()
                while heap and heap[0][0] <= now:
                    timer = heapq.heappop(heap)[2]
                    if timer._done:
                        self._cancelled = max(0, self._cancelled - 1)
                    else:
                        due.append(timer)
                if not due:
                    cond.wait(heap[0][0] - now if heap else None)
                    continue
            for timer in due:
                timer._fire()

    def _after_fork(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._heap = []
        self._cancelled = 0
        self._thread = None


_service = TimerService()


def start_timer(seconds: float, callback: Callable[..., Any], args: tuple = ()) -> SendAfterTimer:
    """Arm a timer on this OS process's one timer thread."""
    return _service.start(seconds, callback, args)


def pending_timers() -> int:
    return _service.pending()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_service._after_fork)
