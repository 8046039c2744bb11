"""The Process layer: links, monitors, trap_exit and exit signals, as Erlang has them.

A link or monitor fires in the dying process's thread: links first, then monitors. So once a
Probe holds the Down for a process, any Exit that process sent over a link is already in the
Probe's mailbox, ahead of the Down. Tests use that to check that something did NOT arrive,
without sleeping.
"""

from __future__ import annotations

import threading
from typing import Any

import pykka
import pytest
from pykka import ActorDeadError

from supervisors import (
    CallerError,
    ChildSpec,
    Down,
    Exit,
    Ignore,
    Process,
    Supervisor,
    SupFlags,
    exit,
    exit_reason,
    processes,
)
from tests.supervisors.helpers import (
    TIMEOUT,
    Died,
    Probe,
    Recorder,
    Sup,
    Worker,
    wait_dead,
    wait_released,
    wait_until,
)

pytestmark = pytest.mark.usefixtures("process_kind")


class NoSuchThing(CallerError):
    """A CallerError subclass: a reply, not a crash."""


class Answering(Worker):
    def lookup(self, key: str) -> str:
        if key != "known":
            raise NoSuchThing(key)
        return "value"


def start_worker(name: str = "w", recorder: Recorder | None = None, **kwargs) -> pykka.ActorRef:
    return Worker.start(name, recorder=recorder or Recorder(), **kwargs)


# ------------------------------------------------------------------------------- links


def test_link_carries_the_exit_reason_both_ways() -> None:
    a, b = Probe(), Probe()
    a.link(b.ref)
    assert [r.actor_urn for r in a.call(lambda p: p.links)] == [b.ref.actor_urn]
    assert [r.actor_urn for r in b.call(lambda p: p.links)] == [a.ref.actor_urn]

    # b ends: a (trapping) receives Exit(b, reason).
    b.quit(("shutdown", "bye"))
    assert a.wait_exit(b.ref) == ("shutdown", "bye")
    assert a.call(lambda p: p.links) == []

    # A linked worker that does not trap dies with the other side's reason, and on_stop runs.
    rec = Recorder()
    w = start_worker("w", rec)
    c = Probe()
    c.link(w)
    monitor_id = a.monitor(w)
    c.quit("boom")
    assert a.wait_down(monitor_id) == "boom"
    assert rec.events("w").count("stop") == 1


def test_crash_reaches_linked_process_as_the_exception() -> None:
    probe = Probe()
    w = start_worker()
    probe.link(w)
    w.tell("die")
    reason = probe.wait_exit(w)
    assert isinstance(reason, Died)
    assert reason is exit_reason(w)


def test_unlink_removes_the_link_on_both_sides() -> None:
    probe = Probe()
    w = start_worker()
    probe.link(w)
    probe.unlink(w)
    assert probe.call(lambda p: p.links) == []
    monitor_id = probe.monitor(w)
    w.tell("die")
    probe.wait_down(monitor_id)
    # Links fire before monitors, so an Exit would be queued ahead of the Down.
    assert probe.exits() == []
    assert probe.ref.is_alive()


def test_linking_twice_is_one_link() -> None:
    probe = Probe()
    w = start_worker()
    probe.link(w)
    probe.link(w)
    monitor_id = probe.monitor(w)
    w.tell("die")
    probe.wait_down(monitor_id)
    assert len(probe.exits(w)) == 1


def test_link_to_a_dead_process_gives_noproc() -> None:
    w = start_worker()
    w.stop()
    wait_dead(w)

    trapping = Probe()
    trapping.link(w)
    assert trapping.wait_exit(w) == "noproc"
    assert trapping.ref.is_alive()

    not_trapping = Probe(trap_exit=False)
    not_trapping.call(lambda p: p.link(w))
    assert wait_dead(not_trapping.ref) == "noproc"


# ------------------------------------------------------------------------------ monitors


def test_monitors_stack_and_each_fires_once() -> None:
    probe = Probe()
    w = start_worker()
    first, second = probe.monitor(w), probe.monitor(w)
    assert first != second
    w.stop()
    assert probe.wait_down(first) == "normal"
    assert probe.wait_down(second) == "normal"
    probe.sync()
    downs = probe.downs(w)
    assert sorted(d.monitor_id for d in downs) == sorted([first, second])
    assert all(isinstance(d, Down) and d.ref.actor_urn == w.actor_urn for d in downs)
    assert probe.exits() == [], "a monitor is not a link"


def test_monitor_of_a_dead_process_gives_noproc() -> None:
    probe = Probe()
    w = start_worker()
    w.stop()
    wait_dead(w)
    monitor_id = probe.monitor(w)
    assert probe.wait_down(monitor_id) == "noproc"


