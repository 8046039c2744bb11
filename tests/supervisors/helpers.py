"""Shared helpers for the supervisor_SUITE port and the Process tests.

Nothing here sleeps to wait for an effect: waits poll a predicate (or wait on a Condition) with a
deadline, and the deadline only proves that nothing hung.

- `wait_until` / `wait_dead`: poll with a deadline.
- `Recorder`: a thread-safe log of (name, event) pairs that workers write to across restarts.
- `Control`: shared knobs that make a Worker's `on_start` fail, ignore, or wait for a permit, so a
  test decides exactly when each (re)start attempt ends.
- `Worker`: a Process that does what it is told ("stop", "die", ("exit", reason), ("block", ...)).
- `Probe`: the test's own process. It traps exits, records every Exit and Down it receives, can
  run any callable in its own thread (so the test can link, monitor or start_link from inside a
  process), and is the parent of supervisors it starts, as the test case process is in OTP.
- `Sup`: a blocking client for a supervisor's API.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from pykka import ActorRef

from supervisors import (
    ChildSpec,
    Down,
    Exit,
    Ignore,
    Process,
    Supervisor,
    SupFlags,
    exit,
    exit_reason,
)
from supervisors.pool import the_pool
from tests.waiting import wait_until

TIMEOUT = 10.0  # seconds; only ever reached when something hung
BLOCK_LIMIT = 30.0  # a blocked handler gives up after this, so no thread lives forever


def wait_dead(ref: ActorRef[Any], timeout: float = TIMEOUT) -> Any:
    """Wait until the process has ended; return its exit reason.

    The reason is set before the process's links and monitors fire: to know that a linked
    process (a supervisor) has its Exit, wait for a Down instead (`Probe.terminate`)."""
    wait_until(lambda: exit_reason(ref) is not None, f"{ref} to end", timeout)
    return exit_reason(ref)


def reports(caplog: Any, event: str | None = None) -> list[dict[str, Any]]:
    """The supervisor reports captured so far (optionally of one event), oldest first."""
    found = [r.report for r in caplog.records if hasattr(r, "report")]
    return [r for r in found if event is None or r["event"] == event]


class Died(Exception):
    """The exception a Worker raises on "die": OTP's `died` reason in supervisor_1."""


class StartFailed(Exception):
    """What a Worker's on_start raises when its Control says fail."""


class Big:
    """A start argument the supervisor may or may not keep (weakref-able)."""


# ------------------------------------------------------------------------------ recorder


