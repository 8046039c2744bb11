"""Names and roles are verified, not believed (DESIGN): the node monitor's side, fed by hand.

Roles are facts (a core name cannot attach as ephemeral, nor the other way round), stale and
wrong-role membership messages are dropped and logged once, an executor never shrinks the
core on one member's word, and it follows the core's partition mode.
"""

from __future__ import annotations

from monitors.effects import Log
from monitors.node_monitor import PartitionHandling, PauseApp, ResumeApp
from monitors.node_monitor.ephemeral import core_from_lists
from tests.node_monitor.helpers import CREATION, A, B, C, of, peer, sends
from tests.node_monitor.test_ephemeral import X, attached, core_record, eph, up


def warnings(out: list) -> list[Log]:
    return [e for e in of(out, Log) if e.level >= 30]


# ---------------------------------------------------------------- the core side


def test_a_core_name_cannot_attach_as_ephemeral_nor_an_ephemeral_one_join_as_core() -> None:
    c, _ = attached()
    why = c.role_conflict(C, "ephemeral")
    assert "c@h is a core member" in why and "rabbitry cluster forget c@h" in why
    assert "x@h is an ephemeral member" in c.role_conflict(X, "core")
    assert c.role_conflict(C, "core") == c.role_conflict(X, "ephemeral") == ""
    assert c.role_conflict("new@h", "core") == ""  # a node joining is no conflict
    c.left_cluster(X, 2.0)  # forgotten by hand: the name is free again
    assert c.role_conflict(X, "core") == ""


def test_a_leave_from_another_incarnation_is_dropped_and_said_once() -> None:
    c, _ = attached()
    stale = {"t": "left_cluster", "c": CREATION[X] - 1, "node": X, "role": "ephemeral"}
    out = c.receive(X, stale, 2.0)
    assert c.status()["ephemeral"] == [X] and not sends(out, "ephemeral_left")
    assert len(warnings(out)) == 1
    assert warnings(c.receive(X, stale, 2.1)) == []  # once
    out = c.receive(X, {**stale, "c": CREATION[X]}, 2.2)  # the current incarnation's leave
    assert c.status()["ephemeral"] == [] and sends(out, "ephemeral_left")


def test_an_ephemeral_member_cannot_speak_as_core() -> None:
    c, _ = attached()
    forged = {"t": "left_cluster", "c": CREATION[X], "node": X, "role": "core"}
    out = c.receive(X, forged, 2.0)
    assert c.status()["ephemeral"] == [X] and len(warnings(out)) == 1


def test_every_membership_message_says_the_senders_role_and_creation() -> None:
    _c, out = attached()
    for send in sends(out):
        assert send.msg["role"] == "core" and send.msg["c"] == CREATION[A]
    e = eph()
    for send in sends(up(e, A, B)):
        assert send.msg["role"] == "ephemeral" and send.msg["c"] == CREATION[X]


def test_a_bad_role_is_a_bad_message() -> None:
    c, _ = attached()
    out = c.receive(B, {"t": "keepalive", "c": CREATION[B], "role": "boss"}, 2.0)
    assert any("role" in str(e) for e in warnings(out))


# ---------------------------------------------------------------- the ephemeral side


def test_one_members_list_never_shrinks_the_core() -> None:
    lists = {A: frozenset({A, B, C}), B: frozenset({A, B, C}), C: frozenset({A, B, C})}
    assert core_from_lists({**lists, A: frozenset({A})}, set()) == {A, B, C}  # A left, alone
    # ...the others agree it left: it goes, and its own list counts no more
    agreed = {A: frozenset({A, "z@h"}), B: frozenset({B, C}), C: frozenset({B, C})}
    assert core_from_lists(agreed, set()) == {B, C}
    assert core_from_lists({}, {A, B}) == {A, B}  # the seeds before any list came


def test_an_executor_cut_off_stays_paused_when_a_core_member_leaves_then_moves() -> None:
    e = eph()
    up(e, A, B, C)
    assert not e.paused
    e.nodedown(B, "net_tick_timeout", 1.0)
    e.nodedown(C, "net_tick_timeout", 1.0)
    assert e.paused
    out = e.receive(A, core_record(A, members=(A,)), 2.0)  # A ran `rabbitry cluster leave`
    assert e.paused and not of(out, ResumeApp) and e.core_members() == {A, B, C}
    out = e.nodeup(B, CREATION[B], 3.0) + e.receive(B, core_record(B, members=(B, C)), 3.0)
    out += e.nodeup(C, CREATION[C], 3.0) + e.receive(C, core_record(C, members=(B, C)), 3.0)
    assert e.core_members() == {B, C} and not e.paused and of(out, ResumeApp)


def test_an_executor_follows_the_cores_partition_mode_and_says_so_once() -> None:
    e = eph("ignore")
    record = {**core_record(A), "mode": "pause_minority"}
    e.nodeup(A, CREATION[A], 0.5)
    out = e.receive(A, record, 0.5)
    assert e.config == PartitionHandling("pause_minority")
    assert e.paused  # 1 of 3 under the core's pause_minority (ignore would run)
    assert [w for w in warnings(out) if "differs from the core" in w.text]
    e.nodeup(B, CREATION[B], 0.6)
    out = e.receive(B, {**core_record(B), "mode": "pause_minority"}, 0.6)
    assert not e.paused and not [w for w in warnings(out) if "differs" in w.text]


def test_an_executor_following_a_member_that_left_restarts_with_the_rest() -> None:
    e = eph("autoheal")
    up(e, A, B, C)
    e.app_started(0.6)
    assert not e.paused
    e.receive(B, core_record(B, members=(B, C)), 1.0)
    out = e.receive(C, core_record(C, members=(B, C)), 1.0)  # A (followed) left the cluster
    assert e.core_members() == {B, C}
    assert e.paused and of(out, PauseApp)
    out = e.app_stopped(1.1)
    assert not e.paused and of(out, ResumeApp)


def test_a_core_member_with_another_mode_is_reported() -> None:
    c, _ = attached()  # a runs pause_minority
    out = c.receive(B, {**peer(B), "role": "core", "mode": "ignore"}, 2.0)
    assert [e for e in of(out, Log) if e.level >= 40 and "another partition_handling" in e.text]
    assert c.partition_modes() == {A: "pause_minority", B: "ignore"}
    again = c.receive(B, {**peer(B), "t": "announce", "role": "core", "mode": "ignore"}, 2.1)
    assert not [e for e in of(again, Log) if "another partition_handling" in e.text]  # once
