"""OTP supervisor_SUITE, ported: starting and stopping supervisors, and the child API.

Each test names the SUITE case it ports. `Probe` plays the SUITE's test case process: it is the
parent of the supervisors it starts (so `probe.stop_sup(sup)` is the SUITE's
`terminate(SupPid, shutdown)`), and it links to or monitors children to see how they end.
OTP's `supervisor_1` child is `Worker`; its `{ok, undefined}` (ignore) and `{error, R}` starts are
a `Control` that makes `on_start` raise Ignore or fail.

Differences from OTP that the contract fixes: which_children lists children in start order (OTP:
newest first), a failed start raises StartChildError rather than returning {error, R}, and a
start callable stands in for an MFA.
"""

from __future__ import annotations

import gc
import logging
import weakref

import pykka
import pytest
from pykka import ActorDeadError

from supervisors import (
    AlreadyPresent,
    AlreadyStarted,
    ChildInfo,
    ChildSpec,
    InvalidChildSpec,
    NotFound,
    Running,
    SimpleOneForOne,
    StartChildError,
    Supervisor,
    SupFlags,
    exit,
    exit_reason,
)
from tests.supervisors.helpers import (
    Big,
    Control,
    Died,
    Probe,
    Recorder,
    StartFailed,
    Sup,
    Worker,
    is_ref,
    reports,
    spec,
    start_sup,
    wait_dead,
    wait_until,
)

pytestmark = pytest.mark.usefixtures("process_kind")

FLAGS = SupFlags("one_for_one", 2, 3600)
SIMPLE = SupFlags("simple_one_for_one", 2, 3600)


class IgnoringSup(Supervisor):
    def init(self) -> None:
        return None


class BadReturnSup(Supervisor):
    def init(self):  # type: ignore[override]
        return 42


class FailingInit(Exception):
    pass


class FailingSup(Supervisor):
    def init(self):  # type: ignore[override]
        raise FailingInit("fail")


class Forgetful(Worker):
    """A worker that keeps none of its extra start args (so only a supervisor could)."""

    def __init__(self, name: object, *_dropped: object, **kwargs: object) -> None:
        super().__init__(name, **kwargs)  # type: ignore[arg-type]


# ------------------------------------------------------------------------- sup_start group


def test_sup_start_normal() -> None:
    probe = Probe()
    sup = probe.start_sup(FLAGS)
    assert sup.which_children() == []
    assert probe.stop_sup(sup) == "shutdown"
    assert exit_reason(sup.ref) == "shutdown"


def test_sup_start_ignore_init() -> None:
    probe = Probe()
    assert probe.start_link(IgnoringSup) is None
    probe.sync()
    assert probe.exits() == [], "an ignoring init sends no exit signal"
    assert IgnoringSup.start() is None


def test_sup_start_ignore_child() -> None:
    sup = start_sup(FLAGS)
    assert sup.start_child(spec("child1", control=Control(ignore=True))) is None
    cpid2 = sup.start_child(spec("child2"))
    assert sup.which_children() == [
        ChildInfo("child1", None, "worker"),
        ChildInfo("child2", cpid2, "worker"),
    ]
    assert sup.counts() == [2, 1, 0, 2]


def test_sup_start_ignore_temporary_child() -> None:
    sup = start_sup(
        FLAGS,
        [
            spec("child1", restart="temporary", control=Control(ignore=True)),
            spec("child2", restart="temporary"),
        ],
    )
    [info] = sup.which_children()
    assert info.id == "child2" and is_ref(info.ref)
    assert sup.counts() == [1, 1, 0, 1]


def test_sup_start_ignore_temporary_child_start_child() -> None:
    sup = start_sup(FLAGS)
    assert (
        sup.start_child(spec("child1", restart="temporary", control=Control(ignore=True))) is None
    )
    cpid2 = sup.start_child(spec("child2", restart="temporary"))
    assert sup.which_children() == [ChildInfo("child2", cpid2, "worker")]
    assert sup.counts() == [1, 1, 0, 1]


def test_sup_start_ignore_temporary_child_start_child_simple() -> None:
    sup = start_sup(SIMPLE, [spec("child1", restart="temporary")])
    assert sup.start_child([Control(ignore=True)]) is None
    cpid2 = sup.start_child([])
    assert sup.which_children() == [ChildInfo(None, cpid2, "worker")]
    assert sup.counts() == [1, 1, 0, 1]


def test_sup_start_ignore_permanent_child_start_child_simple() -> None:
    probe = Probe()
    sup = probe.start_sup(SIMPLE, [spec("child1", restart="permanent")])
    assert sup.start_child([Control(ignore=True)]) is None
    cpid2 = sup.start_child([])
    assert sup.which_children() == [ChildInfo(None, cpid2, "worker")]
    assert sup.counts() == [1, 1, 0, 1]
    # Regression test in OTP: the supervisor terminates without error.
    assert probe.stop_sup(sup) == "shutdown"
    assert exit_reason(cpid2) == "shutdown"


