"""OTP supervisor_SUITE, ported: restart types, strategies, intensity and escalation.

`probe.terminate(ref, how)` is the SUITE's terminate/4: it monitors the child, ends it ("normal"
tells it "stop", "abnormal" tells it "die", anything else is an exit signal) and waits for the
Down. A child's links fire before its monitors, so when that returns the supervisor already has
the child's Exit in its mailbox, ahead of the test's next API call: no sleeps are needed to
see a restart. Restarts that must fail, or must wait, use a held `Control`.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest

from supervisors import (
    AlreadyPresent,
    ChildInfo,
    ChildSpec,
    Restarting,
    SimpleOneForOne,
    Supervisor,
    SupFlags,
    exit_reason,
)
from tests.supervisors.helpers import (
    TIMEOUT,
    Control,
    Died,
    Probe,
    Recorder,
    Sup,
    is_ref,
    reports,
    spec,
    start_sup,
    wait_until,
    worker_ref,
)

pytestmark = pytest.mark.usefixtures("process_kind")

FLAGS = SupFlags("one_for_one", 2, 3600)
SIMPLE = SupFlags("simple_one_for_one", 2, 3600)


def assert_all_dead(*refs) -> None:
    for ref in refs:
        wait_until(lambda r=ref: not r.is_alive(), f"{ref} to be dead")


# ---------------------------------------------- normal / shutdown / abnormal termination

TERMINATIONS = [
    ("permanent", "normal", True),
    ("transient", "normal", False),
    ("temporary", "normal", False),
    ("permanent", "shutdown", True),
    ("transient", "shutdown", False),
    ("temporary", "shutdown", False),
    ("permanent", ("shutdown", "some_info"), True),
    ("transient", ("shutdown", "some_info"), False),
    ("temporary", ("shutdown", "some_info"), False),
    ("permanent", "abnormal", True),
    ("transient", "abnormal", True),
    ("temporary", "abnormal", False),
    ("permanent", "kill", True),
    ("transient", "kill", True),
    ("temporary", "kill", False),
]


@pytest.mark.parametrize(
    ("restart", "how", "restarted"),
    TERMINATIONS,
    ids=[f"{r}_{h if isinstance(h, str) else 'shutdown_info'}" for r, h, _ in TERMINATIONS],
)
def test_termination(restart: str, how, restarted: bool, caplog: pytest.LogCaptureFixture) -> None:
    """permanent_normal, transient_normal, temporary_normal, permanent_shutdown,
    transient_shutdown, temporary_shutdown, permanent_abnormal, transient_abnormal,
    temporary_abnormal (and the same for "kill")."""
    caplog.set_level(logging.INFO, logger="supervisors.report")
    probe = Probe()
    sup = start_sup(FLAGS)
    child1 = spec("child1", restart=restart)
    cpid1 = sup.start_child(child1)
    reason = probe.terminate(cpid1, how)
    if how == "abnormal":
        assert isinstance(reason, Died)
    else:
        assert reason == ("killed" if how == "kill" else how)

    children = sup.which_children()
    if restarted:
        [info] = children
        assert info.id == "child1" and is_ref(info.ref)
        assert info.ref is not cpid1 and info.ref.is_alive()
        assert sup.counts() == [1, 1, 0, 1]
        assert [r["child"] for r in reports(caplog, "child_restarted")] == ["child1"]
    elif restart == "transient":
        assert children == [ChildInfo("child1", None, "worker")]
        assert sup.counts() == [1, 0, 0, 1]
        # The spec is kept: restart_child brings it back.
        assert is_ref(sup.restart_child("child1"))
    else:
        assert children == []
        assert sup.counts() == [0, 0, 0, 0]
        assert is_ref(sup.start_child(child1)), "a temporary child's spec is gone"
    if not restarted:
        assert reports(caplog, "child_restarted") == []

    started = reports(caplog, "child_started")
    assert started[0]["child"] == "child1" and started[0]["restart"] == restart
    crashed = reports(caplog, "child_crashed")
    if how in ("abnormal", "kill"):
        [report] = crashed
        assert report["child"] == "child1"
        assert report["reason"] == reason
    else:
        assert crashed == []


def test_transient_shutdown_both_forms() -> None:
    """transient_shutdown as the SUITE writes it: shutdown, restart_child, {shutdown, Term}."""
    probe = Probe()
    sup = start_sup(FLAGS)
    cpid1 = sup.start_child(spec("child1", restart="transient"))
    probe.terminate(cpid1, "shutdown")
    assert sup.which_children() == [ChildInfo("child1", None, "worker")]
    cpid2 = sup.restart_child("child1")
    probe.terminate(cpid2, ("shutdown", "some_info"))
    assert sup.which_children() == [ChildInfo("child1", None, "worker")]
    assert sup.counts() == [1, 0, 0, 1]


# ----------------------------------------------------------------------- one_for_one


def test_one_for_one(caplog: pytest.LogCaptureFixture) -> None:
    probe = Probe()
    sup = probe.start_sup(FLAGS)
    cpid1 = sup.start_child(spec("child1"))
    cpid2 = sup.start_child(spec("child2"))

    probe.terminate(cpid1, "abnormal")
    refs = sup.refs()
    assert len(refs) == 2 and refs[1] is cpid2 and refs[0] is not cpid1
    assert sup.counts() == [2, 2, 0, 2]

    # Restart frequency: intensity 2, so the third crash is one too many.
    probe.terminate(cpid2, "abnormal")
    pid4, pid5 = sup.refs()
    probe.terminate(pid4, "abnormal")
    assert probe.wait_exit(sup.ref) == "shutdown"
    assert_all_dead(pid4, pid5)
    [gave_up] = reports(caplog, "reached_max_restart_intensity")
    assert (gave_up["child"], gave_up["intensity"], gave_up["period"]) == ("child1", 2, 3600.0)
    assert isinstance(gave_up["reason"], Died)


def test_one_for_one_escalation() -> None:
    probe = Probe()
    sup = probe.start_sup(SupFlags("one_for_one", 4, 3600))
    control = Control()
    cpid1 = sup.start_child(spec("child1", control=control))
    cpid2 = sup.start_child(spec("child2"))
    probe.link(cpid2)
    control.set(fail=True)

    probe.terminate(cpid1, "abnormal")
    assert probe.wait_exit(sup.ref) == "shutdown"
    assert probe.wait_exit(cpid2) == "shutdown"
    assert control.failures == 4, "every retry counts against the intensity"


# ----------------------------------------------------------------------- one_for_all


def test_one_for_all() -> None:
    probe = Probe()
    sup = probe.start_sup(SupFlags("one_for_all", 2, 3600))
    cpid1 = sup.start_child(spec("child1"))
    cpid2 = sup.start_child(spec("child2"))
    probe.link(cpid2)

    probe.terminate(cpid1, "abnormal")
    assert probe.wait_exit(cpid2) == "shutdown"
    refs = sup.refs()
    assert len(refs) == 2
    assert not {cpid1, cpid2} & set(refs), "no old child is still there"
    assert all(ref.is_alive() for ref in refs)
    assert sup.counts() == [2, 2, 0, 2]

    pid3 = sup.refs()[0]
    probe.terminate(pid3, "abnormal")
    pid4 = sup.refs()[0]
    probe.terminate(pid4, "abnormal")
    assert probe.wait_exit(sup.ref) == "shutdown"


def test_one_for_all_escalation() -> None:
    probe = Probe()
    sup = probe.start_sup(SupFlags("one_for_all", 4, 3600))
    control = Control()
    cpid1 = sup.start_child(spec("child1"))
    cpid2 = sup.start_child(spec("child2", control=control))
    probe.link(cpid2)
    control.set(fail=True)

    probe.terminate(cpid1, "abnormal")
    assert probe.wait_exit(cpid2) == "shutdown"
    assert probe.wait_exit(sup.ref) == "shutdown"


def test_one_for_all_other_child_fails_restart() -> None:
    """When a sibling fails to start during a one_for_all restart, the children already
    restarted are terminated again, and the whole group is retried."""
    rec = Recorder()
    c1, c2 = Control(), Control()
    probe = Probe()
    sup = probe.start_sup(
        SupFlags("one_for_all", 3, 3600),
        [spec("child1", control=c1, recorder=rec), spec("child2", control=c2, recorder=rec)],
    )
    child1_pid = sup.child("child1")
    c1.set(hold=True)
    c2.set(hold=True)

    probe.send_exit(child1_pid, "die")
    c1.wait_attempts(2)  # child1 restarting (held)
    c1.release()
    c2.wait_attempts(2)  # child1 is up again; child2's restart is held
    child1_pid2 = worker_ref(rec, "child1")
    monitor_id = probe.monitor(child1_pid2)
    c2.set(fail_times=1)
    c2.release()  # child2 fails to start
    assert probe.wait_down(monitor_id) == "shutdown", "the restarted child1 is terminated"

    # Let the restart complete.
    c1.wait_attempts(3)
    c1.release()
    c2.wait_attempts(3)
    c2.release()
    wait_until(lambda: all(is_ref(r) and r.is_alive() for r in sup.refs()), "both children up")
    assert sup.refs() == [worker_ref(rec, "child1"), worker_ref(rec, "child2")]
    assert (c1.attempts, c2.attempts) == (3, 3)
    assert probe.stop_sup(sup) == "shutdown"


# ---------------------------------------------------------------------- rest_for_one


def test_rest_for_one() -> None:
    probe = Probe()
    sup = probe.start_sup(SupFlags("rest_for_one", 2, 3600))
    cpid1 = sup.start_child(spec("child1"))
    probe.link(cpid1)
    cpid2 = sup.start_child(spec("child2"))
    cpid3 = sup.start_child(spec("child3"))
    probe.link(cpid3)
    assert sup.counts() == [3, 3, 0, 3]

    probe.terminate(cpid2, "abnormal")
    assert probe.wait_exit(cpid3) == "shutdown"
    refs = sup.refs()
    assert len(refs) == 3
    assert refs[0] is cpid1, "the child before the dead one is untouched"
    assert not {cpid2, cpid3} & set(refs)
    assert sup.counts() == [3, 3, 0, 3]
    assert cpid1.is_alive()

    probe.terminate(sup.child("child3"), "abnormal")
    probe.terminate(sup.child("child2"), "abnormal")
    assert probe.wait_exit(sup.ref) == "shutdown"
    assert probe.wait_exit(cpid1) == "shutdown"


def test_rest_for_one_escalation() -> None:
    probe = Probe()
    sup = probe.start_sup(SupFlags("rest_for_one", 4, 3600))
    control = Control()
    cpid1 = sup.start_child(spec("child1"))
    cpid2 = sup.start_child(spec("child2", control=control))
    probe.link(cpid2)
    control.set(fail=True)

    probe.terminate(cpid1, "abnormal")
    assert probe.wait_exit(cpid2) == "shutdown"
    assert probe.wait_exit(sup.ref) == "shutdown"


def test_rest_for_one_other_child_fails_restart() -> None:
    """A sibling after the dead child fails to restart: only it is retried, the child before
    it (already restarted) is left running."""
    rec = Recorder()
    c1, c2 = Control(), Control()
    probe = Probe()
    sup = probe.start_sup(
        SupFlags("rest_for_one", 3, 3600),
        [spec("child1", control=c1, recorder=rec), spec("child2", control=c2, recorder=rec)],
    )
    c1.set(hold=True)
    c2.set(hold=True)
    probe.send_exit(sup.child("child1"), "die")
    c1.wait_attempts(2)
    c1.release()
    c2.wait_attempts(2)
    child1_pid2 = worker_ref(rec, "child1")
    c2.set(fail_times=1)
    c2.release()
    c2.wait_attempts(3)  # child2 alone is retried
    c2.release()
    wait_until(lambda: all(is_ref(r) and r.is_alive() for r in sup.refs()), "both children up")
    assert sup.refs() == [child1_pid2, worker_ref(rec, "child2")]
    assert c1.attempts == 2, "child1 was not restarted again"
    assert child1_pid2.is_alive()
    c1.set(hold=False)
    c2.set(hold=False)
    assert probe.stop_sup(sup) == "shutdown"


# ---------------------------------------------------------------- simple_one_for_one


def test_simple_one_for_one() -> None:
    probe = Probe()
    sup = probe.start_sup(SIMPLE, [spec("child")])
    cpid1 = sup.start_child([])
    cpid2 = sup.start_child([])

    probe.terminate(cpid1, "abnormal")
    refs = sup.refs()
    assert len(refs) == 2 and cpid2 in refs and cpid1 not in refs
    assert sup.counts() == [1, 2, 0, 2]

    probe.terminate(cpid2, "abnormal")
    pid4 = sup.refs()[0]
    probe.terminate(pid4, "abnormal")
    assert probe.wait_exit(sup.ref) == "shutdown"


def test_simple_one_for_one_shutdown() -> None:
    """Dynamic children are stopped in parallel: each child's on_stop waits at a barrier for
    all the others, which only passes if they are all stopping at once."""
    n = 3
    barrier = threading.Barrier(n)
    rec = Recorder()
    probe = Probe()
    sup = probe.start_sup(
        SIMPLE, [spec("child", shutdown=10.0, stop_barrier=barrier, recorder=rec)]
    )
    children = [sup.start_child([]) for _ in range(n)]
    for ref in children:
        probe.link(ref)
    assert probe.stop_sup(sup) == "shutdown"
    for ref in children:
        assert probe.wait_exit(ref) == "shutdown"
    assert rec.names("stopped") == ["child"] * n
    assert not barrier.broken


def test_simple_one_for_one_extra() -> None:
    """start_child's extra args are appended to the template's, and kept for restarts."""
    probe = Probe()
    sup = probe.start_sup(SIMPLE, [spec("child", "template_arg")])
    cpid1 = sup.start_child(["extra_1"])
    cpid2 = sup.start_child(["extra_2", 2])
    probe.link(cpid2)
    assert cpid1.proxy().get_extra().get(timeout=TIMEOUT) == ("template_arg", "extra_1")
    assert cpid2.proxy().get_extra().get(timeout=TIMEOUT) == ("template_arg", "extra_2", 2)

    probe.terminate(cpid1, "abnormal")
    refs = sup.refs()
    assert len(refs) == 2 and cpid2 in refs
    restarted = next(ref for ref in refs if ref is not cpid2)
    assert restarted.proxy().get_extra().get(timeout=TIMEOUT) == ("template_arg", "extra_1")
    assert sup.counts() == [1, 2, 0, 2]

    probe.terminate(cpid2, "abnormal")
    probe.terminate(sup.refs()[0], "abnormal")
    assert probe.wait_exit(sup.ref) == "shutdown"


def test_simple_one_for_one_escalation() -> None:
    probe = Probe()
    sup = probe.start_sup(SupFlags("simple_one_for_one", 4, 3600), [spec("child")])
    control = Control()
    cpid1 = sup.start_child([control])
    probe.link(cpid1)
    cpid2 = sup.start_child([])
    probe.link(cpid2)
    control.set(fail=True)

    probe.terminate(cpid1, "abnormal")
    assert probe.wait_exit(sup.ref) == "shutdown"
    assert probe.wait_exit(cpid2) == "shutdown"
    assert control.failures == 4


@pytest.mark.parametrize("restart", ["transient", "permanent"])
def test_simple_one_for_one_restart_ignore(restart: str) -> None:
    """A dynamic child whose restart returns ignore is removed; the supervisor lives on."""
    probe = Probe()
    sup = probe.start_sup(
        SupFlags("simple_one_for_one", 10, 3600), [spec("child", restart=restart)]
    )
    control = Control()
    child1 = sup.start_child([control])
    assert sup.which_children() == [ChildInfo(None, child1, "worker")]
    probe.terminate(child1, "kill")
    [info] = sup.which_children()
    child2 = info.ref
    assert is_ref(child2) and child2 is not child1
    control.set(ignore=True)
    probe.terminate(child2, "kill")
    assert sup.which_children() == []
    assert sup.counts() == [1, 0, 0, 0]
    assert probe.stop_sup(sup) == "shutdown"


# ------------------------------------------------------------------ multiple_restarts


@pytest.mark.slow
@pytest.mark.one_kind
def test_multiple_restarts() -> None:
    """Intensity 1 in 1 s: crashes 1.2 s apart are survived. OTP rounds restart times to whole
    seconds (and its SUITE waits 2.1 s); the contract keeps float seconds."""
    probe = Probe()
    sup = probe.start_sup(SupFlags("one_for_one", 1, 1))
    cpid1 = sup.start_child(spec("child1", shutdown="brutal_kill"))
    probe.terminate(cpid1, "abnormal")
    for _ in range(2):
        time.sleep(1.2)  # the subject of this test is time
        probe.terminate(sup.child("child1"), "abnormal")
    assert sup.ref.is_alive()
    assert is_ref(sup.child("child1"))
    # ...and two crashes without the pause are one too many.
    probe.terminate(sup.child("child1"), "abnormal")
    assert probe.wait_exit(sup.ref) == "shutdown"


# ------------------------------------------------------------------------ child_unlink


@pytest.mark.parametrize("trap_exit", [False, True])
def test_child_unlink(trap_exit: bool) -> None:
    """A child that unlinks itself from its supervisor must not hang terminate_child: the
    supervisor waits for the child's end, not for an Exit over the link."""
    rec = Recorder()
    sup = start_sup(FLAGS)
    naughty = sup.start_child(
        spec("naughty_child", shutdown=5.0, unlink_parent=True, trap_exit=trap_exit, recorder=rec)
    )
    assert naughty.proxy().links.get(timeout=TIMEOUT) == []
    sup.terminate_child("naughty_child")
    assert exit_reason(naughty) == "shutdown"
    assert "stop" in rec.events("naughty_child")
    assert sup.which_children() == [ChildInfo("naughty_child", None, "worker")]


