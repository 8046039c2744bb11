"""OTP supervisor_SUITE, ported: significant children and auto_shutdown.

A supervisor with auto_shutdown shuts itself down (reason "shutdown") when significant
children end *on their own*: any of them (any_significant) or the last active one
(all_significant). A transient child "ends on its own" only with a clean reason (otherwise it is
restarted); a temporary child with any reason. Terminations the supervisor causes itself
(terminate_child, a sibling's restart) never trigger it.

"The supervisor did not shut down" is checked without waiting: the child's Down reaches the
Probe after its Exit reached the supervisor, so an API call made after the Down is answered only
once the supervisor has handled that Exit; it would fail with ActorDeadError had the supervisor
decided to stop.
"""

from __future__ import annotations

import pytest

from supervisors import ChildSpec, InvalidChildSpec, Supervisor, SupFlags
from tests.supervisors.helpers import Probe, Sup, is_ref, spec

pytestmark = pytest.mark.usefixtures("process_kind")

MODES = ["never", "any_significant", "all_significant"]


def assert_still_running(sup: Sup) -> None:
    sup.count_children()  # answered => the supervisor has handled the Exit and lives on
    assert sup.ref.is_alive()


# ----------------------------------------------------------------- non-significant children


@pytest.mark.parametrize("auto_shutdown", MODES)
def test_nonsignificant_temporary(auto_shutdown: str) -> None:
    probe = Probe()
    sup = probe.start_sup(SupFlags(auto_shutdown=auto_shutdown))
    child1 = spec("child1", restart="temporary", significant=False)

    # Terminated via the supervisor.
    pid = sup.start_child(child1)
    watch = probe.monitor(pid)
    sup.terminate_child("child1")
    assert probe.wait_down(watch) == "shutdown"
    assert_still_running(sup)

    for how in ("kill", "abnormal", "normal"):
        pid = sup.start_child(child1)
        probe.terminate(pid, how)
        assert_still_running(sup)
        assert sup.which_children() == []

    assert probe.stop_sup(sup) == "shutdown"


@pytest.mark.parametrize("auto_shutdown", MODES)
def test_nonsignificant_transient(auto_shutdown: str) -> None:
    probe = Probe()
    sup = probe.start_sup(SupFlags(intensity=5, auto_shutdown=auto_shutdown))
    pid1 = sup.start_child(spec("child1", restart="transient", significant=False))
    watch = probe.monitor(pid1)
    sup.terminate_child("child1")
    assert probe.wait_down(watch) == "shutdown"
    assert_still_running(sup)

    # Killed, or abnormal: restarted, no shutdown.
    pid2 = sup.restart_child("child1")
    probe.terminate(pid2, "kill")
    assert_still_running(sup)
    pid3 = sup.child("child1")
    assert is_ref(pid3) and pid3 is not pid2
    probe.terminate(pid3, "abnormal")
    assert_still_running(sup)

    # Normal: not restarted, and still no shutdown.
    pid4 = sup.child("child1")
    assert is_ref(pid4) and pid4 is not pid3
    probe.terminate(pid4, "normal")
    assert_still_running(sup)
    assert sup.child("child1") is None

    assert probe.stop_sup(sup) == "shutdown"


# --------------------------------------------------------------------- significant children


def _three(sup: Sup, restart: str) -> tuple:
    sup.start_child(spec("child1", restart=restart, significant=True))
    sup.start_child(spec("child2", restart=restart, significant=True))
    sup.start_child(spec("child3", restart=restart, significant=False))
    return tuple(sup.refs())


