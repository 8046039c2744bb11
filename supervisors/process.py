"""Process: a pykka ThreadingActor with Erlang's links, monitors, trap_exit and exit signals.

pykka on its own keeps an actor alive after an `ask` raises and has no way for one actor to learn
of another's death. Process replaces pykka's receive loop so that:

- an exception escaping any handler, told or asked, ends the process with that exception as its
  exit reason (the asker gets it too), unless it is a CallerError, which is only a reply;
- links are two-way and carry the exit reason to the other side; monitors are one-way, stack,
  and deliver Down(id, ref, reason), with "noproc" when the target was already gone;
- exit signals jump the mailbox queue (a priority lane), "normal" is ignored unless trapping,
  "kill" cannot be trapped and marks the process dead at once (its thread, if stuck in a
  handler, is abandoned and anything it returns later is discarded);
- `start()` returns only after `on_start()` has finished, and raises what `on_start()` raised,
  as OTP's start_link does.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import sys
import threading
from typing import Any, ClassVar, Self

import pykka
import pykka.messages
from pykka import ActorDeadError, ActorRef

from supervisors import registry, timers
from supervisors.crash_log import log_crash
from supervisors.errors import CallerError
from supervisors.future import LatchFuture
from supervisors.inbox import Inbox
from supervisors.messages import Down, Exit
from supervisors.reasons import KILL, KILLED, NOPROC, NORMAL, Reason, format_reason

# pykka's stop request; private, but ActorRef.stop() sends it and we must recognise it. The
# pinned pykka<5 has it; a stand-in that matches nothing keeps us importable without it.
_ActorStop: type = getattr(pykka.messages, "_ActorStop", type("_ActorStopMissing", (), {}))

log = logging.getLogger("supervisors.process")
# Crashes are logged as pykka logs them, on its logger and in its words, so that log filters
# written for pykka actors ("Unhandled exception in ...") also catch Processes.
pykka_log = logging.getLogger("pykka")
SEND_AFTER_THREAD = timers.THREAD_NAME  # the name of the send_after timer thread

_ALIVE: Any = object()
_local = threading.local()
_monitor_ids = itertools.count(1)
# Every live Process by actor URN, in start order. Links and monitors resolve refs here: a ref
# that is not in this table belongs to a process that has ended (or never was a Process).
# Processes are deliberately not put in pykka's ActorRegistry: it is a list, so each unregister
# scans it, and stopping n children cost O(n^2) (seconds for 10,000).
_REGISTRY: dict[str, Process] = {}


class Ignore(Exception):
    """Raise from `on_start()` to decline to start (OTP's `ignore`); `start()` returns None."""


class _SelfExit(BaseException):
    """Unwinds a handler that called `self.exit(reason)`; BaseException so `except Exception`
    in user code does not swallow it."""

    def __init__(self, reason: Reason) -> None:
        super().__init__(reason)
        self.reason = reason


class _ExitSignal:
    """An exit signal waiting in the priority lane of a process that does not trap exits."""

    __slots__ = ("reason", "sender")

    def __init__(self, sender: ActorRef | None, reason: Reason) -> None:
        self.sender = sender
        self.reason = reason


def current_process() -> Process | None:
    """The Process whose thread is running this code, or None outside any process."""
    return getattr(_local, "process", None)


def _process_of(ref: Any) -> Any:
    """Resolve a ref (or a Process) to the live local Process, or None if it has ended.

    A ref from a higher layer (a process on another node, from monitors.dist) resolves through
    its `_sv_endpoint()`: it returns an object with the same signal methods a Process has
    (`_sv_add_link(ref) -> bool`, `_sv_remove_link(urn)`, `_sv_add_watcher(id, ref) -> bool`,
    `_sv_remove_watcher(id)`, `_sv_link_exit(sender, reason)` and
    `_sv_receive_exit(sender, reason, via_link=)`), or None when that process is known to be
    gone. Such a ref also has `actor_urn` and `tell()`. This keeps layer 1 free of imports
    from above while links and monitors work across nodes.
    """
    if isinstance(ref, Process):
        return ref if ref._sv_reason is _ALIVE else None
    endpoint = getattr(ref, "_sv_endpoint", None)
    if endpoint is not None:
        return endpoint()
    urn = getattr(ref, "actor_urn", None)
    if urn is None:
        raise TypeError(f"expected the ActorRef of a supervisors.Process; got {ref!r}")
    return _REGISTRY.get(urn)


def signal_endpoint(ref: Any) -> Any:
    """What exit signals, links and monitors of `ref` go through: the live local Process, a
    remote ref's endpoint, or None when the process has ended.

    For layers that deliver signals into local processes (the dist layer turns frames from
    other nodes into `_sv_link_exit` / `_sv_receive_exit` calls on what this returns).
    """
    return _process_of(ref)


def exit(ref: Any, reason: Reason) -> None:
    """Send an exit signal to `ref`, as Erlang's exit/2 does.

    "kill" cannot be trapped: the target is dead when this returns, with reason "killed". Other
    reasons jump the target's mailbox queue; a target that traps exits receives Exit(sender,
    reason) as a message instead; "normal" is ignored by a target that does not trap exits.
    Sending to a process that has already ended does nothing.
    """
    target = _process_of(ref)
    if target is None:
        return
    sender = current_process()
    target._sv_receive_exit(
        sender.actor_ref if sender is not None else None, reason, via_link=False
    )


def processes() -> list[ActorRef[Any]]:
    """The refs of every live Process in this interpreter, oldest first (Erlang's processes()).

    Use this rather than pykka.ActorRegistry, which does not list Processes.
    """
    return [proc.actor_ref for proc in list(_REGISTRY.values())]


def exit_reason(ref: Any) -> Reason | None:
    """The reason a local process ended with, or None while it is still running."""
    proc = ref if isinstance(ref, Process) else getattr(ref, "_actor_weakref", lambda: None)()
    if proc is None or not isinstance(proc, Process):
        raise TypeError(f"expected the ActorRef of a supervisors.Process; got {ref!r}")
    return None if proc._sv_reason is _ALIVE else proc._sv_reason


class Process(pykka.ThreadingActor):
    """A supervisable actor. Subclass it as you would `pykka.ThreadingActor`.

    Set `trap_exit = True` (class attribute or in `__init__`/`on_start`) to receive exit
    signals as `Exit` messages in `on_receive` instead of dying from them. A trapping process
    still ends when its parent (the supervisor that started it) sends it an exit signal, and
    `on_stop()` runs, as gen_server does.

    `on_stop()` runs when the process ends by `ref.stop()`, `self.exit()`, or any exit signal
    except "kill". `on_failure()` (pykka's hook) runs when a handler raised.
    """

    trap_exit: bool = False
    actor_inbox: Inbox  # _create_actor_inbox's, which adds signals and closing to pykka's
    # Put in pykka's ActorRegistry at start, as a pykka actor is, so get_by_class, broadcast
    # and stop_all find it (see registry.py). PooledProcess sets it False: a pooled process
    # is meant to cost little, and a hundred thousand of them would fill the registry.
    register_in_actor_registry: ClassVar[bool] = True
    # Threads of killed processes may be stuck in user code forever; they must not keep the
    # interpreter alive at exit.
    use_daemon_thread: ClassVar[bool] = True

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        super().__init__()
        self._sv_init(threading.Event(), threading.Event())

    def _sv_init(self, started: Any, finished: Any) -> None:
        """The supervision state; `started` and `finished` are Event-like (set/is_set/wait)."""
        self._sv_lock = threading.Lock()
        self._sv_reason: Reason = _ALIVE
        self._sv_links: dict[str, ActorRef[Any]] = {}
        self._sv_watchers: dict[int, ActorRef[Any]] = {}
        self._sv_monitoring: dict[int, Any] = {}
        self._sv_current: Any = None
        self._sv_started = started
        self._sv_finished = finished
        self._sv_start_error: BaseException | None = None
        # Made on the first send_after: most processes never set a timer.
        self._sv_timers: set[timers.SendAfterTimer] | None = None
        # The parent is whoever links us at start (start_link, a supervisor); an unlinked
        # start() has none, as an unlinked gen_server is its own parent in OTP.
        self._sv_parent_urn: str | None = None

    @staticmethod
    def _create_actor_inbox() -> Inbox:
        return Inbox()

    @staticmethod
    def _create_future() -> LatchFuture:
        """Every ask's future: a lock for a latch, not a Condition (supervisors/future.py)."""
        return LatchFuture()

    # ----------------------------------------------------------------------------- starting

    @classmethod
    def start(cls, *args: Any, **kwargs: Any) -> ActorRef[Self]:
        """Start the process and wait for `on_start()`.

        Returns the ActorRef, or None if `on_start()` raised `Ignore`. If `on_start()` raised
        anything else, the process has ended and that exception is raised here.
        """
        return cls._sv_spawn(args, kwargs, link_to=None)

    @classmethod
    def start_link(cls, *args: Any, **kwargs: Any) -> ActorRef[Self]:
        """Start the process linked to the calling Process (which must exist).

        The link is in place before `on_start()` runs. If the start fails, the link is removed
        quietly and the caller gets the exception, rather than an exit signal as well.
        """
        caller = current_process()
        if caller is None:
            raise RuntimeError(
                f"{cls.__name__}.start_link() must be called from inside a Process; "
                "use start() from plain threads"
            )
        return cls._sv_spawn(args, kwargs, link_to=caller)

    @classmethod
    def _sv_spawn(cls, args: tuple, kwargs: dict, link_to: Process | None) -> Any:
        obj = cls(*args, **kwargs)
        if getattr(obj, "_sv_started", None) is None:
            raise TypeError(
                f"{cls.__name__}.__init__ did not call super().__init__(); Process needs it"
            )
        # _actor_ref, not the actor_ref property (pykka's, there for typing only): a
        # supervisor's batch runs this once per child.
        urn, ref = obj.actor_urn, obj._actor_ref
        _REGISTRY[urn] = obj
        if cls.register_in_actor_registry:
            pykka.ActorRegistry.register(ref)
        if link_to is not None:
            parent = link_to.actor_urn
            obj._sv_parent_urn = parent
            obj._sv_links[parent] = link_to._actor_ref
            with link_to._sv_lock:
                link_to._sv_links[urn] = ref
        obj._start_actor_loop()
        if cls.on_start is not pykka.Actor.on_start and not obj._sv_started.is_set():
            # Without an on_start of its own there is nothing that could fail or that the caller
            # must wait for; skipping this second thread handshake halves the start cost.
            obj._sv_started.wait()
        error = obj._sv_start_error
        if error is None:
            return ref
        if isinstance(error, Ignore):
            return None
        raise error

    # ------------------------------------------------------------------- links and monitors

    def link(self, ref: Any) -> None:
        """Link to `ref` both ways. Linking to a process that has ended sends us "noproc"."""
        target = _process_of(ref)
        if target is self:
            return
        # Ours first: if the target dies right after accepting the link, its exit signal must
        # find the link on our side.
        with self._sv_lock:
            self._sv_links[ref.actor_urn] = ref
        if target is None or not target._sv_add_link(self.actor_ref):
            with self._sv_lock:
                self._sv_links.pop(ref.actor_urn, None)
            self._sv_receive_exit(ref, NOPROC, via_link=True)

    def unlink(self, ref: Any) -> None:
        """Remove the link to `ref`, both ways. No exit signal from it arrives after this."""
        with self._sv_lock:
            self._sv_links.pop(ref.actor_urn, None)
        target = _process_of(ref)
        if target is not None:
            target._sv_remove_link(self.actor_urn)

    def monitor(self, ref: Any) -> int:
        """Watch `ref`; when it ends we receive Down(id, ref, reason). Returns the id."""
        monitor_id = next(_monitor_ids)
        self._sv_monitoring[monitor_id] = ref
        target = _process_of(ref)
        if target is None or not target._sv_add_watcher(monitor_id, self.actor_ref):
            self._sv_tell_self(Down(monitor_id, ref, NOPROC))
        return monitor_id

    def demonitor(self, monitor_id: int) -> bool:
        """Stop watching; a Down for this id that is already queued is dropped too."""
        ref = self._sv_monitoring.pop(monitor_id, None)
        if ref is None:
            return False
        target = _process_of(ref)
        if target is not None:
            target._sv_remove_watcher(monitor_id)
        return True

    def exit(self, reason: Reason = NORMAL) -> None:
        """End this process with `reason`.

        From inside a handler this is Erlang's exit/1: the handler unwinds at once, `on_stop()`
        runs and `reason` is the exit reason, even "kill", which links then carry as an
        ordinary, trappable signal. From another thread it is exit(self(), reason): an exit
        signal the process sends itself, so even "normal" ends it and "kill" kills it.
        """
        if current_process() is self:
            raise _SelfExit(reason)
        self._sv_receive_exit(self.actor_ref, reason, via_link=False)

    def send_after(self, seconds: float, message: Any) -> timers.SendAfterTimer:
        """Tell this process `message` after `seconds` (Erlang's erlang:send_after/3).

        Returns the timer; call it off with `cancel_timer(timer)`. Every timer still pending
        is cancelled when the process ends, however it ends, so no timer outlives its owner.
        """
        # One timer thread per OS process serves every process's timers (supervisors/timers.py).
        with self._sv_lock:
            if self._sv_reason is not _ALIVE:
                return timers.SendAfterTimer.ended()  # never armed: the process has ended
            if self._sv_timers is None:
                self._sv_timers = set()
            timer = timers.start_timer(float(seconds), self._sv_timer_fired, (message,))
            self._sv_timers.add(timer)
        return timer

    def cancel_timer(self, timer: timers.SendAfterTimer) -> None:
        """Call off a timer from `send_after` (Erlang's erlang:cancel_timer/1)."""
        timer.cancel()
        with self._sv_lock:
            if self._sv_timers is not None:
                self._sv_timers.discard(timer)

    def _sv_timer_fired(self, timer: timers.SendAfterTimer, message: Any) -> None:
        with self._sv_lock:
            if self._sv_timers is not None:
                self._sv_timers.discard(timer)
        self._sv_tell_self(message)

    def on_kill(self) -> None:
        """Runs in the killer's thread right after this process was killed ("kill" signal).

        The process's own thread may be stuck, so `on_stop()` does not run; use this for the
        quick, thread-safe cleanup that must happen anyway (OsProcess kills its OS process
        group here). Default: nothing.
        """

    @property
    def links(self) -> list[ActorRef[Any]]:
        """The refs this process is linked to now."""
        with self._sv_lock:
            return list(self._sv_links.values())

    # ------------------------------------------------------------ signal delivery internals

    def _sv_add_link(self, ref: ActorRef[Any]) -> bool:
        with self._sv_lock:
            if self._sv_reason is not _ALIVE:
                return False
            self._sv_links[ref.actor_urn] = ref
            return True

    def _sv_remove_link(self, urn: str) -> None:
        with self._sv_lock:
            self._sv_links.pop(urn, None)

    def _sv_add_watcher(self, monitor_id: int, watcher: ActorRef[Any]) -> bool:
        with self._sv_lock:
            if self._sv_reason is not _ALIVE:
                return False
            self._sv_watchers[monitor_id] = watcher
            return True

    def _sv_remove_watcher(self, monitor_id: int) -> None:
        with self._sv_lock:
            self._sv_watchers.pop(monitor_id, None)

    def _sv_link_exit(self, sender: ActorRef[Any], reason: Reason) -> None:
        """A linked process ended. Dropped if we unlinked it in the meantime."""
        with self._sv_lock:
            if self._sv_reason is not _ALIVE or self._sv_links.pop(sender.actor_urn, None) is None:
                return
        self._sv_receive_exit(sender, reason, via_link=True)

    def _sv_receive_exit(
        self, sender: ActorRef[Any] | None, reason: Reason, *, via_link: bool
    ) -> None:
        """Apply Erlang's rules to an incoming exit signal. Runs in the sender's thread."""
        if self._sv_reason is not _ALIVE:
            return
        if reason == KILL and not via_link:
            if self._sv_terminate(KILLED):
                try:
                    self.on_kill()
                except Exception:
                    log.exception("%s: on_kill raised", self)
            return
        if self.trap_exit:
            self._sv_tell_self(Exit(sender, reason))
            return
        if reason == NORMAL and (sender is None or sender.actor_urn != self.actor_urn):
            return
        self.actor_inbox.put_signal(_ExitSignal(sender, reason))

    def _sv_tell_self(self, message: Any) -> None:
        with contextlib.suppress(ActorDeadError):
            self.actor_ref.tell(message)

    # ------------------------------------------------------------------------- the loop

    def _actor_loop(self) -> None:
        _local.process = self
        if self._sv_begin():
            inbox = self.actor_inbox
            while self._sv_handle(inbox.get()):
                pass

    def _sv_begin(self) -> bool:
        """Run `on_start()` in the process's context; False if the process did not start."""
        try:
            self.on_start()
        except _SelfExit as exc:
            self._sv_start_failed(
                Ignore() if exc.reason == NORMAL else _StartExit(exc.reason), exc.reason
            )
            return False
        except Ignore as exc:
            self._sv_start_failed(exc, NORMAL)
            return False
        except BaseException as exc:
            self._sv_start_failed(exc, exc)
            return False
        self._sv_started.set()
        return True

    def _sv_start_failed(self, error: BaseException, reason: Reason) -> None:
        self._sv_start_error = error
        # The starter learns of the failure from the exception; it gets no exit signal too.
        with self._sv_lock:
            links = list(self._sv_links)
            self._sv_links.clear()
        for urn in links:
            other = _REGISTRY.get(urn)
            if other is not None:
                other._sv_remove_link(self.actor_urn)
        self._sv_terminate(reason)
        self._sv_started.set()

    def _sv_handle(self, envelope: Any) -> bool:
        """Handle one envelope from the mailbox; False once the process has ended."""
        if self._sv_reason is not _ALIVE:
            return False
        if type(envelope) is _ExitSignal:
            if not self.trap_exit:
                self._sv_finish(envelope.reason)
                return False
            # Started trapping after the signal was queued: hand it over as a message.
            message, reply_to = Exit(envelope.sender, envelope.reason), None
        else:
            message, reply_to = envelope.message, envelope.reply_to
        if isinstance(message, _ActorStop):
            self._sv_finish(NORMAL)
            if reply_to is not None:
                reply_to.set(None)
            return False
        if reply_to is not None:
            with self._sv_lock:
                if self._sv_reason is not _ALIVE:
                    return False
                self._sv_current = envelope
        try:
            result = self._sv_dispatch(message)
        except _SelfExit as exc:
            self._sv_fail_reply(
                envelope, reply_to, f"exited with reason {format_reason(exc.reason)}"
            )
            self._sv_finish(exc.reason)
            return False
        except CallerError:
            if reply_to is not None:
                pykka_log.info("Exception returned from %s to caller:", self, exc_info=True)
                self._sv_reply(envelope, reply_to, None, sys.exc_info())
            else:
                log.warning(
                    "%s: error from a told message, nobody to reply to", self, exc_info=True
                )
            return True
        except BaseException as exc:
            exc_info = sys.exc_info()
            if reply_to is not None:
                self._sv_reply(envelope, reply_to, None, exc_info)
            self._sv_crash(exc, exc_info)
            return False
        if reply_to is not None:
            self._sv_reply(envelope, reply_to, result, None)
        return True

    def _sv_dispatch(self, message: Any) -> Any:
        if type(message) is Down and self._sv_monitoring.pop(message.monitor_id, None) is None:
            return None  # demonitored after the Down was queued: flushed, as demonitor(flush)
        if (
            type(message) is Exit
            and self.trap_exit
            and message.sender is not None
            and message.sender.actor_urn == self._sv_parent_urn
        ):
            raise _SelfExit(message.reason)
        return self._handle_receive(message)

    def _sv_reply(self, envelope: Any, reply_to: Any, result: Any, exc_info: Any) -> None:
        with self._sv_lock:
            mine = self._sv_current is envelope
            self._sv_current = None
        if not mine:
            return  # killed meanwhile: the asker was already told the process is dead
        if exc_info is None:
            reply_to.set(result)
        else:
            reply_to.set_exception(exc_info=exc_info)

    def _sv_fail_reply(self, envelope: Any, reply_to: Any, why: str) -> None:
        if reply_to is not None:
            error = ActorDeadError(f"{self} {why} before replying")
            self._sv_reply(envelope, reply_to, None, (ActorDeadError, error, None))

    def _sv_finish(self, reason: Reason) -> None:
        """End by stop, self.exit or an exit signal: on_stop first, then the exit."""
        try:
            self.on_stop()
        except Exception:
            pykka_log.exception("Unhandled exception in %s:", self)
        self._sv_terminate(reason)

    def _sv_crash(self, exc: BaseException, exc_info: Any) -> None:
        # Under a parent (a supervisor, which reports the crash): the traceback once per site.
        log_crash(pykka_log, self, exc_info, supervised=self._sv_parent_urn is not None)
        try:
            self.on_failure(*exc_info)
        except Exception:
            pykka_log.exception("Unhandled exception in %s:", self)
        self._sv_terminate(exc)

    def _sv_terminate(self, reason: Reason) -> bool:
        """Mark the process dead and fire its links and monitors. Any thread; runs once."""
        with self._sv_lock:
            if self._sv_reason is not _ALIVE:
                return False
            self._sv_reason = reason
            # copied and cleared only when not empty: most processes end with no monitor,
            # and a supervised child stopped by its supervisor with no link left either
            links: tuple[ActorRef[Any], ...] = ()
            watchers: tuple[tuple[int, ActorRef[Any]], ...] = ()
            monitoring: tuple[tuple[int, Any], ...] = ()
            if self._sv_links:
                links = tuple(self._sv_links.values())
                self._sv_links.clear()
            if self._sv_watchers:
                watchers = tuple(self._sv_watchers.items())
                self._sv_watchers.clear()
            if self._sv_monitoring:
                monitoring = tuple(self._sv_monitoring.items())
                self._sv_monitoring.clear()
            current = self._sv_current
            self._sv_current = None
            timers, self._sv_timers = self._sv_timers, None
        for timer in timers or ():
            timer.cancel()
        self.actor_stopped.set()
        _REGISTRY.pop(self.actor_urn, None)
        registry.leave(self.actor_ref)
        self.actor_inbox.close(self._sv_refuse)
        if current is not None and current.reply_to is not None:
            current.reply_to.set_exception(
                exc_info=(
                    ActorDeadError,
                    ActorDeadError(f"{self} was killed while handling it"),
                    None,
                )
            )
        if not self._sv_started.is_set() and self._sv_start_error is None:
            # Killed during on_start. A failed on_start has set its own error already, and
            # start() must raise that, not this.
            self._sv_start_error = ActorDeadError(
                f"{self} ended during on_start: {format_reason(reason)}"
            )
            self._sv_started.set()
        me = self.actor_ref
        for ref in links:
            other = _process_of(ref)
            if other is not None:
                other._sv_link_exit(me, reason)
        for monitor_id, watcher in watchers:
            with contextlib.suppress(ActorDeadError):
                watcher.tell(Down(monitor_id, me, reason))
        for monitor_id, target_ref in monitoring:
            target = _process_of(target_ref)
            if target is not None:
                target._sv_remove_watcher(monitor_id)
        self._sv_finished.set()
        return True

    def _sv_refuse(self, envelope: Any) -> None:
        reply_to = getattr(envelope, "reply_to", None)
        if reply_to is None:
            return
        if isinstance(envelope.message, _ActorStop):
            reply_to.set(None)
        else:
            error = ActorDeadError(
                f"{self} ended ({format_reason(self._sv_reason)}) before handling it"
            )
            reply_to.set_exception(exc_info=(ActorDeadError, error, None))

    def _sv_wait_finished(self, timeout: float | None) -> bool:
        return self._sv_finished.wait(timeout)


class _StartExit(Exception):
    """on_start called self.exit(reason) with a reason other than normal."""

    def __init__(self, reason: Reason) -> None:
        super().__init__(f"exited during on_start: {format_reason(reason)}")
        self.reason = reason