# -------------------------------------------------------------------------------- tree


def test_tree() -> None:
    probe = Probe()
    c3 = Control()
    child1 = spec("child1")
    child2 = spec("child2")
    child3 = spec("child3", control=c3)
    child4 = spec("child4")

    def sup_spec(child_id: str, children: list, restart: str = "permanent") -> ChildSpec:
        args = (SupFlags("one_for_one", 4, 3600), children)
        return ChildSpec(child_id, (Supervisor, args, {}), restart=restart, type="supervisor")

    top = probe.start_sup(SupFlags("one_for_all", 4, 3600))
    sup1 = Sup(top.start_child(sup_spec("supchild1", [child1, child2])))
    sup2 = Sup(top.start_child(sup_spec("supchild2", [])))
    top.start_child(sup_spec("supchild3", [], restart="transient"))
    top.terminate_child("supchild3")
    assert top.counts() == [3, 2, 3, 0]

    cpid1, cpid2 = sup1.refs()
    assert sup1.counts() == [2, 2, 0, 2]
    assert sup2.counts() == [0, 0, 0, 0]

    # Dynamic children of sup2.
    cpid3 = sup2.start_child(child3)
    cpid4 = sup2.start_child(child4)
    assert sup1.counts() == [2, 2, 0, 2]
    assert sup2.counts() == [2, 2, 0, 2]

    # Only the process that dies is restarted.
    probe.terminate(cpid4, "abnormal")
    assert sup1.refs() == [cpid1, cpid2]
    assert sup1.counts() == [2, 2, 0, 2]
    refs2 = sup2.refs()
    assert refs2[0] is cpid3 and refs2[1] is not cpid4 and refs2[1].is_alive()
    assert sup2.counts() == [2, 2, 0, 2]

    # child3 cannot be restarted: sup2 gives up, and the top one_for_all restarts the whole
    # tree, but not sup2's dynamic children.
    c3.set(fail=True)
    watch_sup2 = probe.monitor(sup2.ref)
    probe.terminate(cpid3, "abnormal")
    assert probe.wait_down(watch_sup2) == "shutdown"

    infos = top.which_children()
    assert [i.id for i in infos] == ["supchild1", "supchild2", "supchild3"]
    assert all(is_ref(i.ref) and i.ref.is_alive() for i in infos)
    assert infos[0].ref is not sup1.ref and infos[1].ref is not sup2.ref
    assert top.counts() == [3, 3, 3, 0]
    new1, new2, new3 = (Sup(i.ref) for i in infos)
    assert new1.ids() == ["child1", "child2"]
    assert new1.counts() == [2, 2, 0, 2]
    assert new2.which_children() == []
    assert new2.counts() == [0, 0, 0, 0]
    assert new3.which_children() == []
    assert new3.counts() == [0, 0, 0, 0]
    assert not cpid1.is_alive() and not cpid2.is_alive()
    assert probe.stop_sup(top) == "shutdown"


