"""The shared worker pool that runs every PooledProcess's mailbox (an Akka dispatcher).

A PooledProcess has no thread. When its mailbox goes from empty to non-empty it is put on the
pool's run queue once; a worker thread takes it, runs one turn of its mailbox, and either lets
it go idle (mailbox empty) or puts it back at the tail (more to do).

Decisions worth knowing before reading the code:
- One FIFO run queue shared by all workers, not a queue per worker: one queue makes fairness
  easy to reason about. But a process scheduled while a worker is parked is handed to the
  worker that parked last (a LIFO stack of idle workers), not to whichever thread the queue
  wakes: in an ask ping-pong that is the thread that just served the process, still warm,
  as a Process's own thread would be.
- A process is on the run queue at most once. Its mailbox holds a "scheduled" flag (a
  non-blocking Lock: `acquire(False)` is an atomic test-and-set) that the sender who finds it
  free takes before queueing the process; the worker gives it back when the mailbox is empty,
  then looks again, so a message put in between is never stranded.
- A turn runs at most `throughput` messages (default 5, Akka's). After that the process goes
  to the tail if anyone else is waiting; if the run queue is empty it keeps the thread, since
  yielding to nobody only costs a hand-off. So an always-busy process gets one turn in turn
  with the others and cannot starve them.
- A handler that blocks holds its worker thread; threads cannot be pre-empted. A watchdog
  thread looks every `tick` seconds: when every worker has been on the same batch of messages
  for `grow_after` seconds and others wait, it adds a thread (up to `max_size`) and logs once,
  per saturation, which processes hold the threads. Threads added this way leave again after
  `idle_timeout` seconds without work, down to `size`.
- A batch that runs longer than `block_warning` seconds is named in one warning with its class
  and the stack it is blocked in, once per batch: a block is identified by (worker, batch
  number), and a worker's batch number moves on with every `throughput` messages.
- `stop_pool()` (a node's stop calls it) lets the workers finish the queue and exit, and joins
  them. The pool starts again by itself on the next message, so stopping it is always safe.
- Workers and the watchdog are daemon threads, as Process threads are: a handler stuck forever
  must not keep the interpreter alive at exit.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any

from supervisors.process import _REGISTRY

log = logging.getLogger("supervisors.pool")

_STOP: Any = object()


@dataclass(frozen=True)
class PoolSettings:
    """How the shared pool is sized and watched. Set with `configure_pool()` before start."""

    size: int = max(8, os.cpu_count() or 1)  # Akka: parallelism-min 8, factor 1.0 x cores
    max_size: int = 256  # threads are for blocking handlers here, not for CPU parallelism
    grow_after: float = 0.25  # seconds every thread must be busy (with others waiting)
    block_warning: float = 1.0  # seconds one batch of messages may take before a warning
    idle_timeout: float = 30.0  # seconds an added thread waits for work before it leaves
    tick: float = 0.05  # seconds between watchdog looks


def check_positive(name: str, value: Any, *, integer: bool) -> None:
    """Raise a ValueError naming `name` unless `value` is a positive int (or number)."""
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value <= 0:
        expected = "a positive integer" if integer else "a positive number of seconds"
        raise ValueError(f"{name} must be {expected}; got {value!r}")


class _Slot:
    """What one worker is doing: which process, since when, and which batch it is on."""

    __slots__ = ("batch", "handoff", "park", "proc", "since", "thread", "warned")

    def __init__(self) -> None:
        self.park = threading.Lock()  # held while the worker has nothing handed to it
        self.park.acquire()
        self.handoff: Any = None
        self.proc: Any = None
        self.since = 0.0
        self.batch = 0
        self.warned = -1
        self.thread: threading.Thread | None = None


class Pool:
    """The worker threads and the run queue. There is one per interpreter: `the_pool()`."""

    def __init__(self, settings: PoolSettings) -> None:
        self.settings = settings
        self._runq: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._idle: list[_Slot] = []  # parked workers, the last parked on top
        self._lock = threading.Lock()
        self._slots: list[_Slot] = []
        self._running = False
        self._stopping = False
        self._watchdog: threading.Thread | None = None
        self._wake = threading.Event()
        self._saturated_logged = False
        self._names = itertools.count(1)

    # ------------------------------------------------------------------ scheduling

    def submit(self, proc: Any) -> None:
        """Queue a process for a turn. The caller holds the process's scheduled flag."""
        try:
            slot = self._idle.pop()
        except IndexError:
            self._runq.put(proc)
            if not self._running:
                self.start()
            return
        slot.handoff = proc
        slot.park.release()

    def others_waiting(self) -> bool:
        return not self._runq.empty()

    @property
    def running(self) -> bool:
        return self._running

    @property
    def threads(self) -> int:
        """How many worker threads there are now."""
        return len(self._slots)

    # ------------------------------------------------------------------ life cycle

    def start(self) -> None:
        with self._lock:
            if self._running:
                return
            self._running = True
            self._stopping = False
            self._saturated_logged = False
            self._wake.clear()
            for _ in range(self.settings.size):
                self._add_worker(extra=False)
            self._watchdog = threading.Thread(
                target=self._watch, name="supervisors-pool-watchdog", daemon=True
            )
            self._watchdog.start()

    def stop(self, timeout: float = 5.0) -> bool:
        """Let the workers finish what is queued, then end them. True if all ended in time."""
        with self._lock:
            if not self._running:
                return True
            self._stopping = True
            slots = list(self._slots)
            for _ in slots:
                self._runq.put(_STOP)
            while self._idle:  # parked ones get theirs directly; their queued token is spare
                parked = self._idle.pop()
                parked.handoff = _STOP
                parked.park.release()
            self._wake.set()
            watchdog = self._watchdog
        deadline = time.monotonic() + timeout
        clean = True
        for slot in slots:
            thread = slot.thread
            if thread is not None and thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))
                clean = clean and not thread.is_alive()
        if watchdog is not None and watchdog is not threading.current_thread():
            watchdog.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            self._slots = []
            self._running = False
            self._stopping = False
            leftover = self._drain_stops()
        if leftover:
            # A process queued after the workers took their stop token: run it on a new pool.
            self.start()
        if not clean:
            log.warning("supervisors pool: some worker threads were still busy after %ss", timeout)
        return clean

    def _drain_stops(self) -> bool:
        """Drop unused stop tokens; True if real work is still queued."""
        kept = []
        while True:
            try:
                item = self._runq.get_nowait()
            except queue.Empty:
                break
            if item is not _STOP:
                kept.append(item)
        for item in kept:
            self._runq.put(item)
        return bool(kept)

    def _add_worker(self, *, extra: bool) -> None:
        slot = _Slot()
        thread = threading.Thread(
            target=self._work,
            args=(slot, extra),
            name=f"supervisors-pool-{next(self._names)}",
            daemon=True,
        )
        slot.thread = thread
        self._slots.append(slot)
        thread.start()

    # ------------------------------------------------------------------ workers

    def _work(self, slot: _Slot, extra: bool) -> None:
        while True:
            proc = self._next(slot, extra)
            if proc is _STOP:
                return
            slot.since = time.monotonic()
            slot.proc = proc
            try:
                proc._sv_turn(self, slot)
            except BaseException:  # a bug in the turn itself; never lose the worker to it
                log.exception("supervisors pool: turn of %s failed", proc)
            slot.proc = None

    def _next(self, slot: _Slot, extra: bool) -> Any:
        """The next process to run (or _STOP): from the queue, else park until handed one."""
        runq, idle = self._runq, self._idle
        while True:
            try:
                return runq.get_nowait()
            except queue.Empty:
                pass
            slot.handoff = None
            idle.append(slot)
            # A submit that found no parked worker may have queued work since we looked.
            if not runq.empty() and self._unpark(slot):
                continue
            timeout = self.settings.idle_timeout if extra else -1
            if not slot.park.acquire(timeout=timeout):
                if self._unpark(slot):
                    with self._lock:
                        if not self._stopping and slot in self._slots:
                            self._slots.remove(slot)
                            return _STOP  # an added thread, idle too long: leave
                    continue
                slot.park.acquire()  # a submit took us off the stack: its handoff follows
            return slot.handoff

    def _unpark(self, slot: _Slot) -> bool:
        """Take `slot` off the idle stack; False if a submit already took it (and will hand
        it a process)."""
        try:
            self._idle.remove(slot)
        except ValueError:
            return False
        return True

    # ------------------------------------------------------------------ watchdog

    def _watch(self) -> None:
        settings = self.settings
        while not self._wake.wait(settings.tick):
            now = time.monotonic()
            slots = list(self._slots)
            busy = []
            for slot in slots:
                proc = slot.proc
                if proc is None:
                    continue
                held = now - slot.since
                busy.append((slot, proc, held))
                if held >= settings.block_warning and slot.warned != slot.batch:
                    slot.warned = slot.batch
                    self._warn_blocked(slot, proc, held)
            if len(busy) < len(slots) or not slots:
                self._saturated_logged = False
                continue
            if not self.others_waiting():
                continue
            if min(held for _, _, held in busy) < settings.grow_after:
                continue
            self._grow(busy)

    def _grow(self, busy: list[tuple[_Slot, Any, float]]) -> None:
        full = len(self._slots) >= self.settings.max_size
        if not self._saturated_logged:  # logged before the thread is added, as decided
            self._saturated_logged = True
            self._log_saturation(busy, full)
        if not full:
            with self._lock:
                if not self._stopping and len(self._slots) < self.settings.max_size:
                    self._add_worker(extra=True)

    def _log_saturation(self, busy: list[tuple[_Slot, Any, float]], full: bool) -> None:
        holders = ", ".join(f"{proc} ({held:.2f}s)" for _, proc, held in busy)
        if full:
            log.warning(
                "supervisors pool: all %d threads busy (max_size reached) and others wait; "
                "held by: %s",
                len(busy),
                holders,
            )
        else:
            log.warning(
                "supervisors pool: all %d threads busy for over %ss and others wait; adding "
                "threads (up to %d); held by: %s",
                len(busy),
                self.settings.grow_after,
                self.settings.max_size,
                holders,
            )

    def _warn_blocked(self, slot: _Slot, proc: Any, held: float) -> None:
        thread = slot.thread
        ident = thread.ident if thread is not None else None
        frame = sys._current_frames().get(ident) if ident is not None else None
        stack = "".join(traceback.format_stack(frame)) if frame is not None else "(unknown)\n"
        log.warning(
            "%s (class %s.%s) has blocked pool thread %s for %.2fs in one handler; use Process "
            "for handlers that block for long. It is blocked in:\n%s",
            proc,
            type(proc).__module__,
            type(proc).__qualname__,
            thread.name if thread is not None else "?",
            held,
            stack.rstrip(),
        )


