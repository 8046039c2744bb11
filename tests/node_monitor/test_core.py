"""NodeMonitorCore fed by hand: every message and event, and the effects it answers with."""

from __future__ import annotations

import logging
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from monitors.effects import CancelTimer, Connect, Disconnect, Log, SetTimer
from monitors.node_monitor import (
    ClusterStatus,
    NodeMonitorCore,
    Notify,
    PartitionHandling,
    PauseApp,
    SaveClusterStatus,
)
from tests.node_monitor.helpers import CREATION, A, B, C, D, connect, core, of, peer, sends, view


def test_status_has_exactly_the_cli_keys() -> None:
    c = core()
    c.start(0.0)
    assert list(c.status()) == [
        "node",
        "all",
        "disc",
        "running",
        "partitions",
        "paused",
        "alarms",
        "ephemeral",
    ]
    assert c.status() == {
        "node": A,
        "all": [A, B, C],
        "disc": [A, B, C],
        "running": [A],
        "partitions": [],
        "paused": False,
        "alarms": {},
        "ephemeral": [],
    }


def test_start_saves_connects_and_arms_timers() -> None:
    c = core()
    out = c.start(0.0)
    assert of(out, SaveClusterStatus) == [SaveClusterStatus((A, B, C), (A, B, C), (A,))]
    assert of(out, Connect) == [Connect(B), Connect(C)]
    timers = {t.key: t.after for t in of(out, SetTimer)}
    assert timers == {"ping_down_nodes": 1.0, "keepalive": 10.0}
    assert c.start(0.0) == [Log.warning("node monitor: start called twice; ignored")]


def test_the_core_adds_itself_to_the_members() -> None:
    c = NodeMonitorCore(A, 1, ClusterStatus(all=[B]), PartitionHandling())
    assert c.status()["all"] == [A, B]
    assert c.status()["disc"] == [A]  # a status without disc nodes makes this node one


def test_nodeup_sends_node_up_and_views() -> None:
    c = core()
    c.start(0.0)
    out = c.nodeup(B, CREATION[B], 1.0)
    (up,) = sends(out, "node_up", B)
    assert up.name == NodeMonitorCore.NAME
    assert up.msg == {
        "v": 1,  # versioned JSON (DESIGN rule 4); peers without "v" are still read
        "t": "node_up",
        "c": CREATION[A],
        "role": "core",  # every membership message says its sender's role and creation
        "node": A,
        "disc": True,
        "creation": CREATION[A],
        "running": True,
        "down": None,
        "alarms": [],
        "mode": "ignore",  # the core's partition_handling: members and executors compare it
    }
    (v,) = sends(out, "view", B)
    assert v.msg["views"][A]["seen"] == [A, B]


def test_node_up_adds_to_running_notifies_saves_and_announces() -> None:
    c = core()
    c.start(0.0)
    c.nodeup(B, CREATION[B], 1.0)
    out = c.receive(B, peer(B), 1.0)
    assert Notify("node_up", B) in out
    assert SaveClusterStatus((A, B, C), (A, B, C), (A, B)) in out
    (ann,) = sends(out, "announce", B)
    assert ann.msg["node"] == A and ann.msg["creation"] == CREATION[A]
    # the announce answering us does not answer again
    assert not sends(c.receive(B, peer(B) | {"t": "announce"}, 1.0), "announce")
    assert c.status()["running"] == [A, B]


def test_node_up_with_running_false_and_app_down() -> None:
    c = core()
    c.start(0.0)
    connect(c, B)
    out = c.receive(B, {"t": "app_down", "c": CREATION[B]}, 2.0)
    assert Notify("node_down", B) in out
    assert c.status()["running"] == [A]
    out = c.receive(B, peer(B, running=True), 3.0)
    assert Notify("node_up", B) in out
    out = c.receive(B, peer(B, running=False), 3.0)
    assert Notify("node_down", B) in out


def test_disc_flag_follows_node_up() -> None:
    c = core()
    c.start(0.0)
    c.nodeup(B, CREATION[B], 0.0)
    c.receive(B, peer(B, disc=False), 0.0)
    assert c.status()["disc"] == [A, C]