# ----------------------------------------------------------------- temporary_bystander


@pytest.mark.parametrize("strategy", ["one_for_all", "rest_for_one"])
def test_temporary_bystander(strategy: str) -> None:
    """A temporary child stopped because a sibling died is not restarted (its args are not
    kept); otherwise the supervisor would hit its limit and crash."""
    probe = Probe()
    sup = start_sup(SupFlags(strategy, 2, 300))
    cpid1 = sup.start_child(spec("child1"))
    cpid2 = sup.start_child(spec("child2", restart="temporary"))
    watch2 = probe.monitor(cpid2)
    probe.terminate(cpid1, "normal")
    assert probe.wait_down(watch2) == "shutdown"
    infos = sup.which_children()
    assert [i.id for i in infos] == ["child1"]
    assert infos[0].ref is not cpid1 and infos[0].ref.is_alive()
    assert sup.ref.is_alive()


# ---------------------------------------------------------------- hanging_restart_loop


def _queue_calls_while_held(sup: Sup, calls: list[tuple]) -> list:
    return [sup.future(name, *args) for name, *args in calls]


def _outcome(future):
    try:
        return future.get(timeout=TIMEOUT)
    except Exception as exc:
        return type(exc)


def test_hanging_restart_loop() -> None:
    """A child whose restart keeps failing shows as "restarting"; the API answers meanwhile,
    terminate_child stops the retries, and the supervisor's own shutdown still works."""
    probe = Probe()
    sup = probe.start_sup(SupFlags("one_for_one", 8, 10))
    control = Control()
    child1 = spec("child1", shutdown="brutal_kill", control=control)
    cpid1 = sup.start_child(child1)
    probe.link(cpid1)

    control.set(fail=True, hold=True)
    cpid1.tell("die")
    control.wait_attempts(2)  # the restart attempt is held: these calls queue behind it
    futures = _queue_calls_while_held(
        sup,
        [
            ("start_child", child1),
            ("restart_child", "child1"),
            ("delete_child", "child1"),
            ("which_children",),
            ("count_children",),
            ("terminate_child", "child1"),
            ("which_children",),
        ],
    )
    control.release()  # fails: restarting, and a retry is queued behind our calls
    outcomes = [_outcome(f) for f in futures]
    assert outcomes == [
        AlreadyPresent,
        Restarting,
        Restarting,
        [ChildInfo("child1", "restarting", "worker")],
        {"specs": 1, "active": 0, "supervisors": 0, "workers": 1},
        None,
        [ChildInfo("child1", None, "worker")],
    ]
    assert isinstance(probe.wait_exit(cpid1), Died)
    assert sup.which_children() == [ChildInfo("child1", None, "worker")]
    assert control.attempts == 2, "terminate_child stopped the retries"

    control.set(fail=False, hold=False)
    cpid2 = sup.restart_child("child1")
    probe.link(cpid2)
    control.set(fail=True, hold=True)
    cpid2.tell("die")
    control.wait_attempts(4)
    probe.send_exit(sup.ref, "shutdown")  # queued behind the held attempt
    control.release()
    assert probe.wait_exit(sup.ref) == "shutdown"
    assert isinstance(probe.wait_exit(cpid2), Died)
    assert control.attempts == 4