def test_demonitor_flushes_a_down_already_queued() -> None:
    probe = Probe()
    w = start_worker()

    def inside(p: Process) -> tuple[int, int, bool]:
        dropped, kept = p.monitor(w), p.monitor(w)
        exit(w, "kill")  # synchronous: both Downs are in our mailbox when this returns
        assert p.actor_inbox.empty() is False
        return dropped, kept, p.demonitor(dropped)

    _dropped, kept, removed = probe.call(inside)
    assert removed is True
    assert probe.wait_down(kept) == "killed"
    probe.sync()
    assert [d.monitor_id for d in probe.downs()] == [kept]
    assert probe.demonitor(kept) is False, "a fired monitor is gone"


def test_demonitor_before_the_target_dies_means_no_down() -> None:
    probe = Probe()
    w = start_worker()
    dropped, kept = probe.monitor(w), probe.monitor(w)
    assert probe.demonitor(dropped) is True
    w.tell("die")
    probe.wait_down(kept)
    probe.sync()
    assert [d.monitor_id for d in probe.downs()] == [kept]


# ------------------------------------------------------------------------ exit signals


def test_trapping_process_receives_exit_messages() -> None:
    probe = Probe()
    exit(probe.ref, "from outside")
    message = probe.wait_for(lambda m: isinstance(m, Exit), "Exit from the test thread")
    assert message == Exit(None, "from outside")

    sender = Probe()
    sender.send_exit(probe.ref, ("shutdown", 1))
    assert probe.wait_exit(sender.ref) == ("shutdown", 1)

    # "normal" arrives as a message too; the probe lives on.
    exit(probe.ref, "normal")
    probe.wait_for(lambda m: m == Exit(None, "normal"), "Exit normal")
    assert probe.ref.is_alive()


def test_normal_is_ignored_unless_trapping() -> None:
    rec = Recorder()
    w = start_worker("w", rec)
    exit(w, "normal")
    assert w.ask("ping", timeout=TIMEOUT) == "pong"

    # Through a link too: a linked process ending normally does not take us with it.
    probe, watcher = Probe(), Probe()
    probe.link(w)
    watch = watcher.monitor(probe.ref)
    probe.quit("normal")
    watcher.wait_down(watch)  # the link signal was delivered before this Down
    assert w.ask("ping", timeout=TIMEOUT) == "pong"

    # Any other reason ends it, and on_stop runs.
    exit(w, "shutdown")
    assert wait_dead(w) == "shutdown"
    assert "stop" in rec.events("w")


def test_kill_cannot_be_trapped_and_drops_the_mailbox() -> None:
    rec = Recorder()
    w = start_worker("w", rec, trap_exit=True)
    probe = Probe()
    probe.link(w)
    monitor_id = probe.monitor(w)

    gate = threading.Event()
    busy = w.ask(("block", gate), block=False)
    rec.wait_for(lambda: "blocked" in rec.events("w"), "the worker to block")
    pending = [w.ask("ping", block=False) for _ in range(3)]
    w.tell(("record", "never handled"))

    exit(w, "kill")
    assert exit_reason(w) == "killed", "dead when exit() returns"
    assert not w.is_alive()
    for future in [busy, *pending]:
        with pytest.raises(ActorDeadError):
            future.get(timeout=TIMEOUT)
    assert probe.wait_down(monitor_id) == "killed"
    assert probe.wait_exit(w) == "killed"
    assert "kill" in rec.events("w"), "on_kill ran"

    # Let the abandoned handler return: its reply is discarded, on_stop never runs.
    gate.set()
    wait_released(rec, "w")
    with pytest.raises(ActorDeadError):
        busy.get(timeout=TIMEOUT)
    assert "stop" not in rec.events("w")
    assert "never handled" not in rec.events("w")
    with pytest.raises(ActorDeadError):
        w.ask("ping", timeout=TIMEOUT)


def test_kill_through_a_link_can_be_trapped() -> None:
    """A process that ends with reason "kill" (exit/1, not exit/2) sends "kill" over its links:
    a trapping process gets it as a message, one that does not trap dies with reason "kill"."""
    rec = Recorder()
    origin = start_worker("origin", rec)
    trapping = Probe()
    trapping.link(origin)
    not_trapping = Probe(trap_exit=False)
    not_trapping.link(origin)
    watcher = Probe()
    watch_id = watcher.monitor(not_trapping.ref)

    origin.tell(("exit", "kill"))
    assert trapping.wait_exit(origin) == "kill"
    assert trapping.ref.is_alive()
    assert watcher.wait_down(watch_id) == "kill"
    assert exit_reason(origin) == "kill"
    assert "stop" in rec.events("origin"), "ending by self.exit runs on_stop"