def test_sup_start_error_return() -> None:
    probe = Probe()
    error = probe.start_link_error(BadReturnSup)
    assert isinstance(error, TypeError)
    probe.sync()
    assert probe.exits() == [], "a failed start_link sends no exit signal"
    assert probe.ref.is_alive()


def test_sup_start_fail() -> None:
    probe = Probe()
    error = probe.start_link_error(FailingSup)
    assert isinstance(error, FailingInit) and str(error) == "fail"
    probe.sync()
    assert probe.exits() == []
    with pytest.raises(FailingInit):
        FailingSup.start()


def test_sup_start_child_returns_error(caplog: pytest.LogCaptureFixture) -> None:
    def fails():
        raise RuntimeError("reason")

    def returns_garbage():
        return "error_reason"

    sup = start_sup(FLAGS)
    with pytest.raises(StartChildError) as raised:
        sup.start_child(ChildSpec("child1", fails))
    assert raised.value.child_id == "child1"
    assert isinstance(raised.value.reason, RuntimeError)
    with pytest.raises(StartChildError) as raised:
        sup.start_child(ChildSpec("child2", returns_garbage))
    assert isinstance(raised.value.reason, TypeError)
    assert sup.which_children() == []
    assert [r["child"] for r in reports(caplog, "start_error")] == ["child1", "child2"]


def test_sup_start_restart_child_returns_error() -> None:
    control = Control()
    sup = start_sup(FLAGS, [spec("child1", control=control)])
    sup.terminate_child("child1")
    control.set(fail=True)
    with pytest.raises(StartChildError) as raised:
        sup.restart_child("child1")
    assert isinstance(raised.value.reason, StartFailed)
    assert sup.which_children() == [ChildInfo("child1", None, "worker")]


def test_sup_start_child_returns_error_simple() -> None:
    sup = start_sup(SIMPLE, [spec("child1")])
    with pytest.raises(StartChildError) as raised:
        sup.start_child([Control(fail=True)])
    assert isinstance(raised.value.reason, StartFailed)
    assert sup.which_children() == []
    assert sup.counts() == [1, 0, 0, 0]


def test_sup_start_failing_child_stops_the_ones_started() -> None:
    """OTP's init: a child that fails to start stops the children already started, in reverse
    order, and start_link returns {error, {shutdown, {failed_to_start_child, Id, R}}}."""
    rec = Recorder()
    children = [
        spec("a", recorder=rec),
        spec("b", recorder=rec),
        spec("c", recorder=rec, control=Control(fail=True)),
        spec("d", recorder=rec),
    ]
    with pytest.raises(StartChildError) as raised:
        Supervisor.start(FLAGS, children)
    assert raised.value.child_id == "c"
    assert isinstance(raised.value.reason, StartFailed)
    assert rec.names("start") == ["a", "b"]
    assert rec.names("stop") == ["b", "a"]
    assert "d" not in [name for name, _ in rec.items()]


# --------------------------------------------------------------------- sup_start_map group


def test_sup_start_map_defaults_in_get_childspec() -> None:
    sup = start_sup(
        SupFlags(),
        [
            ChildSpec("child1", Worker),
            ChildSpec("child2", Worker, shutdown="brutal_kill"),
            ChildSpec("child3", Worker, type="supervisor"),
        ],
    )
    child1 = sup.get_childspec("child1")
    assert (child1.id, child1.start, child1.restart, child1.shutdown, child1.type) == (
        "child1",
        (Worker, (), {}),
        "permanent",
        5.0,
        "worker",
    )
    assert child1.significant is False
    assert sup.get_childspec("child2").shutdown == "brutal_kill"
    child3 = sup.get_childspec("child3")
    assert (child3.shutdown, child3.type) == ("infinity", "supervisor")
    with pytest.raises(NotFound):
        sup.get_childspec("child4")


def test_sup_start_map_simple() -> None:
    template = ChildSpec(None, Worker, restart="temporary")
    sup = start_sup(SupFlags("simple_one_for_one"), [template])
    refs = [sup.start_child([]) for _ in range(3)]
    for ref in refs:
        assert sup.get_childspec(ref) == template
    probe = Probe()
    with pytest.raises(NotFound):
        sup.get_childspec(probe.ref)
    with pytest.raises(NotFound):
        sup.get_childspec("child1")


def test_sup_start_map_faulty_specs() -> None:
    with pytest.raises(TypeError):
        ChildSpec(start=Worker)  # type: ignore[call-arg]  # missing id
    with pytest.raises(TypeError):
        ChildSpec("child2")  # type: ignore[call-arg]  # missing start
    with pytest.raises(TypeError, match="ChildSpec"):
        Supervisor.start(SupFlags(), ["child4"])  # type: ignore[list-item]


