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


class PooledInbox(Inbox):
    """A PooledProcess's mailbox: Process's Inbox (a priority lane for exit signals, close and
    drain) without blocking reads, and a put that schedules the process on the pool."""

    __slots__ = ("_owner", "_scheduled")
    _wakes_reader = False  # read by the pool with poll(), never blocked in get()

    def __init__(self, owner: PooledProcess) -> None:
        super().__init__()
        # Held while the process is on the run queue or running a turn (see pool.py).
        self._scheduled = threading.Lock()
        self._owner = owner

    def put(self, envelope: Any, /) -> None:
        self._messages.put(envelope)
        if self._closed:
            self._drain()
        elif self._scheduled.acquire(False):
            _pool.the_pool().submit(self._owner)

    def put_signal(self, signal: Any) -> None:
        self._signals.append(signal)
        if not self._closed and self._scheduled.acquire(False):
            _pool.the_pool().submit(self._owner)

    def poll(self) -> Any:
        """The next envelope, signals first, or None if the mailbox is empty."""
        if self._signals:
            return self._signals.popleft()
        if self._messages.empty():
            return None
        return self._messages.get_nowait()

    def get(self) -> Any:
        raise TypeError("a PooledProcess mailbox is read by the pool; it has no blocking get()")


# pykka names actors by a random UUID4 URN. uuid4() per actor costs a system call; a random
# 64-bit prefix per interpreter (a fresh UUID4's first half, version nibble and all) with a
# counter in the last 64 bits is as unique and keeps the same shape.
_urn_prefix = str(uuid.uuid4())[:19]
_urn_counter = iter(range(1, 1 << 63)).__next__


def _new_urn() -> str:
    n = _urn_counter()
    return f"urn:uuid:{_urn_prefix}{0x8000 | (n >> 48) & 0x3FFF:04x}-{n & 0xFFFFFFFFFFFF:012x}"


class PooledProcess(Process):
    """A Process whose mailbox runs on the shared pool; subclass it as you would Process.

    `throughput` (class attribute, default 5) is how many messages one turn may run before the
    process yields its pool thread to others that wait. Prefer Process for a handler that blocks
    for long (sleeps, slow sockets, C calls that hold the GIL): it holds a pool thread meanwhile.
    """

    throughput: ClassVar[int] = 5

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _pool.check_positive(f"{cls.__qualname__}.throughput", cls.throughput, integer=True)

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        # pykka's Actor.__init__, with a PooledInbox, Flags and a cheap URN.
        self.actor_urn = _new_urn()
        self.actor_inbox = PooledInbox(self)  # type: ignore[assignment]
        self.actor_stopped = Flag()  # type: ignore[assignment]
        self._actor_ref = ActorRef(self)
        self._sv_init(Flag(), Flag())
        self._sv_starting = True

    @staticmethod
    def _create_actor_inbox() -> Any:  # type: ignore[override]
        raise TypeError("a PooledProcess makes its mailbox in __init__")

    @classmethod
    def _sv_spawn(cls, args: tuple, kwargs: dict, link_to: Process | None) -> Any:
        _pool.check_positive(f"{cls.__qualname__}.throughput", cls.throughput, integer=True)
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
            # inbox.poll() inlined, and the bound methods looked up once per turn: the loop
            # below runs once per message, and a Python call per message is what a Process's
            # thread, blocked in one C get(), does not pay.
            signals = inbox._signals
            empty = inbox._messages.empty
            get = inbox._messages.get_nowait
            nobody_waits = pool._runq.empty
            while True:
                for _ in range(budget):
                    if signals:
                        envelope = signals.popleft()
                    elif empty():
                        break
                    else:
                        envelope = get()
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
