"""Ephemeral members, fed by hand: the core side (NodeMonitorCore) and the ephemeral side
(EphemeralMonitorCore). The simulator (tests/sim/test_ephemeral_sim.py) runs them together."""

from __future__ import annotations

from typing import Any

from monitors.effects import Connect, Log, SetTimer
from monitors.node_monitor import PartitionHandling, PauseApp, ResumeApp, SaveClusterStatus
from monitors.node_monitor.core import FORGET_TIMER
from monitors.node_monitor.ephemeral import EphemeralMonitorCore
from tests.node_monitor.helpers import CREATION, A, B, C, connect, core, of, peer, sends

X, Y = "x@h", "y@h"  # ephemeral nodes
CREATION.update({X: 200, Y: 201})


def eph_record(node: str = X, t: str = "node_up", creation: int | None = None) -> dict[str, Any]:
    c = CREATION[node] if creation is None else creation
    return {
        "t": t,
        "c": c,
        "node": node,
        "disc": False,
        "creation": c,
        "running": True,
        "down": None,
        "alarms": [],
        "role": "ephemeral",
    }


def core_record(node: str, running: bool = True, members=(A, B, C), t="announce") -> dict:
    return {**peer(node, running=running), "t": t, "role": "core", "members": list(members)}


def attached(mode: str = "pause_minority", **kw: Any):
    c = core(mode=mode, **kw)
    c.start(0.0)
    connect(c, B, C)
    c.nodeup(X, CREATION[X], 1.0)
    out = c.receive(X, eph_record(), 1.0)
    return c, out


# ---------------------------------------------------------------- the core side


def test_an_ephemeral_node_is_up_but_never_a_member() -> None:
    c, out = attached()
    reply = sends(out, "announce", X)
    assert reply and reply[0].msg["members"] == [A, B, C] and reply[0].msg["role"] == "core"
    st = c.status()
    assert st["ephemeral"] == [X]
    assert X not in st["all"] + st["disc"] + st["running"]
    assert not [e for e in out if isinstance(e, SaveClusterStatus) and X in e.all]
    assert not of(out, Connect)


def test_ephemeral_nodes_going_never_pause_the_core() -> None:
    c, _ = attached(forget_ephemeral_after=30.0)
    c.nodeup(Y, CREATION[Y], 1.0)
    c.receive(Y, eph_record(Y), 1.0)
    out = c.nodedown(X, "connection_closed", 2.0) + c.nodedown(Y, "connection_closed", 2.0)
    assert not c.paused and not of(out, PauseApp)
    assert not sends(out, "check_partial_partition")  # not a member: nothing to check
    timers = [e for e in out if isinstance(e, SetTimer) and e.key.startswith(FORGET_TIMER)]
    assert [t.after for t in timers] == [30.0, 30.0]
    assert c.status()["ephemeral"] == [] and c.ephemeral_members() == ([], [X, Y])
    out = c.timer(FORGET_TIMER + X, 32.0)
    assert c.ephemeral_members() == ([], [Y])
    assert any(isinstance(e, Log) and "forgotten" in e.text for e in out)


def test_an_ephemeral_node_back_in_time_is_not_forgotten() -> None:
    c, _ = attached()
    c.nodedown(X, "connection_closed", 2.0)
    c.nodeup(X, 999, 3.0)
    c.receive(X, eph_record(creation=999), 3.0)  # back under the same name
    assert c.timer(FORGET_TIMER + X, 32.0) == []  # the timer was cancelled
    assert c.status()["ephemeral"] == [X]


def test_a_leave_is_forgotten_at_once_and_relayed_to_the_core() -> None:
    c, _ = attached()
    out = c.receive(X, {"t": "left_cluster", "c": CREATION[X], "node": X}, 2.0)
    assert c.ephemeral_members() == ([], [])
    relayed = sends(out, "ephemeral_left")
    assert {s.node for s in relayed} == {B, C} and relayed[0].msg["creation"] == CREATION[X]
    # the peer that hears it forgets the same incarnation, not a newer one
    other, _ = attached()
    other.receive(B, {"t": "ephemeral_left", "c": CREATION[B], "node": X, "creation": 1}, 2.0)
    assert other.status()["ephemeral"] == [X]
    other.receive(B, {"t": "ephemeral_left", "c": CREATION[B], "node": X, "creation": 200}, 2.0)
    assert other.status()["ephemeral"] == []


def test_a_member_that_says_it_is_ephemeral_is_refused_loudly() -> None:
    c, _ = attached()
    out = c.receive(B, {**eph_record(B)}, 2.0)
    assert any(isinstance(e, Log) and e.level >= 40 for e in out)
    assert c.status()["ephemeral"] == [X]


def test_ephemeral_nodes_hear_when_the_core_stops() -> None:
    c, _ = attached()
    c.nodedown(B, "net_tick_timeout", 2.0)
    out = c.nodedown(C, "net_tick_timeout", 2.0)
    assert of(out, PauseApp)
    out = c.app_stopped(2.1)
    told = sends(out, "announce", X)
    assert told and told[0].msg["running"] is False


