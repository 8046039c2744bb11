"""Places where we first departed from OTP and now match it (found while porting the SUITE)."""

from __future__ import annotations

from typing import Any

import pytest

from supervisors import ChildSpec, Exit, Process, Supervisor, SupFlags

from .helpers import Probe, Recorder, spec, wait_dead

pytestmark = pytest.mark.usefixtures("process_kind")


def test_temporary_static_child_keeps_no_start_args() -> None:
    recorder = Recorder()
    sup = Supervisor.start(
        SupFlags(), [spec("t", "big-arg", restart="temporary", recorder=recorder)]
    )
    try:
        kept = sup.proxy().get_childspec("t").get()
        cls, args, kwargs = kept.start
        assert args == () and kwargs == {}
        assert cls.__name__ == "Worker"
    finally:
        sup.stop()


class _Breakable(Supervisor):
    def break_machinery(self) -> None:
        raise RuntimeError("bug in the supervisor itself")


def test_supervisor_crash_still_stops_children_last_first() -> None:
    recorder = Recorder()
    sup = _Breakable.start(SupFlags(), [spec(name, recorder=recorder) for name in ("a", "b", "c")])
    with pytest.raises(RuntimeError):
        sup.proxy().break_machinery().get()
    wait_dead(sup)
    assert recorder.names("stop") == ["c", "b", "a"]


class _BadInit(Supervisor):
    def init(self) -> Any:
        return "not a tuple"


def test_init_returning_garbage_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match=r"init\(\) must return \(SupFlags, \[ChildSpec"):
        _BadInit.start()


class _Trapper(Process):
    trap_exit = True

    def __init__(self, seen: list) -> None:
        super().__init__()
        self.seen = seen

    def on_receive(self, message: Any) -> Any:
        self.seen.append(message)
        return None


def test_unlinked_start_from_a_process_has_no_parent() -> None:
    """An Exit from the process that merely started it is an ordinary message to a trapping
    process; only a parent (start_link, a supervisor) can end it that way."""
    probe = Probe()
    seen: list = []
    child = probe.call(lambda _p: _Trapper.start(seen))
    probe.send_exit(child, "shutdown")
    assert child.ask("sync?") is None  # still alive, and it handled the Exit first
    assert seen[0] == Exit(probe.ref, "shutdown")
    child.stop()
    linked = probe.start_link(_Trapper, [])
    probe.send_exit(linked, "shutdown")
    wait_dead(linked)


def test_start_child_spec_for_temporary_child_drops_args_only_for_that_child() -> None:
    sup = Supervisor.start(
        SupFlags("simple_one_for_one"),
        [ChildSpec("tmpl", (_Trapper, ([],), {}), restart="temporary")],
    )
    try:
        ref = sup.proxy().start_child([]).get()
        assert sup.proxy().get_childspec(ref).get().start[1] == ([],)
    finally:
        sup.stop()