def test_nodedown_logs_reason_checks_partial_partition_and_notifies() -> None:
    c = core()
    c.start(0.0)
    connect(c, B, C)
    out = c.nodedown(B, "net_tick_timeout", 5.0)
    assert Log.warning("node down", node=B, reason="net_tick_timeout") in out
    assert Notify("node_down", B) in out
    (check,) = sends(out, "check_partial_partition")
    assert check.node == C
    assert check.msg == {
        "v": 1,
        "t": "check_partial_partition",
        "c": CREATION[A],
        "role": "core",
        "node": B,
        "reporter": A,
        "node_c": CREATION[B],
        "checker_c": CREATION[C],
        "reporter_c": CREATION[A],
    }
    assert SetTimer("ping_down_nodes", 1.0) in out
    assert c.status()["running"] == [A, C]


def test_no_check_for_a_node_whose_creation_we_never_learned() -> None:
    c = core()
    c.start(0.0)
    connect(c, C)
    c.nodeup(B, CREATION[B], 0.0)  # dist only, no node_up yet
    assert not sends(c.nodedown(B, "connection_closed", 1.0), "check_partial_partition")


def test_no_check_after_our_own_disconnect() -> None:
    c = core()
    c.start(0.0)
    connect(c, B, C)
    assert not sends(c.nodedown(B, "disconnect", 1.0), "check_partial_partition")


def test_checker_asks_the_down_node_then_confirms_to_the_reporter() -> None:
    c = core(C)  # we are the checker; A reports B down
    c.start(0.0)
    connect(c, A, B)
    check = {
        "t": "check_partial_partition",
        "c": CREATION[A],
        "node": B,
        "reporter": A,
        "node_c": CREATION[B],
        "checker_c": CREATION[C],
        "reporter_c": CREATION[A],
    }
    out = c.receive(A, check, 1.0)
    assert [s.node for s in sends(out, "creation_query")] == [B]
    # a second reporter about the same node waits for the same answer
    assert not sends(c.receive(A, check, 1.0), "creation_query")
    out = c.receive(B, {"t": "creation_reply", "c": CREATION[B], "creation": CREATION[B]}, 1.1)
    (pp,) = sends(out, "partial_partition", A)
    assert pp.msg | {"c": 0} == {
        "v": 1,
        "t": "partial_partition",
        "c": 0,
        "role": "core",
        "node": B,
        "proxy": C,
        "creation": CREATION[A],
    }


def test_checker_stays_silent_when_the_node_is_down_for_it_too() -> None:
    c = core(C)
    c.start(0.0)
    connect(c, A)
    check = {
        "t": "check_partial_partition",
        "c": CREATION[A],
        "node": B,
        "reporter": A,
        "node_c": CREATION[B],
        "checker_c": CREATION[C],
        "reporter_c": CREATION[A],
    }
    assert not sends(c.receive(A, check, 1.0))
    # a check addressed to an old incarnation of us is ignored
    connect(c, B)
    assert not sends(c.receive(A, check | {"checker_c": 1}, 1.0), "creation_query")
    # the down node restarted: its creation differs, nothing to confirm
    assert not sends(c.receive(A, check | {"node_c": 1}, 1.0), "creation_query")


def test_creation_mismatch_or_nodedown_gives_no_partial_partition() -> None:
    c = core(C)
    c.start(0.0)
    connect(c, A, B)
    check = {
        "t": "check_partial_partition",
        "c": CREATION[A],
        "node": B,
        "reporter": A,
        "node_c": CREATION[B],
        "checker_c": CREATION[C],
        "reporter_c": CREATION[A],
    }
    c.receive(A, check, 1.0)
    c.nodedown(B, "connection_closed", 1.05)
    assert not sends(
        c.receive(B, {"t": "creation_reply", "creation": 999}, 1.1), "partial_partition"
    )


def test_creation_query_is_answered() -> None:
    c = core()
    c.start(0.0)
    connect(c, B)
    (reply,) = sends(c.receive(B, {"t": "creation_query", "c": CREATION[B]}, 1.0), "creation_reply")
    assert reply.node == B and reply.msg["creation"] == CREATION[A]


def _partial(mode: str | PartitionHandling) -> tuple[NodeMonitorCore, list[Any]]:
    """A sees B down, C still sees B: A gets partial_partition(B, proxy C)."""
    c = core(A, mode=mode)
    c.start(0.0)
    connect(c, B, C)
    c.nodedown(B, "net_tick_timeout", 5.0)
    # C and B report what they see: C sees everyone, B sees only C
    c.receive(C, view(C, {A, B, C}, stamp=200), 5.0)
    c.receive(C, {"t": "view", "c": CREATION[C], "views": view(B, {B, C}, stamp=200)["views"]}, 5.0)
    msg = {
        "t": "partial_partition",
        "c": CREATION[C],
        "node": B,
        "proxy": C,
        "creation": CREATION[A],
    }
    return c, c.receive(C, msg, 5.1)


