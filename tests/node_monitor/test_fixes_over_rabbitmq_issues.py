"""Where we do better than RabbitMQ 4.2, each against the issue that shows the gap."""

from __future__ import annotations

from monitors.effects import Disconnect
from monitors.node_monitor import PartitionHandling, PauseApp, ResumeApp
from tests.node_monitor.helpers import CREATION, connect, core, of
from tests.node_monitor.pump import Pump
from tests.node_monitor.test_modes import healthy

A, B, C, D, E, F, G = (f"{x}@h" for x in "abcdefg")
SEVEN = [A, B, C, D, E, F, G]
DC1, DC2, DC3 = {A, B, C}, {D, E}, {F, G}


def cut_between(p: Pump, left: set[str], right: set[str]) -> None:
    for x in left:
        for y in right:
            p.cut(x, y)


def disconnects(p: Pump) -> int:
    return sum(1 for _, log in p.logs if log.text.startswith("upgrading the partial partition"))


# ------------------------------------------------------------------ (1) partial partitions


def test_1667_partial_partition_keeps_the_largest_majority_running() -> None:
    """RabbitMQ #1667: 7 nodes in 3 DCs, DC1-DC2 cut, DC3 sees both. RabbitMQ's "pause until
    the entire cluster recovers" left 3 of 7 running. We keep the fully-connected majority
    DC1+DC3 (5 nodes) and pause DC2, without disconnecting anything."""
    p = Pump(SEVEN, "pause_minority")
    p.run(2)
    cut_between(p, DC1, DC2)
    p.run(10)
    assert p.serving() == DC1 | DC3
    assert p.paused() == DC2
    assert disconnects(p) == 0
    p.heal_all()
    p.run(5)
    healthy(p)


def test_partial_partition_in_ignore_mode_becomes_one_clean_full_partition() -> None:
    """RabbitMQ: every reporter disconnects from its proxy, on both sides, so a single cut
    link can leave every node alone, and the reconnects start it over (the seed's closing
    remark). Here the links between the two parts are cut once and stay cut, quietly, until
    the fault heals; then everything reconnects."""
    p = Pump(SEVEN, "ignore")
    p.run(2)
    cut_between(p, DC1, DC2)
    p.run(5)
    first = disconnects(p)
    assert first > 0
    assert not p.paused()
    # DC2 is cut off from DC3 too; DC1+DC3 stay together
    assert all(p.connected(x, y) for x in DC1 | DC3 for y in DC1 | DC3 if x < y)
    assert not any(p.connected(x, y) for x in DC2 for y in DC3)
    p.run(60)
    assert disconnects(p) == first  # no flapping while the fault lasts
    assert not any(p.connected(x, y) for x in DC2 for y in DC3)
    p.heal_all()
    p.run(10)
    assert all(p.connected(x, y) for x in SEVEN for y in SEVEN if x < y)
    assert disconnects(p) == first
    assert sorted(p.timers) == [(n, "keepalive") for n in SEVEN]


def test_partial_partition_in_autoheal_mode_heals_after_the_fault() -> None:
    p = Pump(SEVEN, "autoheal")
    p.run(2)
    cut_between(p, DC1, DC2)
    p.run(20)
    assert not p.logged("autoheal decision")  # refused while the cluster is not whole
    p.heal_all()
    p.run(20)
    healthy(p)
    assert all(p.status(n)["partitions"] == [] for n in SEVEN)
    (decision,) = p.logged("autoheal decision")
    assert set(decision.fields["losers"]) == DC2


def test_single_link_cut_pause_minority() -> None:
    p = Pump([A, B, C], "pause_minority")
    p.run(2)
    p.cut(A, B)
    p.run(5)
    assert p.serving() == {A, C}  # {A, C} and {B, C} tie on size: name order decides
    assert p.paused() == {B}
    p.heal_all()
    p.run(5)
    healthy(p)


def test_partial_partition_seen_only_by_gossip_is_found() -> None:
    """A link that never came up (cut before boot) gives no nodedown, so RabbitMQ never runs
    its partial-partition check. The down-node ping round runs it for us."""
    p = Pump([A, B, C], "pause_minority", cuts=[(A, B)])
    p.run(5)  # the check waits out heal_settle (2.5 s): a link down at a nodeup may be coming
    assert p.paused() == {B}
    assert p.serving() == {A, C}


def test_partial_partition_seen_only_by_gossip_pause_if_all_down_pauses_quickly() -> None:
    """Under pause_if_all_down the gossip-only check comes as quickly as under pause_minority
    when its answer is a pause (one of the two parts holds no preferred node), not after the
    10 rounds that wait out a healing cluster's gaps where the answer is a cut."""
    p = Pump([A, B, C], PartitionHandling("pause_if_all_down", nodes=(A,)), cuts=[(B, C)])
    p.run(5)  # after heal_settle, as above
    assert p.paused() == {C}  # {A, B} and {A, C} both hold A: name order decides
    assert p.serving() == {A, B}
    assert disconnects(p) == 0
    p.heal_all()
    p.run(5)
    healthy(p)


