"""PooledProcess: a Process without a thread of its own, run on the shared pool (pool.py).

Everything a Process does (links, monitors, trap_exit, exit signals, kill, ask/tell/proxy
through pykka's ActorRef and Future, on_start/on_stop/on_failure, supervision) is Process's own
code: a PooledProcess differs only in where its mailbox is read. A Process's thread blocks in
`inbox.get()`; a PooledProcess's mailbox (`PooledInbox`) puts the process on the pool's run
queue when a message arrives, and a pool thread runs `_sv_turn`.

It is also small: no thread, and the three flags pykka and Process keep (stopped, started,
finished) are `Flag`s, which make a threading.Event only when somebody waits on one.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import deque
from typing import Any, ClassVar

import pykka
from pykka import ActorRef

from supervisors import pool as _pool
from supervisors.inbox import Inbox
from supervisors.process import Process, _local


class Flag:
    """threading.Event's set/is_set/wait/clear in 56 bytes until somebody waits.

    The Event is made (under one module lock) by the first `wait()`; `set()` flips the bool
    first and then sets the Event if there is one, and `wait()` looks at the bool again after
    publishing its Event, so a `set()` racing a first `wait()` is never missed.
    """

    __slots__ = ("_event", "_flag")

    def __init__(self) -> None:
        self._flag = False
        self._event: threading.Event | None = None

    def is_set(self) -> bool:
        return self._flag

    isSet = is_set  # threading.Event's old alias, for code that still uses it

    def set(self) -> None:
        self._flag = True
        event = self._event
        if event is not None:
            event.set()

    def clear(self) -> None:
        self._flag = False
        event = self._event
        if event is not None:
            event.clear()

    def wait(self, timeout: float | None = None) -> bool:
        if self._flag:
            return True
        event = self._event
        if event is None:
            with _flag_lock:
                event = self._event
                if event is None:
                    event = self._event = threading.Event()
            if self._flag:
                event.set()
        return event.wait(timeout)


_flag_lock = threading.Lock()
_lane_lock = threading.Lock()  # makes a mailbox's signal lane once


class PooledInbox(Inbox):
    """A PooledProcess's mailbox: Process's Inbox (a priority lane for exit signals, close and
    drain) without blocking reads, and a put that schedules the process on the pool.

    Nobody blocks reading it, so messages go in a deque rather than a SimpleQueue (a C append
    and a truth test instead of calls with argument parsing), and the signal lane is a list
    made by the first signal: most processes get one only to end, and an idle deque for it was
    760 bytes and one more object for the garbage collector to trace, times 100,000 children.
    A list is cheap to make and signals are few, so pop(0) on it costs nothing that matters.
    """

    __slots__ = ("_owner", "_scheduled")
    _wakes_reader = False  # read by the pool with poll(), never blocked in get()

    def __init__(self, owner: PooledProcess) -> None:  # not Inbox's: other lanes
        self._messages: deque[Any] = deque()  # type: ignore[assignment]
        self._signals: list[Any] | None = None  # type: ignore[assignment]
        self._closed = False
        self._on_drain = None
        # Held while the process is on the run queue or running a turn (see pool.py).
        self._scheduled = threading.Lock()
        self._owner = owner

    def put(self, envelope: Any, /) -> None:
        self._messages.append(envelope)
        if self._closed:
            self._drain()
        elif self._scheduled.acquire(False):
            _pool.the_pool().submit(self._owner)

    def put_signal(self, signal: Any) -> None:
        signals = self._signals
        if signals is None:  # the first signal: two racing senders must share one lane
            with _lane_lock:
                signals = self._signals
                if signals is None:
                    signals = self._signals = []
        signals.append(signal)
        if not self._closed and self._scheduled.acquire(False):
            _pool.the_pool().submit(self._owner)

    def poll(self) -> Any:
        """The next envelope, signals first, or None if the mailbox is empty."""
        signals = self._signals
        if signals:
            return signals.pop(0)
        if self._messages:
            return self._messages.popleft()
        return None

    def empty(self) -> bool:
        return not self._signals and not self._messages

    def _drain(self) -> None:
        on_drain = self._on_drain
        if self._signals is not None:
            self._signals.clear()
        messages = self._messages
        while True:
            try:
                item = messages.popleft()
            except IndexError:
                break
            if on_drain is not None:
                on_drain(item)

    def get(self) -> Any:
        raise TypeError("a PooledProcess mailbox is read by the pool; it has no blocking get()")


# pykka names actors by a random UUID4 URN. uuid4() per actor costs a system call; a random
# 64-bit prefix per interpreter (a fresh UUID4's first half, version nibble and all) with a
# counter in the last 64 bits is as unique and keeps the same shape.
_urn_prefix = str(uuid.uuid4())[:19]
_urn_counter = iter(range(1, 1 << 63)).__next__
_urn_head = f"urn:uuid:{_urn_prefix}8000-"  # the variant group of every n below 2**48


def _new_urn() -> str:
    n = _urn_counter()
    if n < 1 << 48:  # one format instead of three, for the first 2**48 processes
        return f"{_urn_head}{n:012x}"
    return f"urn:uuid:{_urn_prefix}{0x8000 | (n >> 48) & 0x3FFF:04x}-{n & 0xFFFFFFFFFFFF:012x}"


class PooledProcess(Process):
    """A Process whose mailbox runs on the shared pool; subclass it as you would Process.

    `throughput` (class attribute, default 5) is how many messages one turn may run before the
    process yields its pool thread to others that wait. Prefer Process for a handler that blocks
    for long (sleeps, slow sockets, C calls that hold the GIL): it holds a pool thread meanwhile.
    """

    throughput: ClassVar[int] = 5
    # Not in pykka's ActorRegistry unless a subclass says True: registering costs a lock and a
    # table entry per process, which is what a pooled process is meant to save.
    register_in_actor_registry: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _pool.check_positive(f"{cls.__qualname__}.throughput", cls.throughput, integer=True)

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        # pykka's Actor.__init__, with a PooledInbox, Flags and a cheap URN.
        self.actor_urn = _new_urn()
        self.actor_inbox = PooledInbox(self)
        self.actor_stopped = Flag()  # type: ignore[assignment]
        self._actor_ref = ActorRef(self)
        self._sv_init(Flag(), Flag())
        self._sv_starting = True

    @staticmethod
    def _create_actor_inbox() -> Any:
        raise TypeError("a PooledProcess makes its mailbox in __init__")

    @classmethod
    def _sv_spawn(cls, args: tuple, kwargs: dict, link_to: Process | None) -> Any:
        throughput = cls.throughput
        if type(throughput) is not int or throughput <= 0:  # the check, when it can fail
            _pool.check_positive(f"{cls.__qualname__}.throughput", throughput, integer=True)
        return super()._sv_spawn(args, kwargs, link_to)

    def _start_actor_loop(self) -> None:
        """Schedule the first turn (on_start), or nothing if the class has no on_start."""
        inbox = self.actor_inbox
        if type(self).on_start is pykka.Actor.on_start:
            self._sv_starting = False
            self._sv_started.set()
            return  # idle until the first message schedules it
        inbox._scheduled.acquire()  # type: ignore[attr-defined]
        _pool.the_pool().submit(self)

    def _sv_turn(self, pool: _pool.Pool, slot: Any) -> None:
        """Run on a pool thread: on_start if due, then up to `throughput` messages per batch."""
        _local.process = self
        try:
            if self._sv_starting:
                self._sv_starting = False
                if not self._sv_begin():
                    return  # ended: the scheduled flag stays taken, the mailbox is closed
            inbox: PooledInbox = self.actor_inbox  # type: ignore[assignment]
            budget = self.throughput
            handle = self._sv_handle
            # inbox.poll() inlined: the loop below runs once per message, and a Python call
            # per message is what a Process's thread, blocked in one C get(), does not pay.
            messages = inbox._messages
            next_message = messages.popleft
            nobody_waits = pool._runq.empty
            while True:
                for _ in range(budget):
                    try:
                        signals = inbox._signals  # made by the first signal, maybe just now
                        if signals:
                            envelope = signals.pop(0)
                        elif messages:
                            envelope = next_message()
                        else:
                            break
                    except IndexError:  # drained meanwhile by a kill in another thread
                        break
                    if not handle(envelope):
                        return
                else:
                    if not nobody_waits():
                        pool.submit(self)  # to the tail, still holding the flag
                        return
                    slot.batch += 1  # a new batch for the blocked-handler watchdog
                    slot.since = time.monotonic()
                    continue
                inbox._scheduled.release()
                # A put between our last poll and the release saw the flag taken and left the
                # scheduling to us: look again.
                if inbox.empty() or not inbox._scheduled.acquire(False):
                    return
        finally:
            _local.process = None
            slot.batch += 1