def test_hanging_restart_loop_rest_for_one() -> None:
    probe = Probe()
    sup = probe.start_sup(SupFlags("rest_for_one", 8, 10))
    control = Control()
    child2 = spec("child2", shutdown="brutal_kill", control=control)
    cpid1 = sup.start_child(spec("child1", shutdown="brutal_kill"))
    cpid2 = sup.start_child(child2)
    probe.link(cpid2)
    sup.start_child(spec("child3", shutdown="brutal_kill"))

    control.set(fail=True, hold=True)
    cpid2.tell("die")
    control.wait_attempts(2)
    futures = _queue_calls_while_held(
        sup,
        [
            ("start_child", child2),
            ("restart_child", "child2"),
            ("delete_child", "child2"),
            ("which_children",),
            ("count_children",),
            ("terminate_child", "child2"),
            ("which_children",),
        ],
    )
    control.release()
    outcomes = [_outcome(f) for f in futures]
    assert outcomes == [
        AlreadyPresent,
        Restarting,
        Restarting,
        [
            ChildInfo("child1", cpid1, "worker"),
            ChildInfo("child2", "restarting", "worker"),
            ChildInfo("child3", None, "worker"),
        ],
        {"specs": 3, "active": 1, "supervisors": 0, "workers": 3},
        None,
        [
            ChildInfo("child1", cpid1, "worker"),
            ChildInfo("child2", None, "worker"),
            ChildInfo("child3", None, "worker"),
        ],
    ]
    assert isinstance(probe.wait_exit(cpid2), Died)

    control.set(fail=False, hold=False)
    cpid22 = sup.restart_child("child2")
    probe.link(cpid22)
    control.set(fail=True, hold=True)
    cpid22.tell("die")
    control.wait_attempts(4)
    probe.send_exit(sup.ref, "shutdown")
    control.release()
    assert probe.wait_exit(sup.ref) == "shutdown"
    assert isinstance(probe.wait_exit(cpid22), Died)
    assert not cpid1.is_alive()