# -------------------------------------------------------------------------- sup_stop group


def test_sup_stop_infinity() -> None:
    probe = Probe()
    sup = probe.start_sup(FLAGS)
    cpid1 = sup.start_child(spec("child1", shutdown="infinity", type="supervisor"))
    cpid2 = sup.start_child(spec("child2", shutdown="infinity"))
    probe.link(cpid1)
    probe.link(cpid2)
    assert probe.stop_sup(sup) == "shutdown"
    assert probe.wait_exit(cpid1) == "shutdown"
    assert probe.wait_exit(cpid2) == "shutdown"


def test_sup_stop_timeout(caplog: pytest.LogCaptureFixture, gate) -> None:
    caplog.set_level(logging.INFO, logger="supervisors.report")
    rec = Recorder()
    probe = Probe()
    sup = probe.start_sup(FLAGS)
    cpid1 = sup.start_child(spec("child1", shutdown=5.0, recorder=rec))
    cpid2 = sup.start_child(spec("child2", shutdown=0.2, recorder=rec))
    probe.link(cpid1)
    probe.link(cpid2)
    cpid2.tell(("block", gate()))  # the SUITE's {sleep, 200000}
    rec.wait_for(lambda: "blocked" in rec.events("child2"), "child2 to block")

    assert probe.stop_sup(sup) == "shutdown"
    assert probe.wait_exit(cpid1) == "shutdown"
    assert probe.wait_exit(cpid2) == "killed"
    [error] = reports(caplog, "shutdown_error")
    assert (error["child"], error["reason"]) == ("child2", "killed")
    assert [r["child"] for r in reports(caplog, "shutdown")] == ["child1"]


def test_sup_stop_timeout_dynamic(gate) -> None:
    rec = Recorder()
    probe = Probe()
    sup = probe.start_sup(
        # One deadline for all dynamic children: ample for the healthy one to stop.
        SIMPLE,
        [spec("child", restart="temporary", shutdown=1.0, recorder=rec)],
    )
    cpid1 = sup.start_child([])
    cpid2 = sup.start_child([])
    probe.link(cpid1)
    probe.link(cpid2)
    cpid2.tell(("block", gate()))
    rec.wait_for(lambda: "blocked" in rec.events("child"), "a child to block")
    assert probe.stop_sup(sup) == "shutdown"
    assert probe.wait_exit(cpid1) == "shutdown"
    assert probe.wait_exit(cpid2) == "killed"


def test_sup_stop_brutal_kill() -> None:
    rec = Recorder()
    probe = Probe()
    sup = probe.start_sup(FLAGS)
    cpid1 = sup.start_child(spec("child1", shutdown=5.0, recorder=rec))
    cpid2 = sup.start_child(spec("child2", shutdown="brutal_kill", recorder=rec))
    probe.link(cpid1)
    probe.link(cpid2)
    assert probe.stop_sup(sup) == "shutdown"
    assert probe.wait_exit(cpid1) == "shutdown"
    assert probe.wait_exit(cpid2) == "killed"
    assert "stop" in rec.events("child1")
    assert "stop" not in rec.events("child2"), "a killed child's on_stop does not run"


def test_sup_stop_brutal_kill_dynamic() -> None:
    probe = Probe()
    sup = probe.start_sup(SIMPLE, [spec("child", restart="temporary", shutdown="brutal_kill")])
    cpids = [sup.start_child([]) for _ in range(10)]
    for cpid in cpids:
        probe.link(cpid)
    assert probe.stop_sup(sup) == "shutdown"
    for cpid in cpids:
        assert probe.wait_exit(cpid) == "killed"


def test_sup_stop_race(gate) -> None:
    """Children end on their own, with their own reasons, while the supervisor is busy
    stopping a slow sibling: the supervisor finishes its shutdown and restarts nobody."""
    rec = Recorder()
    probe = Probe()
    sup = probe.start_sup(FLAGS)
    cpid_a = sup.start_child(spec("child_a", restart="temporary", shutdown=5.0, recorder=rec))
    racers = {}
    for restart in ("temporary", "transient", "permanent"):
        for reason in ("normal", "shutdown", ("shutdown", "test"), Died("other")):
            child_id = (restart, repr(reason))
            ref = sup.start_child(spec(child_id, restart=restart, recorder=rec))
            racers[child_id] = (ref, reason)
    # Stopped first (last started), and slow to stop: it holds the supervisor in its shutdown.
    z_gate = gate()
    cpid_z = sup.start_child(
        spec("child_z", restart="temporary", shutdown=5.0, recorder=rec, stop_gate=z_gate)
    )
    for ref in [cpid_a, cpid_z] + [ref for ref, _ in racers.values()]:
        probe.link(ref)

    probe.send_exit(sup.ref, "shutdown")
    rec.wait_for(lambda: "stop" in rec.events("child_z"), "child_z to start stopping")
    for ref, reason in racers.values():
        ref.tell(("exit", reason))
    for ref, reason in racers.values():
        assert probe.wait_exit(ref) == reason
    z_gate.set()
    assert probe.wait_exit(sup.ref) == "shutdown"
    assert probe.wait_exit(cpid_z) == "shutdown"
    assert probe.wait_exit(cpid_a) == "shutdown"
    for child_id in racers:
        assert rec.count(child_id, "start") == 1, f"{child_id} was restarted"