def test_partial_partition_in_ignore_mode_disconnects_only_across_parts() -> None:
    # parts: {A, C} (name order beats {B, C}) and {B}; A is in the best part with the proxy C,
    # so A cuts nothing (RabbitMQ would disconnect from C and leave A alone).
    c, out = _partial("ignore")
    assert Notify("partial_partition", B) in out
    assert not of(out, Disconnect)
    assert not c.paused


def test_partial_partition_cut_from_the_excluded_side() -> None:
    c = core(B, mode="ignore")  # B saw A down; C still sees A: B is outside {A, C}
    c.start(0.0)
    connect(c, A, C)
    c.nodedown(A, "net_tick_timeout", 5.0)
    c.receive(C, view(C, {A, B, C}, stamp=200), 5.0)
    c.receive(C, {"t": "view", "c": CREATION[C], "views": view(A, {A, C}, stamp=200)["views"]}, 5.0)
    msg = {
        "t": "partial_partition",
        "c": CREATION[C],
        "node": A,
        "proxy": C,
        "creation": CREATION[B],
    }
    out = c.receive(C, msg, 5.1)
    (ppd,) = sends(out, "partial_partition_disconnect", C)
    assert ppd.msg["node"] == B
    # C disconnects on hearing it; if it has not within disconnect_delay, we do
    assert not of(out, Disconnect) and SetTimer("disconnect:c@h", 0.1) in out
    assert of(c.timer("disconnect:c@h", 5.2), Disconnect) == [Disconnect(C, 1.0)]
    # the cut link is not pinged while the fault lasts
    out = c.nodedown(C, "disconnect", 5.2)
    assert Connect(C) not in c.timer("ping_down_nodes", 6.2)


def test_partial_partition_in_pause_minority_pauses_the_excluded_node_only() -> None:
    c, out = _partial("pause_minority")
    assert not c.paused and not of(out, Disconnect)  # A is in the majority clique {A, C}
    b = core(B, mode="pause_minority")
    b.start(0.0)
    connect(b, A, C)
    b.nodedown(A, "net_tick_timeout", 5.0)
    assert not b.paused  # a nodedown alone is not a partial partition: B reaches 2 of 3
    b.receive(C, view(C, {A, B, C}, stamp=200), 5.0)
    b.receive(C, {"t": "view", "c": CREATION[C], "views": view(A, {A, C}, stamp=200)["views"]}, 5.0)
    msg = {
        "t": "partial_partition",
        "c": CREATION[C],
        "node": A,
        "proxy": C,
        "creation": CREATION[B],
    }
    out = b.receive(C, msg, 5.1)
    assert not b.paused  # held for decision_hold: views in flight may change the answer
    out = b.timer("decision_hold", 5.35)
    assert b.paused and of(out, PauseApp) and not of(out, Disconnect)


def test_stale_partial_partition_is_ignored() -> None:
    c = core()
    c.start(0.0)
    connect(c, B, C)
    msg = {
        "t": "partial_partition",
        "c": CREATION[C],
        "node": B,
        "proxy": C,
        "creation": CREATION[A],
    }
    out = c.receive(C, msg, 1.0)  # B is up for us: the partial partition is over
    assert not of(out, Disconnect) and Notify("partial_partition", B) not in out
    c.nodedown(B, "net_tick_timeout", 2.0)
    out = c.receive(C, msg | {"creation": 5}, 2.1)  # meant for an old incarnation of us
    assert Notify("partial_partition", B) not in out


def test_partial_partition_disconnect_is_obeyed() -> None:
    c = core()
    c.start(0.0)
    connect(c, B, C)
    out = c.receive(C, {"t": "partial_partition_disconnect", "c": CREATION[C], "node": C}, 1.0)
    assert of(out, Disconnect) == [Disconnect(C, 1.0)]