def test_hanging_restart_loop_simple() -> None:
    probe = Probe()
    sup = probe.start_sup(
        SupFlags("simple_one_for_one", 8, 10), [spec("child1", shutdown="brutal_kill")]
    )
    control = Control()
    cpid1 = sup.start_child([control])
    probe.link(cpid1)

    control.set(fail=True, hold=True)
    cpid1.tell("die")
    control.wait_attempts(2)
    futures = _queue_calls_while_held(
        sup,
        [
            ("restart_child", "child1"),
            ("delete_child", "child1"),
            ("which_children",),
            ("count_children",),
            ("terminate_child", cpid1),  # the restarting child, by the ref it last had
            ("which_children",),
        ],
    )
    control.release()
    outcomes = [_outcome(f) for f in futures]
    assert outcomes == [
        SimpleOneForOne,
        SimpleOneForOne,
        [ChildInfo(None, "restarting", "worker")],
        {"specs": 1, "active": 0, "supervisors": 0, "workers": 1},
        None,
        [],
    ]
    assert isinstance(probe.wait_exit(cpid1), Died)
    assert control.attempts == 2

    control.set(fail=False, hold=False)
    cpid2 = sup.start_child([control])
    probe.link(cpid2)
    control.set(fail=True, hold=True)
    cpid2.tell("die")
    control.wait_attempts(4)
    probe.send_exit(sup.ref, "shutdown")
    control.release()
    assert probe.wait_exit(sup.ref) == "shutdown"
    assert isinstance(probe.wait_exit(cpid2), Died)