class Recorder:
    """A thread-safe list of (name, event) pairs, shared by workers across restarts."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._items: list[tuple[Any, Any]] = []

    def add(self, name: Any, event: Any) -> None:
        with self._cond:
            self._items.append((name, event))
            self._cond.notify_all()

    def items(self) -> list[tuple[Any, Any]]:
        with self._cond:
            return list(self._items)

    def names(self, event: Any) -> list[Any]:
        """The names that recorded `event`, in order."""
        return [name for name, ev in self.items() if ev == event]

    def events(self, name: Any) -> list[Any]:
        """What `name` recorded, in order."""
        return [ev for n, ev in self.items() if n == name]

    def count(self, name: Any, event: Any) -> int:
        return sum(1 for n, ev in self.items() if n == name and ev == event)

    def wait_for(self, predicate: Callable[[], Any], what: str, timeout: float = TIMEOUT) -> None:
        """Wait until `predicate()` (which may read this recorder) is true."""
        with self._cond:  # an RLock: the predicate's own reads re-enter it
            if not self._cond.wait_for(predicate, timeout):
                raise AssertionError(
                    f"timed out after {timeout} s waiting for {what}: {self._items}"
                )


# ------------------------------------------------------------------------------- control


class Control:
    """Knobs shared by every start attempt of a Worker (its restarts take the same Control).

    - `fail`: every attempt raises StartFailed; `fail_times`: the next n attempts do.
    - `ignore`: every attempt raises Ignore (OTP's `ignore` from init).
    - `hold`: every attempt announces itself (`waiting`) and waits for `release()` before it
      decides to fail or not. A supervisor starts children synchronously, so while an attempt
      is held the supervisor is blocked, and the test decides what is in its mailbox first.
    """

    def __init__(self, *, fail: bool = False, fail_times: int = 0, ignore: bool = False) -> None:
        self._cond = threading.Condition()
        self.fail = fail
        self.fail_times = fail_times
        self.ignore = ignore
        self.hold = False
        self.attempts = 0
        self.failures = 0
        self.waiting = 0
        self._permits = 0

    def set(self, **knobs: Any) -> None:
        with self._cond:
            for key, value in knobs.items():
                if key not in ("fail", "fail_times", "ignore", "hold"):
                    raise AttributeError(key)
                setattr(self, key, value)
            self._cond.notify_all()

    def release(self, n: int = 1) -> None:
        with self._cond:
            self._permits += n
            self._cond.notify_all()

    def wait_waiting(self, n: int = 1, timeout: float = TIMEOUT) -> None:
        """Wait until `n` attempts are held."""
        with self._cond:
            if not self._cond.wait_for(lambda: self.waiting >= n, timeout):
                raise AssertionError(f"timed out waiting for {n} held start attempt(s)")

    def wait_attempts(self, n: int, timeout: float = TIMEOUT) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: self.attempts >= n, timeout):
                raise AssertionError(
                    f"timed out waiting for {n} start attempts; saw {self.attempts}"
                )

    def attempt(self, name: Any) -> None:
        """Called from Worker.on_start."""
        with self._cond:
            self.attempts += 1
            self._cond.notify_all()
            if self.hold:
                self.waiting += 1
                self._cond.notify_all()
                released = self._cond.wait_for(
                    lambda: self._permits > 0 or not self.hold, BLOCK_LIMIT
                )
                self.waiting -= 1
                if self._permits > 0:
                    self._permits -= 1
                if not released:
                    raise StartFailed(f"{name}: held start attempt was never released")
            if self.ignore:
                raise Ignore()
            if self.fail or self.fail_times > 0:
                self.fail_times = max(0, self.fail_times - 1)
                self.failures += 1
                raise StartFailed(f"{name}: start attempt {self.attempts} failed")


# -------------------------------------------------------------------------------- worker


class Worker(Process):
    """A child that does what it is told; OTP's supervisor_1, plus recording.

    Messages (tell or ask): "stop" ends it with "normal"; "die" raises Died; ("exit", reason)
    calls self.exit(reason); ("raise", exc) raises exc; ("block", event[, then]) waits for the
    event and then returns, or exits with `then` if given; "ping" answers "pong".
    Lifecycle events go to `recorder` as (name, "start" | "stop" | "failure" | "kill" | ...).
    Positional args after `name` are kept as `extra` (simple_one_for_one's start_child args); a
    Control among them is used as the control.
    """

    def __init__(
        self,
        name: Any = "worker",
        *extra: Any,
        recorder: Recorder | None = None,
        control: Control | None = None,
        trap_exit: bool = False,
        stop_gate: threading.Event | None = None,
        stop_barrier: threading.Barrier | None = None,
        unlink_parent: bool = False,
    ) -> None:
        super().__init__()
        self.name = name
        self.extra = extra
        self.recorder = recorder
        self.control = control or next((e for e in extra if isinstance(e, Control)), None)
        self.trap_exit = trap_exit
        self.stop_gate = stop_gate
        self.stop_barrier = stop_barrier
        self.unlink_parent = unlink_parent

    def _record(self, event: Any) -> None:
        if self.recorder is not None:
            self.recorder.add(self.name, event)

    def on_start(self) -> None:
        self._record(("thread", threading.current_thread()))
        if self.control is not None:
            self.control.attempt(self.name)
        if self.unlink_parent:
            for ref in self.links:
                self.unlink(ref)
        self._record(("ref", self.actor_ref))
        self._record("start")

    def on_stop(self) -> None:
        self._record("stop")
        if self.stop_barrier is not None:
            self.stop_barrier.wait(BLOCK_LIMIT)
        if self.stop_gate is not None:
            self.stop_gate.wait(BLOCK_LIMIT)
        self._record("stopped")

    def on_failure(self, *_exc_info: Any) -> None:
        self._record("failure")

    def on_kill(self) -> None:
        self._record("kill")

    def on_receive(self, message: Any) -> Any:
        if message == "stop":
            self.exit("normal")
        if message == "die":
            raise Died(f"{self.name} died")
        if message == "ping":
            return "pong"
        if isinstance(message, Exit):
            self._record(("exit", message.reason))
            return None
        if isinstance(message, tuple):
            kind = message[0]
            if kind == "exit":
                self.exit(message[1])
            if kind == "raise":
                raise message[1]
            if kind == "block":
                self._record("blocked")
                message[1].wait(BLOCK_LIMIT)
                self._record("unblocked")
                if len(message) > 2:
                    self.exit(message[2])
                return "unblocked"
            if kind == "record":
                self._record(message[1])
                return None
        return super().on_receive(message)

    def get_extra(self) -> tuple:
        return self.extra

    def die(self) -> None:
        raise Died(f"{self.name} died")


def worker_ref(recorder: Recorder, name: Any, nth: int = -1) -> ActorRef[Any]:
    """The ref a named Worker recorded on its nth successful start (default: the latest)."""
    refs = [ev[1] for ev in recorder.events(name) if isinstance(ev, tuple) and ev[0] == "ref"]
    return refs[nth]


def worker_thread(recorder: Recorder, name: Any, nth: int = -1) -> threading.Thread:
    threads = [ev[1] for ev in recorder.events(name) if isinstance(ev, tuple) and ev[0] == "thread"]
    return threads[nth]


def wait_released(recorder: Recorder, name: Any) -> None:
    """Wait until an abandoned (killed) worker's blocked handler has returned and its thread
    is free: a Process's own thread has ended; a PooledProcess's pool thread has moved on."""
    thread = worker_thread(recorder, name)
    recorder.wait_for(lambda: "unblocked" in recorder.events(name), f"{name}'s handler to return")
    if thread.name.startswith("supervisors-pool-"):
        ref = worker_ref(recorder, name)
        wait_until(lambda: not pool_holds(ref), f"the pool thread to let go of {name}")
    else:
        thread.join(TIMEOUT)
        assert not thread.is_alive()


def pool_holds(ref: ActorRef[Any]) -> bool:
    """Whether a pool thread is running a turn of `ref`'s process now."""
    slots = list(the_pool()._slots)
    return any(getattr(slot.proc, "actor_urn", None) == ref.actor_urn for slot in slots)


def spec(
    child_id: Any,
    *args: Any,
    cls: type[Process] = Worker,
    restart: str = "permanent",
    shutdown: Any = 5.0,
    type: str = "worker",
    significant: bool = False,
    **kwargs: Any,
) -> ChildSpec:
    """A ChildSpec for a Worker named after its id (`args`/`kwargs` go to the Worker)."""
    return ChildSpec(
        child_id,
        (cls, (child_id, *args), kwargs),
        restart=restart,  # type: ignore[arg-type]
        shutdown=shutdown,
        type=type,  # type: ignore[arg-type]
        significant=significant,
    )


# --------------------------------------------------------------------------------- probe


class _ProbeProcess(Process):
    def __init__(self, messages: list, cond: threading.Condition, trap: bool) -> None:
        super().__init__()
        self._messages = messages
        self._cond = cond
        self.trap_exit = trap

    def on_receive(self, message: Any) -> Any:
        with self._cond:
            self._messages.append(message)
            self._cond.notify_all()

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(self, *args)

    def sync(self) -> None:
        """Answered after everything queued before it was handled."""

    def quit(self, reason: Any) -> None:
        self.exit(reason)


class Probe:
    """The test's own process (see the module docstring). Use it from the test thread."""

    def __init__(self, *, trap_exit: bool = True) -> None:
        self._cond = threading.Condition()
        self._messages: list[Any] = []
        self.ref = _ProbeProcess.start(self._messages, self._cond, trap_exit)
        self._proxy = self.ref.proxy()

    # -- doing things inside the probe's thread

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run fn(process, *args) in the probe's thread and return its result."""
        return self._proxy.call(fn, *args).get(timeout=TIMEOUT)

    def monitor(self, ref: ActorRef[Any]) -> int:
        return self.call(lambda p: p.monitor(ref))

    def demonitor(self, monitor_id: int) -> bool:
        return self.call(lambda p: p.demonitor(monitor_id))

    def link(self, ref: ActorRef[Any]) -> None:
        self.call(lambda p: p.link(ref))

    def unlink(self, ref: ActorRef[Any]) -> None:
        self.call(lambda p: p.unlink(ref))

    def quit(self, reason: Any) -> None:
        """Make the probe end itself with `reason` (self.exit inside its own thread)."""
        self._proxy.quit(reason)  # its future gets ActorDeadError: nobody waits for it

    def send_exit(self, ref: ActorRef[Any], reason: Any) -> None:
        """exit(ref, reason) sent by the probe (so the probe is the sender)."""
        self.call(lambda _p: exit(ref, reason))

    def sync(self) -> None:
        """Return once the probe has handled everything queued before this call."""
        self._proxy.sync().get(timeout=TIMEOUT)

    def start_link(self, cls: type[Process], *args: Any, **kwargs: Any) -> ActorRef[Any] | None:
        """cls.start_link(...) from inside the probe: the probe is its parent and is linked."""
        return self.call(lambda _p: cls.start_link(*args, **kwargs))

    def start_link_error(self, cls: type[Process], *args: Any, **kwargs: Any) -> BaseException:
        """cls.start_link(...) from inside the probe, expected to fail; return what it raised."""

        def attempt(_p: Process) -> Any:
            try:
                ref = cls.start_link(*args, **kwargs)
            except Exception as exc:
                return exc
            raise AssertionError(f"{cls.__name__}.start_link() did not fail; returned {ref}")

        return self.call(attempt)

    def start_sup(self, flags: SupFlags, children: Iterable[ChildSpec] = ()) -> Sup:
        """Start a supervisor linked to the probe (the probe is its parent, as in OTP tests)."""
        ref = self.start_link(Supervisor, flags, list(children))
        assert ref is not None
        return Sup(ref)

    def stop_sup(self, sup: Sup | ActorRef[Any], reason: Any = "shutdown") -> Any:
        """exit(Sup, shutdown) from the parent, then wait for the supervisor's own Exit."""
        ref = sup.ref if isinstance(sup, Sup) else sup
        self.send_exit(ref, reason)
        return self.wait_exit(ref)

    # -- what the probe received

    def messages(self) -> list[Any]:
        with self._cond:
            return list(self._messages)

    def exits(self, ref: ActorRef[Any] | None = None) -> list[Exit]:
        return [
            m
            for m in self.messages()
            if isinstance(m, Exit) and (ref is None or _same(m.sender, ref))
        ]

    def downs(self, ref: ActorRef[Any] | None = None) -> list[Down]:
        return [
            m for m in self.messages() if isinstance(m, Down) and (ref is None or _same(m.ref, ref))
        ]

    def wait_for(
        self, predicate: Callable[[Any], bool], what: str, timeout: float = TIMEOUT
    ) -> Any:
        """Wait for a received message matching `predicate`; return it."""
        with self._cond:
            found: list[Any] = []

            def seen() -> bool:
                found[:] = [m for m in self._messages if predicate(m)]
                return bool(found)

            if not self._cond.wait_for(seen, timeout):
                raise AssertionError(
                    f"timed out after {timeout} s waiting for {what}; got {self._messages}"
                )
            return found[0]

    def wait_exit(self, ref: ActorRef[Any], timeout: float = TIMEOUT) -> Any:
        """Wait for Exit(ref, reason) (needs a link); return the reason."""
        msg = self.wait_for(
            lambda m: isinstance(m, Exit) and _same(m.sender, ref), f"Exit from {ref}", timeout
        )
        return msg.reason

    def wait_down(self, ref_or_id: ActorRef[Any] | int, timeout: float = TIMEOUT) -> Any:
        """Wait for the Down of a monitor (by id, or by the monitored ref); return the reason."""
        if isinstance(ref_or_id, int):
            match = lambda m: isinstance(m, Down) and m.monitor_id == ref_or_id  # noqa: E731
        else:
            match = lambda m: isinstance(m, Down) and _same(m.ref, ref_or_id)  # noqa: E731
        return self.wait_for(match, f"Down for {ref_or_id}", timeout).reason

    def terminate(self, ref: ActorRef[Any], how: Any) -> Any:
        """OTP SUITE's terminate/4: end a child and wait for its Down; return the reason.

        how: "kill" and "shutdown" / ("shutdown", x) are exit signals from the probe; "normal"
        tells the child "stop"; "abnormal" tells it "die" (reason: a Died exception).
        """
        monitor_id = self.monitor(ref)
        if how == "normal":
            ref.tell("stop")
        elif how == "abnormal":
            ref.tell("die")
        else:
            self.send_exit(ref, how)
        return self.wait_down(monitor_id)


def _same(a: Any, b: Any) -> bool:
    return a is not None and b is not None and a.actor_urn == b.actor_urn


# ----------------------------------------------------------------------------- sup client


class Sup:
    """Blocking client for a Supervisor: `sup.which_children()` is `proxy...get()`."""

    def __init__(self, ref: ActorRef[Any]) -> None:
        self.ref = ref
        self._proxy = ref.proxy()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._proxy, name)
        return lambda *args, **kwargs: method(*args, **kwargs).get(timeout=TIMEOUT)

    def future(self, name: str, *args: Any) -> Any:
        """Send the call now and return its future, without waiting."""
        return getattr(self._proxy, name)(*args)

    def counts(self) -> list[int]:
        """[specs, active, supervisors, workers], as the SUITE's get_child_counts."""
        c = self._proxy.count_children().get(timeout=TIMEOUT)
        return [c["specs"], c["active"], c["supervisors"], c["workers"]]

    def refs(self) -> list[Any]:
        return [info.ref for info in self._proxy.which_children().get(timeout=TIMEOUT)]

    def child(self, child_id: Any) -> Any:
        for info in self._proxy.which_children().get(timeout=TIMEOUT):
            if info.id == child_id:
                return info.ref
        raise KeyError(child_id)

    def ids(self) -> list[Any]:
        return [info.id for info in self._proxy.which_children().get(timeout=TIMEOUT)]


def start_sup(flags: SupFlags, children: Iterable[ChildSpec] = ()) -> Sup:
    """A top-level supervisor, started from the test thread (no parent); stop it with ref.stop()."""
    return Sup(Supervisor.start(flags, list(children)))


def is_ref(value: Any) -> bool:
    return isinstance(value, ActorRef)