def test_ping_timer_runs_only_while_a_member_is_down() -> None:
    c = core()
    c.start(0.0)
    out = c.timer("ping_down_nodes", 1.0)
    assert of(out, Connect) == [Connect(B), Connect(C)]
    assert SetTimer("ping_down_nodes", 1.0) in out
    out = connect(c, B, C, now=1.5)
    assert CancelTimer("ping_down_nodes") in out
    out = c.nodedown(C, "connection_closed", 2.0)
    assert SetTimer("ping_down_nodes", 1.0) in out
    assert of(c.timer("ping_down_nodes", 3.0), Connect) == [Connect(C)]


def test_keepalive_goes_to_alive_nodes_and_repairs_lost_state() -> None:
    c = core()
    c.start(0.0)
    connect(c, B, C)
    c.receive(C, {"t": "app_down", "c": CREATION[C]}, 1.0)
    out = c.timer("keepalive", 10.0)
    # RabbitMQ's ping_up_nodes: every alive (connected) member, paused or not
    assert [s.node for s in sends(out, "keepalive")] == [B, C]
    assert SetTimer("keepalive", 10.0) in out
    ka = sends(out, "keepalive", B)[0].msg
    assert ka["running"] is True and ka["node"] == A and A in ka["views"]
    # a bare keepalive is a no-op, and a keepalive never marks anyone down
    assert c.receive(B, {"t": "keepalive", "c": CREATION[B]}, 10.0) == []
    # C's node_up (running again) was lost: its keepalive repairs that, without a reply
    out = c.receive(C, {**peer(C), "t": "keepalive"}, 10.0)
    assert Notify("node_up", C) in out and not sends(out)
    assert c.status()["running"] == [A, B, C]
    bad = c.receive(C, {"t": "keepalive", "c": CREATION[C], "node": C}, 10.0)
    assert "peer record" in bad[0].fields["problem"]


def test_a_cancelled_or_unknown_timer_does_nothing() -> None:
    c = core()
    c.start(0.0)
    assert c.timer("pause_check", 1.0) == []
    assert c.timer("nonsense", 1.0) == []


def test_healthy_cluster_keeps_only_the_keepalive_timer() -> None:
    c = core(mode="pause_minority")
    armed: set[str] = set()
    for e in c.start(0.0) + connect(c, B, C, now=0.5):
        if isinstance(e, SetTimer):
            armed.add(e.key)
        elif isinstance(e, CancelTimer):
            armed.discard(e.key)
    armed.discard("decision_hold")  # connect() let the resume hold run out: it fired
    assert armed == {"keepalive"}


def test_partition_detected_when_both_saw_each_other_down() -> None:
    c = core()
    c.start(0.0)
    connect(c, B, C)
    c.nodedown(B, "net_tick_timeout", 5.0)
    c.nodeup(B, CREATION[B], 6.0)
    out = c.receive(B, peer(B, down=CREATION[A]), 6.0)
    assert Notify("partition", B) in out
    assert c.status()["partitions"] == [B]
    # our announce tells B that we saw it down too
    (ann,) = sends(out, "announce", B)
    assert ann.msg["down"] == CREATION[B]


def test_one_sided_down_is_not_a_partition() -> None:
    c = core()
    c.start(0.0)
    connect(c, B, C)
    c.nodedown(B, "net_tick_timeout", 5.0)
    c.nodeup(B, CREATION[B], 6.0)
    c.receive(B, peer(B, down=None), 6.0)
    assert c.status()["partitions"] == []
    # and a later announce with the other side's record no longer matches anything
    c.receive(B, peer(B, down=CREATION[A]) | {"t": "announce"}, 6.1)
    assert c.status()["partitions"] == []


def test_a_restarted_node_is_not_a_partition() -> None:
    c = core()
    c.start(0.0)
    connect(c, B, C)
    c.nodedown(B, "connection_closed", 5.0)
    c.nodeup(B, 555, 6.0)
    c.receive(B, peer(B, creation=555, c=555, down=CREATION[A]), 6.0)
    assert c.status()["partitions"] == []


def test_no_partition_recorded_while_our_app_was_stopped() -> None:
    c = core()
    c.start(0.0)
    connect(c, B, C)
    c.app_stopped(1.0)
    c.nodedown(B, "net_tick_timeout", 5.0)
    c.nodeup(B, CREATION[B], 6.0)
    c.receive(B, peer(B, down=CREATION[A]), 6.0)
    assert c.status()["partitions"] == []


