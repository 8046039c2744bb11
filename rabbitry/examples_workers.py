"""Small worker processes for the example trees in examples/ (hello-tree.yaml and friends).

They are here, inside the installed package, so that `start: "rabbitry.examples_workers:Greeter"`
works from any directory after `pip install -e .`. Each shows one thing:

- Greeter logs a greeting every `every` seconds (a periodic action done with a timer that tells
  the process a message, and that is cancelled when the process stops);
- Flaky does the same and crashes on purpose after `crash_after` seconds, so that you can watch
  its supervisor report the crash and restart it;
- Idle does nothing at all until it is stopped: a placeholder child.

They are PooledProcesses: their handlers are short, so they need no thread of their own, and
a tree (or a test cluster: every node of rabbitry.testing.cluster has an Idle child) of them
costs no threads while they wait.
"""

from __future__ import annotations

import logging
from typing import Any

from supervisors.durations import parse_duration
from supervisors.pooled import PooledProcess
from supervisors.process import Process

log = logging.getLogger("rabbitry.examples")


class _Tick:
    """The message a Periodic process's timer sends it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<tick>"


_TICK = _Tick()


class Periodic(PooledProcess):
    """A process that calls `tick()` every `every` seconds, on the shared pool.

    The timer only tells the process a message, so `tick()` runs like any other handler: an
    exception in it crashes the process. The pending timer is cancelled when the process stops,
    however it stops.
    """

    def __init__(self, every: float | str = 1.0) -> None:
        super().__init__()
        self.every = parse_duration(every, allow_zero=False)
        self.ticks = 0

    def on_start(self) -> None:
        self._schedule()

    def on_receive(self, message: Any) -> Any:
        if message is _TICK:
            self.ticks += 1
            self.tick()
            self._schedule()
            return None
        return self.handle(message)

    def tick(self) -> None:
        """Override: the periodic action."""

    def handle(self, message: Any) -> Any:
        """Override to handle messages other than the timer's."""
        log.warning("%s: unexpected message %r", self, message)

    def _schedule(self) -> None:
        self.send_after(self.every, _TICK)  # cancelled by the Process when it ends


class Greeter(Periodic):
    """Logs "hello, <name>!" every `every` seconds (a number, or "500ms", "1s", ...)."""

    def __init__(
        self, name: str = "world", every: float | str = 1.0, greeting: str = "hello"
    ) -> None:
        super().__init__(every)
        self.name = name
        self.greeting = greeting

    def on_start(self) -> None:
        log.info("greeter %s: started, greeting every %gs", self.name, self.every)
        super().on_start()

    def tick(self) -> None:
        log.info("%s, %s! (greeting #%d)", self.greeting, self.name, self.ticks)

    def on_stop(self) -> None:
        super().on_stop()
        log.info("greeter %s: stopped after %d greetings", self.name, self.ticks)


class FlakyCrash(RuntimeError):
    """The exception Flaky crashes with, so that it is easy to tell apart from a real bug.

    `deliberate = True`: the crash report says `deliberate=True` at INFO, and the traceback is
    logged at DEBUG only (supervisors.crash_log), so an example does not look like an incident.
    """

    deliberate = True


class Flaky(Periodic):
    """Works (logs a line every `every` seconds) and crashes after `crash_after` seconds.

    The crash is an ordinary exception escaping a handler, so the process ends with it as the
    exit reason and its supervisor restarts it (if its restart type says so). Each new instance
    starts counting afresh.
    """

    def __init__(
        self, name: str = "flaky", crash_after: float | str = 4.0, every: float | str = 1.0
    ) -> None:
        super().__init__(every)
        self.name = name
        self.crash_after = parse_duration(crash_after, allow_zero=False)
        self._elapsed = 0.0

    def on_start(self) -> None:
        log.info("%s: started; I will crash in %gs (on purpose)", self.name, self.crash_after)
        super().on_start()

    def tick(self) -> None:
        self._elapsed += self.every
        if self._elapsed >= self.crash_after:
            raise FlakyCrash(f"{self.name}: crashing on purpose after {self._elapsed:g}s")
        log.info(
            "%s: working (%gs until my next crash)", self.name, self.crash_after - self._elapsed
        )


class Idle(PooledProcess):
    """Does nothing until stopped. Useful as a placeholder child in a tree file."""

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        super().__init__()


class GlobalName(Process):
    """Holds `name` cluster-wide (rabbitry.singleton.register_global) from its start, and
    answers a {"t": "where"} message sent to it through whereis_global with its node's name.
    `out`, if given, is a file it appends "<node> registered|refused|conflict" lines to.
    A Process, not a PooledProcess: registering waits for a majority of the core."""

    def __init__(self, name: str, out: str | None = None) -> None:
        super().__init__()
        self.name = name
        self.out = out

    def on_start(self) -> None:
        from rabbitry.singleton import register_global

        held = register_global(self.name, self.actor_ref)
        self._note("registered" if held else "refused")

    def on_receive(self, message: Any) -> Any:
        if message == ("global_name_conflict", self.name):
            self._note("conflict")
            return None
        if isinstance(getattr(message, "msg", None), dict) and message.msg.get("t") == "where":
            self._note(f"asked by {message.node}")
            return None
        return super().on_receive(message)

    def _note(self, what: str) -> None:
        from rabbitry.node import current_node

        line = f"{current_node().name} {what}"
        log.info("global name %s: %s", self.name, line)
        if self.out:
            with open(self.out, "a") as f:
                f.write(line + "\n")


class GlobalLookup(Process):
    """Every `every` seconds, looks `name` up with whereis_global and tells the holder
    {"t": "where"}; appends "<node> sees <holder node or none>" to `out`."""

    def __init__(self, name: str, out: str, every: float | str = 0.5) -> None:
        super().__init__()
        self.name = name
        self.out = out
        self.every = parse_duration(every)

    def on_start(self) -> None:
        self.actor_ref.tell(_TICK)

    def on_receive(self, message: Any) -> Any:
        if message is _TICK:
            from rabbitry.node import current_node
            from rabbitry.singleton import whereis_global

            ref = whereis_global(self.name)
            if ref is not None:
                ref.tell({"t": "where"})
            with open(self.out, "a") as f:
                f.write(f"{current_node().name} sees {ref.node if ref is not None else 'none'}\n")
            self.send_after(self.every, _TICK)
            return None
        return super().on_receive(message)