_settings = PoolSettings()
_pool: Pool | None = None
_pool_lock = threading.Lock()


def the_pool() -> Pool:
    """The interpreter's pool, made on first use with the current settings."""
    global _pool
    pool = _pool
    if pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = Pool(_settings)
            pool = _pool
    return pool


def configure_pool(
    size: int | None = None,
    *,
    max_size: int | None = None,
    grow_after: float | None = None,
    block_warning: float | None = None,
    idle_timeout: float | None = None,
) -> PoolSettings:
    """Size the shared pool before it starts (it starts with the first PooledProcess).

    Raises ValueError for a size, max_size or time of 0 or less, and RuntimeError if the pool
    is running (call `stop_pool()` first). Returns the settings now in force.
    """
    global _settings
    changes: dict[str, Any] = {}
    for name, value, integer in (
        ("size", size, True),
        ("max_size", max_size, True),
        ("grow_after", grow_after, False),
        ("block_warning", block_warning, False),
        ("idle_timeout", idle_timeout, False),
    ):
        if value is not None:
            check_positive(f"pool {name}", value, integer=integer)
            changes[name] = value
    settings = PoolSettings(**{**_settings.__dict__, **changes})
    if settings.max_size < settings.size:
        if max_size is not None:
            raise ValueError(
                f"pool max_size ({settings.max_size}) must be at least size ({settings.size})"
            )
        settings = PoolSettings(**{**settings.__dict__, "max_size": settings.size})
    with _pool_lock:
        if _pool is not None and _pool.running:
            raise RuntimeError(
                "the supervisors pool is already running; call supervisors.stop_pool() "
                "before configure_pool()"
            )
        _settings = settings
        if _pool is not None:
            _pool.settings = settings
    return settings


def pool_settings() -> PoolSettings:
    """The settings the pool starts (or started) with."""
    return _settings


def stop_pool(timeout: float = 5.0, *, if_unused: bool = False) -> bool:
    """Stop the pool's threads after the queued turns (a node does this when it stops).

    The pool starts again by itself when a PooledProcess next gets a message. With
    `if_unused`, nothing happens while any PooledProcess is alive (another node in the same
    interpreter may still use the pool). Returns False if a worker was still busy (blocked in
    a handler) after `timeout` seconds.
    """
    pool = _pool
    if pool is None or not pool.running:
        return True
    if if_unused and any(hasattr(proc, "_sv_turn") for proc in list(_REGISTRY.values())):
        return True
    return pool.stop(timeout)