def test_partial_partition_formed_by_a_partial_heal_pause_if_all_down() -> None:
    """Simulator seed 400: a split {A, C} | {B, D} heals, except that A-D is cut again before
    A and D reconnected. No connection goes down, so no nodedown starts a check; both A and D
    reach the preferred node B and kept running apart. The ping rounds find it and the part
    without B pauses, cutting nothing. Since issue 15 A never resumes there: a paused node
    resumes only into a fully-connected part that may run, and the running D keeps its place
    in {B, D} (no running node pauses while a heal brings links back)."""
    p = Pump([A, B, C, D], PartitionHandling("pause_if_all_down", nodes=(B,)))
    p.run(2)
    cut_between(p, {A, C}, {B, D})
    p.run(2)
    assert p.serving() == {B, D}
    p.heal_all()
    p.cut(A, D)  # before the ping rounds reconnect it
    p.cut(B, C)
    p.run(4)
    assert not p.connected(A, D)
    assert p.serving() == {B, D}  # {A, C} hold no preferred node
    assert p.paused() == {A, C}
    assert disconnects(p) == 0
    p.heal_all()
    p.run(5)
    healthy(p)


# ------------------------------------------------------------------ (2) #8110


def test_partial_partition_seen_only_by_gossip_in_ignore_mode_is_cut_later() -> None:
    # where the answer is a cut, the check waits 10 ping rounds: a healing cluster has such
    # gaps too, and cutting them would start the seed's disconnect cascade
    p = Pump([A, B, C], "ignore", cuts=[(A, B)])
    p.run(8)
    assert p.connected(B, C)
    p.run(5)
    assert not p.connected(B, C) and p.connected(A, C)


def test_8110_two_links_cut_at_once_never_leave_a_minority_running() -> None:
    for first, second in [(B, C), (C, B)]:
        c = core(A, mode="pause_minority")
        c.start(0.0)
        connect(c, B, C)
        out = c.nodedown(first, "net_tick_timeout", 5.0)
        assert not of(out, PauseApp)
        out = c.nodedown(second, "net_tick_timeout", 5.0)
        assert of(out, PauseApp) and c.paused
        # nothing that arrives afterwards from the old picture resumes it
        c.receive(first, {"t": "keepalive", "c": CREATION[first]}, 5.1)
        assert c.paused


def test_8110_in_the_pump() -> None:
    p = Pump([A, B, C], "pause_minority", app_delay=0.05)
    p.run(2)
    p.cut(A, B)
    p.cut(A, C)
    p.run(0.5 + 0.01)  # detection, then the decision at once
    assert p.paused() == {A}
    p.run(0.1)
    assert p.serving() == {B, C}


# ------------------------------------------------------------------ (3) #2175


def test_2175_a_failure_during_recovery_pauses_again_at_once() -> None:
    """RabbitMQ #2175: the process that restarts the app after a pause blocks a new pause, so
    a second failure during recovery leaves a minority running. Our decision is recomputed on
    every event: a PauseApp goes out while the ResumeApp is still in flight."""
    c = core(A, mode="pause_minority")
    c.start(0.0)
    connect(c, B, C)
    c.nodedown(B, "net_tick_timeout", 1.0)
    out = c.nodedown(C, "net_tick_timeout", 1.0)
    assert of(out, PauseApp)
    c.app_stopped(1.2)
    out = connect(c, B, C, now=3.0)
    assert of(out, ResumeApp)  # recovery starts...
    out = c.nodedown(B, "net_tick_timeout", 3.05)
    assert not of(out, PauseApp)  # still 2 of 3
    out = c.nodedown(C, "net_tick_timeout", 3.1)  # ...and fails before app_started
    assert of(out, PauseApp) and c.paused
    c.app_started(3.2)  # the shell finishes the start, then applies the PauseApp
    assert c.paused and c.status()["paused"]


def test_2175_in_the_pump_never_a_minority_for_long() -> None:
    p = Pump([A, B, C], "pause_minority", app_delay=0.5)
    p.run(2)
    p.isolate(A)
    p.run(2)
    p.heal_all()
    p.run(0.3)  # A decided to resume; the start is in progress
    p.isolate(A)
    p.run(3)
    assert p.paused() == {A}
    assert p.serving() == {B, C}
    p.heal_all()
    p.run(3)
    healthy(p)


def test_2175_autoheal_loser_and_pause_do_not_block_each_other() -> None:
    c = core(A, members=(A, B, C), mode="pause_minority")
    c.start(0.0)
    connect(c, B, C)
    c.nodedown(B, "net_tick_timeout", 1.0)
    c.nodedown(C, "net_tick_timeout", 1.0)
    assert c.paused
    # the pause-check timer keeps pinging and re-evaluating while paused
    out = c.timer("pause_check", 2.0)
    assert {e.node for e in out if type(e).__name__ == "Connect"} == {B, C}


# ------------------------------------------------------------------ (4) #17319


def test_17319_blip_clears_in_pause_minority() -> None:
    p = Pump([A, B, C], "pause_minority", detect=0.1, app_delay=0.5)
    p.run(2)
    p.isolate(A)
    p.run(0.3)  # a sub-second blip: both sides saw each other down
    p.heal_all()
    p.run(5)
    healthy(p)
    assert all(p.status(n)["partitions"] == [] for n in p.names)


def test_17319_blip_heals_by_itself_in_autoheal() -> None:
    p = Pump([A, B, C], "autoheal", detect=0.1)
    p.run(2)
    p.isolate(A)
    p.run(0.3)
    p.heal_all()
    p.run(5)
    healthy(p)
    assert p.logged("autoheal decision")
    assert all(p.status(n)["partitions"] == [] for n in p.names)


def test_17319_blip_stays_recorded_in_ignore() -> None:
    p = Pump([A, B, C], "ignore", detect=0.1)
    p.run(2)
    p.isolate(A)
    p.run(0.3)
    p.heal_all()
    p.run(30)
    assert p.status(A)["partitions"] == [B, C]  # as RabbitMQ's ignore: the operator acts
    assert not of([e for _, e in p.logs], Disconnect)