def test_exception_in_a_told_message_ends_the_process() -> None:
    rec = Recorder()
    w = start_worker("w", rec)
    w.tell("die")
    reason = wait_dead(w)
    assert isinstance(reason, Died)
    assert "failure" in rec.events("w")
    with pytest.raises(ActorDeadError):
        w.ask("ping", timeout=TIMEOUT)


def test_exception_in_an_asked_message_ends_the_process_and_reaches_the_asker() -> None:
    probe = Probe()
    w = start_worker()
    probe.link(w)
    with pytest.raises(Died) as raised:
        w.ask("die", timeout=TIMEOUT)
    assert wait_dead(w) is raised.value
    assert probe.wait_exit(w) is raised.value

    # Through a proxy method as well.
    w2 = start_worker()
    with pytest.raises(Died):
        w2.proxy().die().get(timeout=TIMEOUT)
    assert isinstance(wait_dead(w2), Died)


def test_caller_error_is_a_reply_not_a_crash() -> None:
    ref = Answering.start("answering")
    proxy = ref.proxy()
    with pytest.raises(NoSuchThing):
        proxy.lookup("unknown").get(timeout=TIMEOUT)
    assert proxy.lookup("known").get(timeout=TIMEOUT) == "value"
    # Told: nobody to answer, logged, and the process lives on.
    ref.tell(("raise", NoSuchThing("told")))
    assert ref.ask("ping", timeout=TIMEOUT) == "pong"
    assert ref.is_alive()


# ------------------------------------------------------------------------------ starting


class CrashesOnStart(Process):
    def on_start(self) -> None:
        raise RuntimeError("no can do")


class IgnoresOnStart(Process):
    def on_start(self) -> None:
        raise Ignore()


class ExitsOnStart(Process):
    def __init__(self, reason: object) -> None:
        super().__init__()
        self.reason = reason

    def on_start(self) -> None:
        self.exit(self.reason)


def test_crash_in_on_start_is_raised_by_start() -> None:
    with pytest.raises(RuntimeError, match="no can do"):
        CrashesOnStart.start()
    assert not [r for r in processes() if r.actor_class is CrashesOnStart]


def test_ignore_in_on_start_makes_start_return_none() -> None:
    assert IgnoresOnStart.start() is None
    assert ExitsOnStart.start("normal") is None
    assert not [r for r in processes() if r.actor_class is IgnoresOnStart]
    with pytest.raises(Exception, match="boom"):
        ExitsOnStart.start("boom")


def test_start_link_links_before_on_start() -> None:
    seen: list[list[str]] = []

    class LooksAtLinks(Process):
        def on_start(self) -> None:
            seen.append([r.actor_urn for r in self.links])

    probe = Probe()
    child = probe.start_link(LooksAtLinks)
    assert seen == [[probe.ref.actor_urn]]
    child.stop()
    assert probe.wait_exit(child) == "normal"


@pytest.mark.parametrize("trap_exit", [True, False])
def test_failed_start_link_raises_and_sends_no_exit_signal(trap_exit: bool) -> None:
    probe = Probe(trap_exit=trap_exit)

    def attempt(_p: Process) -> BaseException | None:
        try:
            CrashesOnStart.start_link()
        except RuntimeError as exc:
            return exc
        return None

    assert str(probe.call(attempt)) == "no can do"
    # A non-trapping parent would have died of an exit signal; a trapping one would hold it.
    probe.sync()
    assert probe.ref.is_alive()
    assert probe.exits() == []
    assert probe.call(lambda p: p.links) == []


def test_start_link_needs_a_calling_process() -> None:
    with pytest.raises(RuntimeError, match="inside a Process"):
        Worker.start_link("w")


# ---------------------------------------------------------------------- ending and on_stop


def test_on_stop_runs_for_stop_and_for_shutdown_signal() -> None:
    rec = Recorder()
    a = start_worker("a", rec)
    a.stop()
    assert wait_dead(a) == "normal"
    b = start_worker("b", rec)
    exit(b, "shutdown")
    assert wait_dead(b) == "shutdown"
    c = start_worker("c", rec)
    exit(c, ("shutdown", "detail"))
    assert wait_dead(c) == ("shutdown", "detail")
    assert rec.names("stop") == ["a", "b", "c"]


def test_stuck_process_that_is_killed_is_abandoned() -> None:
    rec = Recorder()
    w = start_worker("w", rec)
    probe = Probe()
    monitor_id = probe.monitor(w)
    gate = threading.Event()
    stuck = w.ask(("block", gate), block=False)
    rec.wait_for(lambda: "blocked" in rec.events("w"), "the worker to block")

    exit(w, "shutdown")  # queued in the priority lane, but nobody reads it: stuck
    probe.sync()
    assert w.is_alive()
    exit(w, "kill")
    assert probe.wait_down(monitor_id) == "killed"
    with pytest.raises(ActorDeadError):
        stuck.get(timeout=TIMEOUT)

    gate.set()
    wait_released(rec, "w")
    with pytest.raises(ActorDeadError):
        stuck.get(timeout=TIMEOUT)  # the late "unblocked" reply was discarded
    assert exit_reason(w) == "killed"
    assert "stop" not in rec.events("w")