# ---------------------------------------------------------------- the ephemeral side


def eph(mode: str | PartitionHandling = "pause_minority", seeds=(A, B, C)) -> EphemeralMonitorCore:
    config = PartitionHandling(mode) if isinstance(mode, str) else mode
    e = EphemeralMonitorCore(X, CREATION[X], list(seeds), config)
    out = e.start(0.0)
    assert of(out, PauseApp) and {x.node for x in of(out, Connect)} == set(seeds)
    return e


def up(e: EphemeralMonitorCore, *nodes: str, now: float = 0.5, running: bool = True) -> list:
    out: list = []
    for n in nodes:
        out += e.nodeup(n, CREATION[n], now)
        out += e.receive(n, core_record(n, running=running), now)
    return out


def test_pause_minority_runs_only_with_a_majority_of_the_core() -> None:
    e = eph()
    out = up(e, A)
    assert e.paused and not of(out, ResumeApp)
    assert sends(out, "node_up", A)[0].msg["role"] == "ephemeral"
    out = up(e, B)
    assert not e.paused and of(out, ResumeApp)
    out = e.nodedown(B, "net_tick_timeout", 2.0)
    assert e.paused and of(out, PauseApp)
    assert e.status()["all"] == [A, B, C] and e.status()["ephemeral"] == [X]


def test_it_learns_the_core_from_a_seed() -> None:
    e = eph(seeds=(A,))
    out = up(e, A)
    assert {x.node for x in of(out, Connect)} == {B, C}
    assert e.paused  # 1 of 3 now
    up(e, B)
    assert not e.paused


def test_autoheal_follows_one_member_and_restarts_with_its_side() -> None:
    e = eph("autoheal")
    up(e, A, B)
    assert not e.paused
    e.app_started(0.6)
    out = e.receive(A, {"t": "app_down", "c": CREATION[A]}, 1.0)  # A lost the heal
    assert e.paused and of(out, PauseApp)
    out = e.app_stopped(1.1)
    assert not e.paused and of(out, ResumeApp)  # again, with B's side
    assert not e.receive(A, {"t": "app_down", "c": CREATION[A]}, 1.2)


def test_pause_if_all_down_needs_a_listed_node() -> None:
    e = eph(PartitionHandling("pause_if_all_down", nodes=(C,)))
    up(e, A, B)
    assert e.paused
    up(e, C)
    assert not e.paused


def test_alone_it_says_so_once_per_back_off_step() -> None:
    e = eph()
    said = []
    for t in range(1, 40):
        said += [x for x in e.timer("ping_core", float(t)) if isinstance(x, Log) and x.level == 30]
    assert 4 <= len(said) <= 7  # 1, 2, 4, 8, 16, 32 s apart: not once a second
    assert all("cannot reach any core member" in x.text for x in said)


def test_an_ephemeral_seed_is_refused() -> None:
    e = eph(seeds=(A, Y))
    e.nodeup(Y, CREATION[Y], 0.5)
    out = e.receive(Y, eph_record(Y, t="announce"), 0.5)
    assert any(isinstance(x, Log) and x.level >= 40 for x in out)
    assert e.status()["all"] == [A]


def test_it_writes_no_cluster_file_and_leaves_politely() -> None:
    e = eph()
    out = up(e, A, B, C)
    out += e.left_cluster(X, 3.0)
    assert not of(out, SaveClusterStatus)
    assert {s.node for s in sends(out, "left_cluster")} == {A, B, C}
    assert e.paused


def _ping_delays(e: EphemeralMonitorCore, rounds: int) -> list[float]:
    delays = []
    for t in range(1, rounds + 1):
        delays += [x.after for x in e.timer("ping_core", float(t)) if isinstance(x, SetTimer)]
    return delays


def test_cut_off_executors_retry_with_jitter_and_back_off() -> None:
    delays = _ping_delays(eph(), 8)
    assert len(delays) == 8
    assert all(0.5 <= d < 1.5 * 4.0 for d in delays)
    assert max(delays[3:]) >= 2.0  # backs off while alone, to 4x at most
    # two executors cut off at the same instant do not retry in step
    other = EphemeralMonitorCore(Y, CREATION[Y], [A, B, C], PartitionHandling())
    other.start(0.0)
    assert _ping_delays(other, 8) != delays


def test_a_message_from_an_ephemeral_member_runs_no_decision_pass() -> None:
    c, _ = attached()

    def no_pass(now: float) -> list:
        raise AssertionError("a whole-cluster decision pass for an ephemeral member's message")

    c._settle = no_pass  # type: ignore[method-assign]
    out = c.receive(X, eph_record(t="keepalive"), 5.0)
    assert not of(out, PauseApp) and c.status()["ephemeral"] == [X]
    c.receive(X, {"t": "left_cluster", "c": CREATION[X], "node": X, "role": "ephemeral"}, 6.0)
    assert c.ephemeral_members() == ([], [])