def test_app_stopped_and_started_tell_the_peers() -> None:
    c = core()
    c.start(0.0)
    connect(c, B, C)
    out = c.app_stopped(1.0)
    assert [s.node for s in sends(out, "app_down")] == [B, C]
    assert c.status()["running"] == [B, C]
    out = c.app_started(2.0)
    assert [s.node for s in sends(out, "node_up")] == [B, C]
    assert all(s.msg["running"] for s in sends(out, "node_up"))
    assert c.status()["running"] == [A, B, C]


def test_alarms_are_broadcast_and_shown_cluster_wide() -> None:
    c = core()
    c.start(0.0)
    connect(c, B, C)
    out = c.set_alarm("memory", True, 1.0)
    assert [(s.node, s.msg["resources"]) for s in sends(out, "alarm")] == [
        (B, ["memory"]),
        (C, ["memory"]),
    ]
    assert c.set_alarm("memory", True, 1.0) == []  # no change, no message
    c.receive(B, {"t": "alarm", "c": CREATION[B], "resources": ["disk"]}, 1.0)
    assert c.status()["alarms"] == {A: ["memory"], B: ["disk"]}
    # a node_up carries alarms too; a node going down takes its alarms with it
    c.receive(C, peer(C, alarms=["disk", "memory"]), 1.0)
    assert c.status()["alarms"][C] == ["disk", "memory"]
    c.nodedown(B, "connection_closed", 2.0)
    assert B not in c.status()["alarms"]
    out = c.set_alarm("memory", False, 3.0)
    assert [s.msg["resources"] for s in sends(out, "alarm")] == [[]]
    assert c.status()["alarms"] == {C: ["disk", "memory"]}
    assert of(c.set_alarm("", True, 3.0), Log)[0].level == logging.WARNING
    # our alarms travel in node_up to a node that connects later
    c.set_alarm("disk", True, 4.0)
    (up,) = sends(c.nodeup(B, CREATION[B], 5.0), "node_up")
    assert up.msg["alarms"] == ["disk"]


def test_joined_and_left_cluster() -> None:
    c = core()
    c.start(0.0)
    out = c.joined_cluster(D, False, 1.0)
    assert Connect(D) in out
    assert SaveClusterStatus((A, B, C, D), (A, B, C), (A,)) in out
    # the new member's messages are accepted now; it answers our node_up with announce
    c.nodeup(D, CREATION[D], 1.1)
    c.receive(D, peer(D, disc=False) | {"t": "announce"}, 1.2)
    assert c.status()["running"] == [A, D]
    out = c.left_cluster(D, 2.0)
    assert SaveClusterStatus((A, B, C), (A, B, C), (A,)) in out
    assert c.status()["all"] == [A, B, C]


def test_joining_node_announces_itself_and_members_accept_it() -> None:
    j = NodeMonitorCore(
        D, CREATION[D], ClusterStatus(all=[A, B, C, D], disc=[A, B, C]), PartitionHandling()
    )
    j.start(0.0)
    j.nodeup(A, CREATION[A], 0.1)
    (msg,) = sends(j.joined_cluster(D, True, 0.2), "joined_cluster")
    assert msg.node == A and msg.msg["node"] == D and msg.msg["disc"] is True
    m = core(A)
    m.start(0.0)
    m.nodeup(D, CREATION[D], 0.1)
    # before joining, D's node_up is from a non-member and is dropped
    assert of(m.receive(D, peer(D), 0.1), Log)[0].text.endswith("non-member")
    out = m.receive(D, msg.msg, 0.3)
    assert [s.node for s in sends(out, "node_up")] == [D]  # so D answers with announce
    assert m.status()["all"] == [A, B, C, D]


def test_left_cluster_message_and_leaving_ourselves() -> None:
    c = core()
    c.start(0.0)
    connect(c, B, C)
    c.receive(B, {"t": "left_cluster", "c": CREATION[B], "node": C}, 1.0)
    assert c.status()["all"] == [A, B]
    out = c.receive(B, {"t": "left_cluster", "c": CREATION[B], "node": A}, 1.0)
    assert c.status()["all"] == [A, B] and of(out, Log)[0].level == logging.WARNING
    out = c.left_cluster(A, 2.0)
    assert [s.node for s in sends(out, "left_cluster")] == [B]
    assert c.status()["all"] == [A]


