"""Each partition handling mode on a few cores wired by the pump (virtual time)."""

from __future__ import annotations

import pytest

from monitors.node_monitor import PartitionHandling
from tests.node_monitor.pump import Pump

A, B, C, D = "a@h", "b@h", "c@h", "d@h"


def healthy(p: Pump) -> None:
    """Everyone runs, sees everyone, and only the keepalive timer is left."""
    assert p.serving() == set(p.names)
    assert not p.paused()
    assert all(p.connected(x, y) for x in p.names for y in p.names if x < y)
    assert sorted(p.timers) == [(n, "keepalive") for n in p.names]
    for n in p.names:
        assert p.status(n)["running"] == p.names


def split(p: Pump, left: set[str]) -> None:
    for x in left:
        for y in set(p.names) - left:
            p.cut(x, y)


def test_ignore_never_pauses_and_keeps_partitions() -> None:
    p = Pump([A, B, C], "ignore")
    p.run(2)
    healthy(p)
    p.isolate(A)
    p.run(5)
    assert p.serving() == {A, B, C}
    assert p.status(B)["running"] == [B, C]
    p.heal_all()
    p.run(5)
    assert p.status(A)["partitions"] == [B, C]
    assert p.status(B)["partitions"] == [A]
    p.run(60)  # ignore: stays recorded until an operator acts, as in RabbitMQ
    assert p.status(C)["partitions"] == [A]
    assert p.serving() == {A, B, C}
    assert sorted(p.timers) == [(n, "keepalive") for n in p.names]


def test_ignore_partitions_go_when_the_operator_restarts_a_side() -> None:
    p = Pump([A, B, C], "ignore")
    p.run(2)
    p.isolate(A)
    p.run(5)
    p.heal_all()
    p.run(5)
    p.restart(A)  # RabbitMQ's manual recovery: restart the untrusted side
    p.run(5)
    assert all(p.status(n)["partitions"] == [] for n in p.names)
    healthy(p)


def test_pause_minority_pauses_the_isolated_node_and_resumes_it() -> None:
    p = Pump([A, B, C], "pause_minority")
    p.run(2)
    p.isolate(A)
    p.run(3)
    assert p.paused() == {A}
    assert p.serving() == {B, C}
    assert p.status(A)["paused"] is True
    assert (A, "pause_check") in p.timers  # re-checks every second while paused
    p.heal_all()
    p.run(3)
    healthy(p)
    assert all(p.status(n)["partitions"] == [] for n in p.names)


def test_pause_minority_2_2_pauses_everyone() -> None:
    p = Pump([A, B, C, D], "pause_minority")
    p.run(2)
    split(p, {A, B})
    p.run(3)
    assert p.paused() == {A, B, C, D}
    assert p.serving() == set()
    p.heal_all()
    p.run(3)
    healthy(p)


def test_two_node_cluster_pauses_on_any_failure() -> None:
    p = Pump([A, B], "pause_minority")
    p.run(2)
    p.cut(A, B)
    p.run(3)
    assert p.paused() == {A, B}
    p.heal_all()
    p.run(3)
    healthy(p)


def test_pause_minority_crashed_node() -> None:
    p = Pump([A, B, C], "pause_minority")
    p.run(2)
    p.crash(C)
    p.run(3)
    assert not p.paused()
    assert (A, "ping_down_nodes") in p.timers
    p.crash(B)
    p.run(3)
    assert p.paused() == {A}
    p.restart(B)
    p.restart(C)
    p.run(3)
    healthy(p)


def test_pause_if_all_down_pauses_the_side_without_preferred_nodes() -> None:
    p = Pump([A, B, C], PartitionHandling("pause_if_all_down", nodes=(A,)))
    p.run(2)
    p.isolate(A)
    p.run(3)
    assert p.paused() == {B, C}
    assert p.serving() == {A}
    p.heal_all()
    p.run(3)
    healthy(p)


@pytest.mark.parametrize("recover", ["ignore", "autoheal"])
def test_pause_if_all_down_preferred_on_both_sides_pauses_nothing(recover: str) -> None:
    p = Pump([A, B, C, D], PartitionHandling("pause_if_all_down", nodes=(A, C), recover=recover))
    p.run(2)
    split(p, {A, B})
    p.run(3)
    assert not p.paused()
    assert p.serving() == {A, B, C, D}
    p.heal_all()
    p.run(10)
    healthy(p)
    assert all(p.status(n)["partitions"] == [] for n in p.names)
    if recover == "autoheal":  # both sides ran: autoheal restarts the losing one
        assert p.logged("autoheal decision")
    else:  # stale entries are cleared once all are up and fully connected
        assert p.logged("partitions cleared")


def test_pause_if_all_down_with_no_preferred_member_never_pauses() -> None:
    p = Pump([A, B, C], PartitionHandling("pause_if_all_down", nodes=("gone@h",)))
    p.run(2)
    p.isolate(A)
    p.run(3)
    assert not p.paused()


def test_pause_if_all_down_preferred_node_crashes() -> None:
    p = Pump([A, B, C], PartitionHandling("pause_if_all_down", nodes=(A,)))
    p.run(2)
    p.crash(A)
    p.run(3)
    assert p.paused() == {B, C}
    p.restart(A)
    p.run(3)
    healthy(p)


def test_start_up_grace_then_pause() -> None:
    """RabbitMQ never pauses a node that boots in a minority. We wait `startup_grace` for the
    first connections, then apply the rule: a node alone in a minority does not run for ever."""
    p = Pump([A, B, C], "pause_minority", startup_grace=5.0, cuts=[(A, B), (A, C)])
    p.run(4)
    assert not p.paused()  # B and C find each other: no pause, and A is still in its grace
    assert p.logged("not pausing during the start-up grace", A)
    p.run(2)
    assert p.paused() == {A}
    p.heal_all()
    p.run(3)
    healthy(p)


def test_start_up_grace_ends_early_once_connected() -> None:
    p = Pump([A, B, C], "pause_minority", startup_grace=5.0)
    p.run(1)
    assert not any(k == "startup" for _, k in p.timers)
    assert not p.paused()