def test_sup_stop_non_shutdown_exit_dynamic(gate) -> None:
    """simple_one_for_one shuts down cleanly while its children end with reasons of their own
    (they are busy when the shutdown signal arrives, and then exit themselves)."""
    for restart in ("temporary", "transient", "permanent"):
        rec = Recorder()
        probe = Probe()
        sup = probe.start_sup(SIMPLE, [spec("child", restart=restart, recorder=rec)])
        children = []
        for reason in ("normal", "shutdown", ("shutdown", "test"), Died("other")):
            ref = sup.start_child([])
            probe.link(ref)
            release = gate()
            ref.tell(("block", release, reason))
            children.append((ref, reason, release))
        rec.wait_for(lambda rec=rec: rec.names("blocked") == ["child"] * 4, "all children to block")
        probe.send_exit(sup.ref, "shutdown")
        for _, _, release in children:
            release.set()
        assert probe.wait_exit(sup.ref) == "shutdown"
        for ref, reason, _ in children:
            assert probe.wait_exit(ref) == reason
        assert rec.names("start") == ["child"] * 4, f"{restart}: nobody is restarted"


# ------------------------------------------------------------------------------ child_adm


def test_child_adm() -> None:
    probe = Probe()
    child = spec("child1")
    sup = start_sup(FLAGS, [child])
    [info] = sup.which_children()
    cpid = info.ref
    assert info == ChildInfo("child1", cpid, "worker")
    assert sup.counts() == [1, 1, 0, 1]
    probe.link(cpid)

    # Start of an already running process.
    with pytest.raises(AlreadyStarted) as raised:
        sup.start_child(child)
    assert raised.value.ref is cpid

    # Termination.
    with pytest.raises(NotFound):
        sup.terminate_child("hej")
    sup.terminate_child("child1")
    assert probe.wait_exit(cpid) == "shutdown"
    assert sup.which_children() == [ChildInfo("child1", None, "worker")]
    assert sup.counts() == [1, 0, 0, 1]
    sup.terminate_child("child1")  # like deleting something that does not exist: fine

    # Start of an existing but not running child.
    with pytest.raises(AlreadyPresent):
        sup.start_child(child)

    # Restart.
    cpid2 = sup.restart_child("child1")
    assert is_ref(cpid2) and cpid2 is not cpid
    assert sup.which_children() == [ChildInfo("child1", cpid2, "worker")]
    assert sup.counts() == [1, 1, 0, 1]
    with pytest.raises(Running):
        sup.restart_child("child1")
    with pytest.raises(NotFound):
        sup.restart_child("child2")

    # Deletion.
    with pytest.raises(Running):
        sup.delete_child("child1")
    with pytest.raises(NotFound):
        sup.delete_child("hej")
    sup.terminate_child("child1")
    sup.delete_child("child1")
    with pytest.raises(NotFound):
        sup.restart_child("child1")
    assert sup.which_children() == []
    assert sup.counts() == [0, 0, 0, 0]

    # Start.
    cpid3 = sup.start_child(child)
    assert sup.which_children() == [ChildInfo("child1", cpid3, "worker")]
    assert sup.counts() == [1, 1, 0, 1]

    # Terminate by ref is only for simple_one_for_one.
    with pytest.raises(NotFound):
        sup.terminate_child(cpid3)
    assert sup.which_children() == [ChildInfo("child1", cpid3, "worker")]
    assert sup.ref.is_alive(), "API errors are replies; the supervisor keeps running"

    # The SUITE's calls to a supervisor that does not exist (noproc).
    sup.ref.stop()
    wait_dead(sup.ref)
    for call in ("which_children", "count_children"):
        with pytest.raises(ActorDeadError):
            getattr(sup, call)()
    with pytest.raises(ActorDeadError):
        sup.start_child(child)