def test_messages_from_an_old_incarnation_are_dropped_and_a_new_one_is_adopted() -> None:
    c = core()
    c.start(0.0)
    connect(c, B, C)
    out = c.receive(B, {"t": "keepalive", "c": 1}, 1.0)
    assert "old incarnation" in of(out, Log)[0].text
    c.receive(B, peer(B, creation=7, c=7), 2.0)
    assert c.status()["running"] == [A, B, C]
    assert (
        "old incarnation"
        in of(c.receive(B, {"t": "keepalive", "c": CREATION[B]}, 2.0), Log)[0].text
    )


BAD: list[Any] = [
    None,
    [],
    "node_up",
    {},
    {"t": 3},
    {"t": "nonsense"},
    {"v": 2, "t": "alarm", "resources": []},  # a version this node cannot read
    {"v": "1", "t": "alarm", "resources": []},
    {"t": "node_up"},
    {
        "t": "node_up",
        "node": B,
        "disc": "yes",
        "creation": 1,
        "running": True,
        "down": None,
        "alarms": [],
    },
    {
        "t": "node_up",
        "node": B,
        "disc": True,
        "creation": True,
        "running": True,
        "down": None,
        "alarms": [],
    },
    {"t": "alarm", "resources": "memory"},
    {"t": "alarm", "resources": [1]},
    {"t": "alarm", "resources": ["x" * 1000]},
    {"t": "view", "views": []},
    {"t": "view", "views": {B: {"c": 1, "s": -1, "seen": [], "p": False}}},
    {"t": "view", "views": {B: {"c": 1, "s": 1, "seen": "a", "p": False}}},
    {"t": "keepalive", "c": "x"},
    {"t": "partial_partition", "node": B, "proxy": C},
    {"t": "winner_is"},
    {"t": "become_winner", "losers": "b@h"},
    {"t": "autoheal_status", "partitions": [], "nodes": [], "weight": "3"},
]


def test_bad_messages_are_logged_and_dropped() -> None:
    for msg in BAD:
        c = core()
        c.start(0.0)
        connect(c, B, C)
        before = c.status()
        out = c.receive(B, msg, 1.0)
        assert out and all(isinstance(e, Log) for e in out), msg
        assert out[0].level == logging.WARNING
        assert c.status() == before


def test_messages_from_non_members_are_dropped() -> None:
    c = core()
    c.start(0.0)
    out = c.receive("x@h", {"t": "keepalive"}, 1.0)
    assert len(out) == 1 and "non-member" in out[0].text
    # a joined_cluster is accepted only from the joining node itself
    out = c.receive("x@h", {"t": "joined_cluster", "node": "y@h", "disc": True}, 1.0)
    assert "non-member" in out[0].text and c.status()["all"] == [A, B, C]


def test_node_up_naming_another_node_is_dropped() -> None:
    c = core()
    c.start(0.0)
    c.nodeup(B, CREATION[B], 0.0)
    out = c.receive(B, peer(C), 0.0)
    assert not sends(out, "announce") and c.status()["running"] == [A]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5) | st.sampled_from([A, B, C]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
types = st.sampled_from(
    [
        "node_up", "announce", "app_down", "joined_cluster", "left_cluster", "keepalive", "alarm",
        "check_partial_partition", "creation_query", "creation_reply", "partial_partition",
        "partial_partition_disconnect", "view", "request_start", "autoheal_status_request",
        "autoheal_status", "become_winner", "winner_is", "autoheal_safe_to_start",
        "autoheal_finished", "report_autoheal_status", "other",
    ]
)  # fmt: skip


@settings(max_examples=120, deadline=None)
@given(types, st.dictionaries(st.sampled_from(["node", "c", "creation", "down", "views", "losers", "winner", "resources", "running", "disc", "alarms", "partitions", "nodes", "weight", "proxy", "reporter", "node_c", "checker_c", "reporter_c"]), json_values, max_size=8), st.sampled_from([A, B, C, "x@h"]), st.sampled_from(["ignore", "pause_minority", "autoheal"]))  # fmt: skip
def test_no_message_makes_the_core_raise(
    t: str, fields: dict[str, Any], sender: str, mode: str
) -> None:
    c = core(mode=mode)
    c.start(0.0)
    connect(c, B, C)
    out = c.receive(sender, {"t": t, **fields}, 1.0)
    assert isinstance(out, list)
    c.status()