def test_significant_temporary() -> None:
    # any_significant: terminating one via the supervisor does not trigger auto-shutdown.
    probe = Probe()
    sup1 = probe.start_sup(SupFlags(intensity=5, auto_shutdown="any_significant"))
    p1, p2, p3 = _three(sup1, "temporary")
    for ref in (p1, p2, p3):
        probe.link(ref)
    sup1.terminate_child("child1")
    assert probe.wait_exit(p1) == "shutdown"
    assert_still_running(sup1)
    assert p2.is_alive() and p3.is_alive()

    # ...but killing a temporary significant child does.
    sup1.start_child(spec("child1", restart="temporary", significant=True))
    k1 = sup1.child("child1")
    probe.link(k1)
    probe.send_exit(k1, "kill")
    assert probe.wait_exit(sup1.ref) == "shutdown"
    assert probe.wait_exit(p2) == "shutdown"
    assert probe.wait_exit(p3) == "shutdown"

    # Abnormal and normal exits of a temporary significant child trigger it too.
    for how in ("abnormal", "normal"):
        sup = probe.start_sup(SupFlags(intensity=5, auto_shutdown="any_significant"))
        q1, q2, q3 = _three(sup, "temporary")
        for ref in (q2, q3):
            probe.link(ref)
        probe.terminate(q1, how)
        assert probe.wait_exit(sup.ref) == "shutdown"
        assert probe.wait_exit(q2) == "shutdown"
        assert probe.wait_exit(q3) == "shutdown"

    # all_significant: only the last significant child's exit shuts it down.
    sup4 = probe.start_sup(SupFlags(intensity=5, auto_shutdown="all_significant"))
    r1, r2, r3 = _three(sup4, "temporary")
    probe.link(r3)
    probe.terminate(r1, "normal")
    assert_still_running(sup4)
    assert r2.is_alive() and r3.is_alive()
    probe.terminate(r2, "normal")
    assert probe.wait_exit(sup4.ref) == "shutdown"
    assert probe.wait_exit(r3) == "shutdown"


def test_significant_transient() -> None:
    probe = Probe()
    sup1 = probe.start_sup(SupFlags(intensity=5, auto_shutdown="any_significant"))
    p1, p2, p3 = _three(sup1, "transient")
    sup1.terminate_child("child1")
    assert_still_running(sup1)
    assert not p1.is_alive()
    sup1.restart_child("child1")

    # Killed, or abnormal: restarted, no auto-shutdown.
    for how in ("kill", "abnormal"):
        old = sup1.child("child1")
        probe.terminate(old, how)
        assert_still_running(sup1)
        new = sup1.child("child1")
        assert is_ref(new) and new is not old
        assert p2.is_alive() and p3.is_alive()

    # Normal: the transient significant child ended on its own -> auto-shutdown.
    probe.link(p2)
    probe.link(p3)
    probe.terminate(sup1.child("child1"), "normal")
    assert probe.wait_exit(sup1.ref) == "shutdown"
    assert probe.wait_exit(p2) == "shutdown"
    assert probe.wait_exit(p3) == "shutdown"

    # all_significant.
    sup2 = probe.start_sup(SupFlags(intensity=5, auto_shutdown="all_significant"))
    r1, r2, r3 = _three(sup2, "transient")
    probe.link(r3)
    probe.terminate(r1, "normal")
    assert_still_running(sup2)
    assert r2.is_alive() and r3.is_alive()
    probe.terminate(r2, ("shutdown", "done"))
    assert probe.wait_exit(sup2.ref) == "shutdown"
    assert probe.wait_exit(r3) == "shutdown"


def test_significant_child_terminated_by_api_is_not_active_for_all_significant() -> None:
    """all_significant counts *active* significant children: one stopped by terminate_child
    does not keep the supervisor up when the last running one ends."""
    probe = Probe()
    sup = probe.start_sup(SupFlags(intensity=5, auto_shutdown="all_significant"))
    _, p2, _ = _three(sup, "transient")
    sup.terminate_child("child1")
    assert_still_running(sup)
    probe.terminate(p2, "normal")
    assert probe.wait_exit(sup.ref) == "shutdown"


def test_significant_simple() -> None:
    """auto_shutdown is not allowed with simple_one_for_one (bad combination)."""
    for mode in ("any_significant", "all_significant"):
        with pytest.raises(ValueError, match="bad combination"):
            SupFlags("simple_one_for_one", auto_shutdown=mode)  # type: ignore[arg-type]
    probe = Probe()
    sup = probe.start_sup(SupFlags("simple_one_for_one", auto_shutdown="never"), [spec("child1")])
    assert probe.stop_sup(sup) == "shutdown"