def test_child_adm_simple() -> None:
    sup = start_sup(SIMPLE, [spec("child")])
    assert sup.which_children() == []
    assert sup.counts() == [1, 0, 0, 0]

    cpid1 = sup.start_child([])
    assert sup.which_children() == [ChildInfo(None, cpid1, "worker")]
    assert sup.counts() == [1, 1, 0, 1]
    cpid2 = sup.start_child([])
    children = sup.which_children()
    assert len(children) == 2
    assert ChildInfo(None, cpid1, "worker") in children
    assert ChildInfo(None, cpid2, "worker") in children
    assert sup.counts() == [1, 2, 0, 2]

    # Termination.
    with pytest.raises(SimpleOneForOne):
        sup.terminate_child("child1")
    assert sup.counts() == [1, 2, 0, 2]
    sup.terminate_child(cpid1)
    assert sup.which_children() == [ChildInfo(None, cpid2, "worker")]
    assert sup.counts() == [1, 1, 0, 1]
    assert not cpid1.is_alive()
    # Terminating a process that no longer exists is fine.
    sup.terminate_child(cpid1)
    assert sup.counts() == [1, 1, 0, 1]
    # Terminating a live process that is not a child of this supervisor is not.
    outsider = Worker.start("outsider")
    with pytest.raises(NotFound):
        sup.terminate_child(outsider)
    assert outsider.is_alive()

    with pytest.raises(SimpleOneForOne):
        sup.restart_child("child1")
    with pytest.raises(SimpleOneForOne):
        sup.delete_child("child1")
    with pytest.raises(InvalidChildSpec):
        sup.start_child(spec("not_extra_args"))


def test_child_specs() -> None:
    sup = start_sup(FLAGS)
    with pytest.raises(InvalidChildSpec):
        sup.start_child("hej")

    # Bad child specs are refused where they are written.
    with pytest.raises(TypeError):
        ChildSpec("child", "mfa")  # not a Process class, triple or callable
    with pytest.raises(TypeError):
        ChildSpec("child", dict)  # a class, but not a Process
    with pytest.raises(TypeError):
        ChildSpec("child", (Worker, "a", {}))
    with pytest.raises(ValueError, match="restart"):
        ChildSpec("child", Worker, restart="prmanent")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="shutdown"):
        ChildSpec("child", Worker, shutdown=-10)
    with pytest.raises(ValueError, match="shutdown"):
        ChildSpec("child", Worker, shutdown="forever")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="type"):
        ChildSpec("child", Worker, type="wrker")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="significant"):
        ChildSpec("child", Worker, significant="maybe")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="hashable"):
        ChildSpec(["child"], Worker)

    # Every good combination is accepted, started and stopped.
    for restart in ("permanent", "transient", "temporary"):
        for shutdown in (0, 1.0, "infinity", "brutal_kill"):
            for kind in ("supervisor", "worker"):
                child = spec("child", restart=restart, shutdown=shutdown, type=kind)
                ref = sup.start_child(child)
                assert is_ref(ref)
                if restart != "temporary":
                    assert sup.get_childspec("child") == child
                sup.terminate_child("child")
                if restart != "temporary":
                    sup.delete_child("child")
                assert sup.which_children() == []
    assert sup.ref.is_alive()

    # Faulty specs in a supervisor's start.
    with pytest.raises(ValueError, match="duplicate"):
        Supervisor.start(FLAGS, [spec("child"), spec("child")])
    # simple_one_for_one needs exactly one child spec.
    with pytest.raises(ValueError, match="exactly one"):
        Supervisor.start(SIMPLE, [])
    with pytest.raises(ValueError, match="exactly one"):
        Supervisor.start(SIMPLE, [spec("c1"), spec("c2")])


def test_sup_flags() -> None:
    with pytest.raises(ValueError, match="strategy"):
        SupFlags("none_for_one")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="intensity"):
        SupFlags(intensity="infinity")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="intensity"):
        SupFlags(intensity=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="intensity"):
        SupFlags(intensity=-1)
    for period in (0, -1, float("inf"), "infinity"):
        with pytest.raises(ValueError, match="period"):
            SupFlags(period=period)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="auto_shutdown"):
        SupFlags(auto_shutdown="sometimes")  # type: ignore[arg-type]
    # Flags other than a SupFlags.
    with pytest.raises(TypeError, match="SupFlags"):
        Supervisor.start(("one_for_one", 2), [])  # type: ignore[arg-type]
    # Defaults are OTP's.
    assert SupFlags() == SupFlags("one_for_one", 1, 5.0, "never")
    sup = start_sup(SupFlags(intensity=0, period=0.5))
    assert sup.counts() == [0, 0, 0, 0]


# ------------------------------------------------------------------------- count_children


@pytest.mark.parametrize("kind", ["worker", "supervisor"])
def test_count_children(kind: str) -> None:
    """count_children and count_children_supervisor (OTP uses 1000 + 1000)."""
    n = 300
    probe = Probe()
    shutdown = "infinity" if kind == "supervisor" else 1.0
    sup = start_sup(SIMPLE, [spec("child", restart="temporary", shutdown=shutdown, type=kind)])
    for _ in range(n):
        sup.start_child([])
    children = sup.which_children()
    counts = sup.counts()
    for _ in range(n):
        sup.start_child([])
    counts2 = sup.counts()
    children2 = sup.which_children()
    assert len(children) == n
    in_kind = [1, n, n, 0] if kind == "supervisor" else [1, n, 0, n]
    assert counts == in_kind
    assert len(children2) == 2 * n
    assert counts2 == ([1, 2 * n, 2 * n, 0] if kind == "supervisor" else [1, 2 * n, 0, 2 * n])
    assert sup.which_children() == children2
    assert all(info.type == kind and info.id is None for info in children2)

    for info in children2:
        assert probe.terminate(info.ref, "kill") == "killed"
    assert sup.counts() == [1, 0, 0, 0]