# ------------------------------------------------------------------- order_of_children


def test_order_of_children() -> None:
    """Children start in the order given and stop in the opposite order; rest_for_one stops
    the later children last-first and restarts them in order."""
    ids = ["ch7", "ch3", "ch10", "ch2", "ch5"]  # not sorted, on purpose
    rec = Recorder()
    probe = Probe()
    sup = probe.start_sup(SupFlags("rest_for_one", 2, 3600), [spec(i, recorder=rec) for i in ids])
    assert rec.names("start") == ids
    assert sup.ids() == ids
    first = sup.refs()

    probe.terminate(sup.child("ch10"), "abnormal")
    second = sup.refs()
    assert rec.names("stop") == ["ch5", "ch2"]
    assert rec.names("start") == [*ids, "ch10", "ch2", "ch5"]
    assert second[:2] == first[:2]
    assert all(a is not b for a, b in zip(first[2:], second[2:], strict=True))

    assert probe.stop_sup(sup) == "shutdown"
    assert rec.names("stop") == ["ch5", "ch2", "ch5", "ch2", "ch10", "ch3", "ch7"]


def test_reaching_max_intensity_stops_children_last_first(caplog: pytest.LogCaptureFixture) -> None:
    """Intensity 0: the first restart is one too many. The supervisor stops the other
    children in reverse start order and exits with "shutdown"."""
    rec = Recorder()
    probe = Probe()
    sup = probe.start_sup(SupFlags("one_for_one", 0, 5), [spec(i, recorder=rec) for i in "abc"])
    probe.terminate(sup.child("a"), "abnormal")
    assert probe.wait_exit(sup.ref) == "shutdown"
    assert rec.names("stop") == ["c", "b"]
    assert rec.count("a", "start") == 1, "no restart at all"
    [gave_up] = reports(caplog, "reached_max_restart_intensity")
    assert (gave_up["child"], gave_up["intensity"]) == ("a", 0)