def test_exit_signal_jumps_ahead_of_queued_messages() -> None:
    rec = Recorder()
    w = start_worker("w", rec)
    gate = threading.Event()
    w.tell(("block", gate))
    rec.wait_for(lambda: "blocked" in rec.events("w"), "the worker to block")
    w.tell(("record", "first"))
    later = w.ask("ping", block=False)
    exit(w, "shutdown")
    gate.set()
    assert wait_dead(w) == "shutdown"
    assert "first" not in rec.events("w")
    with pytest.raises(ActorDeadError):
        later.get(timeout=TIMEOUT)
    assert rec.events("w")[-2:] == ["stop", "stopped"]


def test_self_exit_in_a_handler_ends_the_process_at_once() -> None:
    rec = Recorder()

    class ExitsMidway(Worker):
        def finish(self, reason: object) -> str:
            self.exit(reason)
            self._record("after exit")
            return "unreachable"

    w = ExitsMidway.start("w", recorder=rec)
    probe = Probe()
    probe.link(w)
    with pytest.raises(ActorDeadError, match="exited with reason boom"):
        w.proxy().finish("boom").get(timeout=TIMEOUT)
    assert probe.wait_exit(w) == "boom"
    assert "after exit" not in rec.events("w")
    assert "stop" in rec.events("w")

    # Even "normal" ends it when the process itself asks for it.
    w2 = start_worker("w2", rec)
    w2.tell(("exit", "normal"))
    assert wait_dead(w2) == "normal"


def test_self_exit_from_another_thread_is_a_signal_to_itself() -> None:
    w = start_worker()
    actor = w._actor_weakref()  # the Process object, as a thread holding it would
    actor.exit("normal")
    assert wait_dead(w) == "normal"


# --------------------------------------------------------------- trapping under a parent


def test_trapping_child_ends_when_its_supervisor_sends_shutdown() -> None:
    rec = Recorder()
    sup = Sup(
        Supervisor.start(
            SupFlags(),
            [ChildSpec("child", (Worker, ("child",), {"recorder": rec, "trap_exit": True}))],
        )
    )
    child = sup.child("child")
    # From anyone else, "shutdown" is only a message to a trapping process.
    exit(child, "shutdown")
    rec.wait_for(lambda: ("exit", "shutdown") in rec.events("child"), "the Exit message")
    assert child.is_alive()

    sup.terminate_child("child")
    assert exit_reason(child) == "shutdown"
    assert "stop" in rec.events("child")
    assert sup.refs() == [None]
    sup.ref.stop()
    wait_until(lambda: not sup.ref.is_alive(), "the supervisor to stop")


def test_on_stop_that_raises_still_ends_the_process_with_its_reason() -> None:
    class BadStop(Process):
        def on_stop(self) -> None:
            raise RuntimeError("bad stop")

    ref = BadStop.start()
    probe = Probe()
    probe.link(ref)
    exit(ref, ("shutdown", "x"))
    assert probe.wait_exit(ref) == ("shutdown", "x")


class _Timed(Process):
    def __init__(self, got: list) -> None:
        super().__init__()
        self.got = got

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, tuple) and message[0] == "after":
            return self.send_after(message[1], message[2])
        if isinstance(message, tuple) and message[0] == "cancel":
            self.cancel_timer(message[1])
            return None
        if message == "pending":
            return len(self._sv_timers or ())
        self.got.append(message)
        return None


def test_send_after_delivers_and_cancel_timer_calls_it_off() -> None:
    got: list = []
    ref = _Timed.start(got)
    ref.ask(("after", 0.01, "first"))
    late = ref.ask(("after", 30, "never"))
    wait_until(lambda: got == ["first"], "the timer's message")
    ref.ask(("cancel", late))
    assert ref.ask("pending") == 0  # fired and cancelled timers are both forgotten
    late.join(TIMEOUT)  # a cancelled Timer's thread ends soon after, not at once
    assert not late.is_alive()
    ref.stop()


def test_pending_timers_end_with_their_process() -> None:
    got: list = []
    ref = _Timed.start(got)
    timers = [ref.ask(("after", 30, n)) for n in range(3)]
    exit(ref, "kill")
    wait_until(lambda: not any(t.is_alive() for t in timers), "timers cancelled")
    assert got == []