def test_count_restarting_children() -> None:
    probe = Probe()
    sup = probe.start_sup(
        SupFlags("simple_one_for_one", 20, 10),
        [spec("child", restart="permanent", shutdown="brutal_kill")],
    )
    c1, c2, c3 = Control(), Control(), Control()
    assert sup.counts() == [1, 0, 0, 0]
    ch1_1 = sup.start_child([c1])
    assert sup.counts() == [1, 1, 0, 1]
    ch1_2 = sup.start_child([c2])
    assert sup.counts() == [1, 2, 0, 2]
    ch1_3 = sup.start_child([c3])
    assert sup.counts() == [1, 3, 0, 3]

    for ref in (ch1_1, ch1_2, ch1_3):
        probe.terminate(ref, "abnormal")
    assert sup.counts() == [1, 3, 0, 3]
    ch2_1, ch2_2, ch2_3 = sup.refs()
    assert {ch2_1, ch2_2, ch2_3}.isdisjoint({ch1_1, ch1_2, ch1_3})

    # Make the restarts of two children fail; hold the first so that the test decides
    # what the supervisor handles next.
    c1.set(fail=True, hold=True)
    c2.set(fail=True)
    probe.terminate(ch2_1, "abnormal")
    c1.wait_waiting()
    probe.terminate(ch2_2, "abnormal")  # its Exit is queued behind the held restart
    counted = sup.future("count_children")  # ...and this behind that Exit
    c1.release()  # c1 fails: restarting; then c2 fails: restarting; then we are answered
    assert counted.get(timeout=10) == {"specs": 1, "active": 1, "supervisors": 0, "workers": 3}

    # Let the retries succeed.
    c2.set(fail=False)
    c1.set(fail=False, hold=False)
    wait_until(lambda: sup.counts() == [1, 3, 0, 3], "both children to restart")
    assert sup.ref.is_alive()

    sup.terminate_child(ch2_3)
    assert sup.counts() == [1, 2, 0, 2]
    ch3_1, ch3_2 = sup.refs()
    sup.terminate_child(ch3_1)
    assert sup.counts() == [1, 1, 0, 1]
    sup.terminate_child(ch3_2)
    assert sup.counts() == [1, 0, 0, 0]


# ------------------------------------------------------------------------- which_children


def test_which_children() -> None:
    sup = start_sup(SupFlags())
    assert sup.which_children() == []
    child1 = sup.start_child(spec("child1"))
    assert sup.which_children() == [ChildInfo("child1", child1, "worker")]
    child2 = sup.start_child(spec("child2"))
    assert sup.which_children() == [
        ChildInfo("child1", child1, "worker"),
        ChildInfo("child2", child2, "worker"),
    ]
    sup.terminate_child("child1")
    assert sup.which_children() == [
        ChildInfo("child1", None, "worker"),
        ChildInfo("child2", child2, "worker"),
    ]
    sup.delete_child("child1")
    assert sup.which_children() == [ChildInfo("child2", child2, "worker")]


def test_which_children_simple_one_for_one() -> None:
    sup = start_sup(SupFlags("simple_one_for_one"), [spec("child", restart="temporary")])
    assert sup.which_children() == []
    child1 = sup.start_child([])
    assert sup.which_children() == [ChildInfo(None, child1, "worker")]
    child2 = sup.start_child([])
    assert sup.which_children() == [
        ChildInfo(None, child1, "worker"),
        ChildInfo(None, child2, "worker"),
    ]
    sup.terminate_child(child1)
    assert sup.which_children() == [ChildInfo(None, child2, "worker")]


def test_get_childspec() -> None:
    child = spec("child1", restart="transient", shutdown="brutal_kill")
    sup = start_sup(SupFlags(), [child])
    assert sup.get_childspec("child1") == child
    sup.terminate_child("child1")
    assert sup.get_childspec("child1") == child, "a stopped child keeps its spec"
    sup.delete_child("child1")
    with pytest.raises(NotFound):
        sup.get_childspec("child1")


# ------------------------------------------------------------------ temporary children


