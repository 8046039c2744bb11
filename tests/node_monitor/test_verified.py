"""Names and roles are verified, not believed (DESIGN): the node monitor's side, fed by hand.

Roles are facts (a core name cannot attach as ephemeral, nor the other way round), stale and
wrong-role membership messages are dropped and logged once, an executor never shrinks the
core on one member's word, and it follows the core's partition mode.
"""

from __future__ import annotations

from monitors.effects import Connect, Log
from monitors.node_monitor import PartitionHandling, PauseApp, ResumeApp
from monitors.node_monitor.ephemeral import core_from_lists
from tests.node_monitor.helpers import CREATION, A, B, C, D, connect, core, of, peer, sends
from tests.node_monitor.test_ephemeral import X, attached, core_record, eph, eph_record, up


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


def test_a_core_name_speaking_as_ephemeral_does_not_count_as_that_member() -> None:
    """A role flip the dist layer let through (tests/sim/adversarial.py found that the link
    counted): C is dead, a process under its name with a newer creation connects and says it is
    ephemeral. A, cut off from B, must not count it towards a majority."""
    c = core(mode="pause_minority")
    c.start(0.0)
    connect(c, B, C)
    c.nodedown(C, "connection_closed", 1.0)
    c.nodedown(B, "net_tick_timeout", 1.5)
    assert c.paused
    c.nodeup(C, CREATION[C] + 7, 2.0)  # the impostor's link: one latency before it speaks
    flipped = {**peer(C), "c": CREATION[C] + 7, "creation": CREATION[C] + 7, "role": "ephemeral"}
    out = c.receive(C, flipped, 2.001)
    assert C not in c._connected() and c.paused and not of(out, ResumeApp)
    assert [e for e in of(out, Log) if e.level >= 40 and "says it is ephemeral" in e.text]
    out = c.timer("decision_hold", 2.5) + c.timer("pause_check", 3.0)
    assert c.paused and not of(out, ResumeApp)
    c.nodedown(C, "connection_closed", 4.0)  # it goes; the real C comes back and counts
    connect(c, C, now=5.0)
    assert not c.paused


def test_a_joining_node_tells_each_member_when_it_connects() -> None:
    """`rabbitry cluster join b@h` on d@h reaches only b@h (the one it is connected to):
    the others hear it joined on their nodeup, until they greet d@h as a member."""
    d = core(D, members=(D,))
    d.start(0.0)
    d.nodeup(B, CREATION[B], 0.5)
    for m in (A, B, C):
        d.joined_cluster(m, True, 1.0)
    out = d.joined_cluster(D, True, 1.0)
    assert [s.node for s in sends(out, "joined_cluster")] == [B]
    out = d.nodeup(A, CREATION[A], 1.1)
    told = [s.msg["t"] for s in sends(out, to=A)]
    assert told.index("joined_cluster") < told.index("node_up")
    d.receive(A, peer(A), 1.2)  # A counts us: it is told no more
    assert not sends(d.nodeup(A, CREATION[A], 2.0), "joined_cluster")
    a = core(A, members=(A, B, C))
    a.start(0.0)
    a.nodeup(D, CREATION[D], 1.1)
    a.receive(D, sends(out, "joined_cluster", A)[0].msg, 1.1)
    assert D in a.status()["all"]
    assert sends(a.receive(D, peer(D), 1.1), "announce", D)  # now answered as a member


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


def test_the_first_lists_to_reach_a_fresh_executor_shrink_nothing() -> None:
    """Found by tests/sim/adversarial.py: C left (it lists itself alone) and a fresh executor
    with seeds A, B, C heard B, then C, while A was still silent. C's word dropped B, then A,
    and the executor ran with C, outside the cluster. A member goes only when two others agree
    (every other that spoke): until A speaks, nothing goes; then C does."""
    seeds = {A, B, C}
    lists = {B: frozenset({A, B}), C: frozenset({C})}
    assert core_from_lists(lists, seeds) == {A, B, C}
    assert core_from_lists({C: frozenset({C})}, seeds) == {A, B, C}  # seeds count too
    assert core_from_lists({**lists, A: frozenset({A, B})}, seeds) == {A, B}
    # a core of two: the one other member is all there is to agree with (a forget)
    assert core_from_lists({A: frozenset({A})}, {A, B}) == {A}
    # each names only itself: which is the cluster? both stay
    assert core_from_lists({A: frozenset({A}), B: frozenset({B})}, set()) == {A, B}


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


def test_a_member_that_left_says_so_and_its_executors_move_to_the_rest() -> None:
    """Found by tests/sim/adversarial.py: A left and stays up as a cluster of one; an executor
    that reaches A and B, cut off from C (whose last list still names A), counted A and ran
    with 2 of 3 while the core is B and C. A's records say whom it left: its own word."""
    a = core(A, members=(A, B, C))
    a.start(0.0)
    connect(a, B, C)
    a.nodeup(X, CREATION[X], 1.0)
    a.receive(X, eph_record(), 1.0)
    out = a.left_cluster(A, 2.0)
    told = sends(out, "announce", X)[0].msg
    assert told["members"] == [A] and told["left"] == [B, C]
    e = eph()
    up(e, A, B, C)
    e.nodedown(C, "net_tick_timeout", 1.5)
    out = e.receive(A, {**core_record(A, members=(A,)), "left": [B, C]}, 2.0)
    assert e.core_members() == {B, C} and e.paused and of(out, PauseApp)  # 1 of 2 reached
    fresh = eph(seeds=(A,))  # seeded with A alone: it learns where the rest is
    up(fresh, A)
    out = fresh.receive(A, {**core_record(A, members=(A,)), "left": [B, C]}, 2.0)
    assert fresh.core_members() == {B, C} and fresh.paused
    assert {x.node for x in of(out, Connect)} == {B, C}


def test_a_newer_list_that_omits_a_member_does_not_make_it_unheard_of() -> None:
    """Found by tests/sim/adversarial.py: an executor knew C only from B's list; a forged B
    list naming only B replaced it, C vanished from the union, and one word had shrunk the
    core."""
    e = eph(seeds=(B,))
    up(e, B)
    assert e.core_members() == {A, B, C}
    e.receive(B, core_record(B, members=(B,)), 1.0)
    assert e.core_members() == {A, B, C}


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