@pytest.mark.parametrize("strategy", ["one_for_one", "one_for_all", "rest_for_one"])
@pytest.mark.parametrize("auto_shutdown", ["any_significant", "all_significant"])
def test_significant_bystander(strategy: str, auto_shutdown: str) -> None:
    """Significant children stopped because a sibling died do not trigger auto-shutdown."""
    probe = Probe()
    sup = probe.start_sup(SupFlags(strategy, 5, auto_shutdown=auto_shutdown))  # type: ignore[arg-type]
    sup.start_child(spec("child1", restart="transient", significant=True))
    sup.start_child(spec("child2", restart="transient", significant=False))
    sup.start_child(spec("child3", restart="transient", significant=True))
    p1, p2, p3 = sup.refs()
    watches = {name: probe.monitor(ref) for name, ref in (("1", p1), ("3", p3))}

    probe.terminate(p2, "kill")
    assert_still_running(sup)
    stopped = {"one_for_one": [], "one_for_all": ["1", "3"], "rest_for_one": ["3"]}[strategy]
    for name in stopped:
        assert probe.wait_down(watches[name]) == "shutdown"
    for name, ref in (("1", p1), ("3", p3)):
        assert ref.is_alive() == (name not in stopped)
    assert all(is_ref(r) and r.is_alive() for r in sup.refs())
    assert probe.stop_sup(sup) == "shutdown"


def test_significant_escalation() -> None:
    child1 = spec("child1", restart="transient", significant=True)

    def child_sup(significant: bool) -> ChildSpec:
        return ChildSpec(
            "sup1",
            (Supervisor, (SupFlags(auto_shutdown="any_significant"), []), {}),
            restart="transient",
            type="supervisor",
            significant=significant,
        )

    # A has B as a significant child, B has worker C as a significant child: C's normal exit
    # shuts B down, and B's shutdown in turn shuts A down.
    probe = Probe()
    sup_a = probe.start_sup(SupFlags(auto_shutdown="any_significant"))
    sup_b = Sup(sup_a.start_child(child_sup(True)))
    pid_c = sup_b.start_child(child1)
    probe.link(sup_b.ref)
    probe.terminate(pid_c, "normal")
    assert probe.wait_exit(sup_b.ref) == "shutdown"
    assert probe.wait_exit(sup_a.ref) == "shutdown"

    # With B not significant, A lives on (and does not restart the transient B).
    sup_a2 = probe.start_sup(SupFlags(auto_shutdown="any_significant"))
    sup_b2 = Sup(sup_a2.start_child(child_sup(False)))
    pid_c2 = sup_b2.start_child(child1)
    probe.link(sup_b2.ref)
    probe.terminate(pid_c2, "normal")
    assert probe.wait_exit(sup_b2.ref) == "shutdown"
    assert_still_running(sup_a2)
    assert sup_a2.child("sup1") is None
    assert probe.stop_sup(sup_a2) == "shutdown"


# ------------------------------------------------------------------------ bad combinations


def test_significant_permanent_is_a_bad_combination() -> None:
    with pytest.raises(ValueError, match="bad combination"):
        spec("child", restart="permanent", significant=True)


def test_significant_under_auto_shutdown_never_is_a_bad_combination() -> None:
    with pytest.raises(ValueError, match="bad combination"):
        Supervisor.start(SupFlags(), [spec("child", restart="transient", significant=True)])
    sup = Sup(Supervisor.start(SupFlags(auto_shutdown="never")))
    with pytest.raises(InvalidChildSpec, match="bad combination"):
        sup.start_child(spec("child", restart="transient", significant=True))
    assert sup.which_children() == []
    assert sup.ref.is_alive(), "an API error is a reply"
    sup.ref.stop()


def test_auto_shutdown_with_simple_one_for_one_is_a_bad_combination() -> None:
    for mode in ("any_significant", "all_significant"):
        with pytest.raises(ValueError, match="bad combination"):
            SupFlags("simple_one_for_one", auto_shutdown=mode)  # type: ignore[arg-type]