@pytest.mark.one_kind  # the supervisor's bookkeeping; gc.collect() makes it slow
def test_do_not_save_start_parameters_for_temporary_children() -> None:
    """A supervisor keeps a child's start args only while it may restart the child."""

    def started_with_big(sup: Sup, *, simple: bool, child_id: str, restart: str):
        big = Big()
        ref = weakref.ref(big)
        if simple:
            child = sup.start_child([big])
        else:
            child = sup.start_child(spec(child_id, big, cls=Forgetful, restart=restart))
        del big
        sup.count_children()  # the supervisor's loop drops its hold on the last call
        gc.collect()
        return child, ref

    for restart in ("permanent", "transient", "temporary"):
        sup = start_sup(SIMPLE, [spec("child", cls=Forgetful, restart=restart)])
        child, big = started_with_big(sup, simple=True, child_id="", restart=restart)
        if restart == "temporary":
            assert big() is None, "temporary: extra args are not kept"
        else:
            assert big() is not None, f"{restart}: kept to restart the child"
        sup.terminate_child(child)
        sup.count_children()
        gc.collect()
        assert big() is None, f"{restart}: dropped with the child"
        sup.ref.stop()

    # Static children: a temporary child's spec (and its args) goes when the child ends; a
    # permanent or transient one stays until delete_child.
    probe = Probe()
    for strategy in ("one_for_one", "one_for_all", "rest_for_one"):
        sup = start_sup(SupFlags(strategy, 2, 3600))
        child, big = started_with_big(sup, simple=False, child_id="tmp", restart="temporary")
        probe.terminate(child, "normal")
        sup.count_children()  # handled after the child's Exit
        gc.collect()
        assert big() is None, f"{strategy}: temporary spec dropped"
        child, big = started_with_big(sup, simple=False, child_id="perm", restart="transient")
        sup.terminate_child("perm")
        gc.collect()
        assert big() is not None
        sup.delete_child("perm")
        sup.count_children()
        gc.collect()
        assert big() is None
        sup.ref.stop()


@pytest.mark.parametrize("strategy", ["one_for_one", "one_for_all", "rest_for_one"])
@pytest.mark.parametrize("how", ["kill", "normal", "abnormal", "supervisor"])
def test_do_not_save_child_specs_for_temporary_children(strategy: str, how: str) -> None:
    probe = Probe()
    sup = start_sup(SupFlags(strategy, 2, 3600))

    def terminate(child_id: str, ref) -> None:
        if how == "supervisor":
            sup.terminate_child(child_id)
        else:
            probe.terminate(ref, how)

    def restarted(child) -> None:
        ref = sup.start_child(child)
        terminate(child.id, ref)
        # Restarted by the supervisor (the Exit is ahead of this call in its mailbox).
        with pytest.raises(AlreadyStarted):
            sup.start_child(child)

    def already_present(child) -> None:
        ref = sup.start_child(child)
        terminate(child.id, ref)
        with pytest.raises(AlreadyPresent):
            sup.start_child(child)
        assert is_ref(sup.restart_child(child.id))

    permanent = spec("child1", restart="permanent")
    transient = spec("child2", restart="transient")
    temporary = spec("child3", restart="temporary")

    if how == "supervisor":
        already_present(permanent)
    else:
        restarted(permanent)
    if how in ("supervisor", "normal"):
        already_present(transient)
    else:
        restarted(transient)
    ref = sup.start_child(temporary)
    terminate("child3", ref)
    assert is_ref(sup.start_child(temporary)), "the temporary spec was not kept"
    assert sup.ref.is_alive()


def test_already_started_outside_supervisor() -> None:
    """OTP: the start function finds its registered name taken and returns
    {error, {already_started, Pid}}. Here the start callable raises AlreadyStarted naming the
    process that holds the name: start_child fails with that reason, the outside process is
    left alone (not linked, not adopted), and the supervisor keeps running without the child."""
    registry: dict[str, object] = {}
    outsider = Worker.start("outsider")
    registry["registered_name"] = outsider

    def start_registered() -> object:
        if "registered_name" in registry:
            raise AlreadyStarted("registered_name", registry["registered_name"])
        return Worker.start("registered")

    probe = Probe()
    sup = probe.start_sup(SupFlags())
    with pytest.raises(StartChildError) as raised:
        sup.start_child(ChildSpec("child", start_registered, restart="transient"))
    reason = raised.value.reason
    assert isinstance(reason, AlreadyStarted) and reason.ref is outsider
    assert sup.which_children() == []
    assert outsider.is_alive()
    assert probe.stop_sup(sup) == "shutdown"
    assert outsider.ask("ping", timeout=10) == "pong", "not linked to the supervisor"


# ------------------------------------------------------------------------------ scaling


def test_scale_start_stop_many_children() -> None:
    n = 1000
    sup = start_sup(FLAGS)
    refs = [sup.start_child(spec(i, shutdown=1.0)) for i in range(n)]
    assert sup.counts() == [n, n, 0, n]
    assert sup.ids() == list(range(n))
    for i in range(n):
        sup.terminate_child(i)
    assert sup.counts() == [n, 0, 0, n]
    assert not any(ref.is_alive() for ref in refs)


def test_simple_one_for_one_scale_many_temporary_children() -> None:
    n = 1000
    sup = start_sup(SIMPLE, [spec("child", restart="temporary", shutdown=1.0)])
    refs = [sup.start_child([]) for _ in range(n)]
    assert sup.counts() == [1, n, 0, n]
    for ref in refs:
        sup.terminate_child(ref)
    assert sup.which_children() == []
    assert sup.counts() == [1, 0, 0, 0]
    assert not any(ref.is_alive() for ref in refs)


# ------------------------------------------------------------------------- exit signals


def test_supervisor_ignores_exit_signals_from_non_children() -> None:
    """A supervisor traps exits: "shutdown" from a process that is neither its parent nor a
    child is only a message, as in OTP (handle_info for an unknown pid)."""
    probe = Probe()
    outsider = Probe()
    sup = probe.start_sup(FLAGS, [spec("child1")])
    outsider.send_exit(sup.ref, "shutdown")
    exit(sup.ref, "shutdown")  # from the test thread, outside any process
    assert sup.counts() == [1, 1, 0, 1]
    assert sup.ref.is_alive()
    assert probe.stop_sup(sup) == "shutdown"


def test_api_calls_during_stop_get_actor_dead_error(gate) -> None:
    rec = Recorder()
    probe = Probe()
    slow_gate = gate()
    sup = probe.start_sup(FLAGS, [spec("slow", stop_gate=slow_gate, recorder=rec)])
    probe.send_exit(sup.ref, "shutdown")
    rec.wait_for(lambda: "stop" in rec.events("slow"), "the child to start stopping")
    pending = sup.future("which_children")
    # Release: the supervisor finishes its shutdown; the queued call is refused.
    slow_gate.set()
    with pytest.raises(ActorDeadError):
        pending.get(timeout=10)
    assert probe.wait_exit(sup.ref) == "shutdown"


def test_stop_of_a_top_level_supervisor_stops_children_last_first() -> None:
    """ref.stop() on a supervisor terminates its children in reverse start order, each per its
    shutdown spec, before the supervisor ends (and before stop() returns)."""
    rec = Recorder()
    sup = start_sup(
        FLAGS,
        [
            spec("a", recorder=rec),
            spec("b", recorder=rec, shutdown="brutal_kill"),
            spec("c", recorder=rec),
        ],
    )
    refs = sup.refs()
    sup.ref.stop(block=True, timeout=10)
    assert exit_reason(sup.ref) == "normal"
    assert [exit_reason(ref) for ref in refs] == ["shutdown", "killed", "shutdown"]
    assert [name for name, ev in rec.items() if ev in ("stop", "kill")] == ["c", "b", "a"]


def test_killed_supervisor_takes_its_children_down() -> None:
    """A killed supervisor stops nobody itself, but its children die of the "killed" exit
    signal over their links, whether they trap exits or not."""
    rec = Recorder()
    probe = Probe()
    sup = start_sup(
        FLAGS, [spec("plain", recorder=rec), spec("trapping", trap_exit=True, recorder=rec)]
    )
    plain, trapping = sup.refs()
    watch_plain, watch_trapping = probe.monitor(plain), probe.monitor(trapping)
    exit(sup.ref, "kill")
    assert exit_reason(sup.ref) == "killed"
    assert probe.wait_down(watch_plain) == "killed"
    assert probe.wait_down(watch_trapping) == "killed"


def test_callable_start_is_adopted() -> None:
    """A start callable returns the ref of a Process it started unlinked: the supervisor links
    to it and becomes its parent, so it is restarted and stopped like any other child."""
    rec = Recorder()
    started = []

    def start_worker():
        ref = Worker.start("adopted", recorder=rec, trap_exit=True)
        started.append(ref)
        return ref

    probe = Probe()
    sup = probe.start_sup(FLAGS, [ChildSpec("adopted", start_worker)])
    first = sup.child("adopted")
    assert first is started[0]
    assert isinstance(probe.terminate(first, "abnormal"), Died)
    second = sup.child("adopted")
    assert second is started[1]
    sup.terminate_child("adopted")  # a trapping child obeys its adoptive parent's shutdown
    assert exit_reason(second) == "shutdown"
    assert sup.start_child(ChildSpec("ignored", lambda: None)) is None
    assert sup.child("ignored") is None

    plain = []

    def start_plain_pykka_actor():
        plain.append(pykka.ThreadingActor.start())
        return plain[-1]

    with pytest.raises(StartChildError) as raised:
        sup.start_child(ChildSpec("bad", start_plain_pykka_actor))
    assert isinstance(raised.value.reason, TypeError)
    plain[0].stop()
    assert sup.ref.is_alive()
