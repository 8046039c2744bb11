"""rabbit_autoheal: full flows through the pump, restarts mid-heal, and the state machine's
corner cases fed by hand."""

from __future__ import annotations

from collections.abc import Callable

from monitors.effects import Log, SetTimer
from monitors.node_monitor import PauseApp, ResumeApp
from monitors.node_monitor.autoheal import (
    TIMER_COLLECT,
    TIMER_RESTART,
    TIMER_WINNER,
    Autoheal,
    Ctx,
    LeaderWaiting,
    Restarting,
    WinnerWaiting,
)
from tests.node_monitor.helpers import CREATION, connect, core, of, peer, sends
from tests.node_monitor.pump import Pump
from tests.node_monitor.test_modes import healthy

A, B, C, D = "a@h", "b@h", "c@h", "d@h"


def run_until(p: Pump, cond: Callable[[], bool], limit: float = 30.0) -> None:
    end = p.now + limit
    while not cond():
        assert p.now < end, "condition not reached"
        p.run(0.005)


def partitioned(p: Pump, node: str) -> None:
    """Isolate `node` long enough for both sides to see each other down, then heal."""
    p.run(2)
    p.isolate(node)
    p.run(3)
    p.heal_all()


def flow(p: Pump) -> list[tuple[str, str, str]]:
    wanted = {
        "request_start",
        "become_winner",
        "winner_is",
        "autoheal_safe_to_start",
        "autoheal_finished",
        "report_autoheal_status",
    }
    return [(src, e.msg["t"], e.node) for src, e in p.sent if e.msg["t"] in wanted]


def test_full_flow_leader_is_the_loser() -> None:
    p = Pump([A, B, C], "autoheal")
    partitioned(p, A)  # {A} | {B, C}; both sides ran
    p.run(10)
    healthy(p)
    assert all(p.status(n)["partitions"] == [] for n in p.names)
    steps = flow(p)
    # the leader A picks winner B (the bigger partition), which restarts A
    assert (A, "become_winner", B) in steps
    assert (B, "winner_is", A) in steps
    assert (B, "autoheal_safe_to_start", A) in steps
    assert (B, "autoheal_finished", A) in steps
    # A led and lost: it asks the winner on its way back
    assert (A, "report_autoheal_status", B) in steps
    assert steps.index((B, "winner_is", A)) < steps.index((B, "autoheal_safe_to_start", A))
    assert p.logged("we were selected to restart", A)
    assert all(c.autoheal.state.name == "not_healing" for c in p.cores.values())
    # the loser's application stopped then started again; the winners' never did
    assert [
        type(e).__name__ for _, n, e in p.notes if e.event in ("paused", "resumed") and n == A
    ] == [
        "Notify",
        "Notify",
    ]
    assert not [n for _, n, e in p.notes if e.event == "paused" and n != A]


def test_weight_decides_before_size() -> None:
    p = Pump([A, B, C], "autoheal")
    p.cores[A].set_weight(10)  # A has the clients
    partitioned(p, A)
    p.run(10)
    healthy(p)
    (decision,) = p.logged("autoheal decision")
    assert decision.fields["winner"] == A and decision.fields["losers"] == [B, C]


def test_blocked_while_a_node_is_down_then_heals_on_keepalive() -> None:
    p = Pump([A, B, C, D], "autoheal")
    p.run(2)
    p.isolate(D)
    p.crash(C)
    p.run(3)
    p.heal_all()
    p.run(3)
    assert not p.logged("autoheal decision")  # maybe_autoheal waits for every member
    assert p.status(A)["partitions"] == [D]
    p.restart(C)
    p.run(15)  # the keepalive round retries the request
    healthy(p)
    assert all(p.status(n)["partitions"] == [] for n in p.names)


def test_leader_restart_mid_heal() -> None:
    p = Pump([A, B, C], "autoheal")
    partitioned(p, A)
    run_until(p, lambda: isinstance(p.cores[A].autoheal.state, Restarting))
    p.restart(A)  # the leader (and loser) dies while waiting for safe_to_start
    p.run(10)
    healthy(p)
    assert p.logged("aborting: nodes down", B)  # the winner saw it go while winner_waiting
    assert all(p.status(n)["partitions"] == [] for n in p.names)
    assert all(c.autoheal.state.name == "not_healing" for c in p.cores.values())


def test_winner_restart_mid_heal() -> None:
    p = Pump([A, B, C], "autoheal")
    partitioned(p, A)
    run_until(p, lambda: isinstance(p.cores[A].autoheal.state, Restarting))
    assert isinstance(p.cores[B].autoheal.state, WinnerWaiting)
    p.restart(B)  # the winner dies while the loser (and leader) A waits for it
    p.run(10)
    healthy(p)
    assert p.logged("the winner went down; starting again", A)
    assert all(p.status(n)["partitions"] == [] for n in p.names)
    assert all(c.autoheal.state.name == "not_healing" for c in p.cores.values())


def test_restart_of_the_winner_without_a_nodedown_drops_stale_heal_state() -> None:
    """A peer that comes back with a new creation is a new node: a loser waiting for its old
    incarnation starts again at once, and messages of the old incarnation are dropped."""
    c = core(A, mode="autoheal")
    c.start(0.0)
    connect(c, B, C)
    out = c.receive(B, {"t": "winner_is", "c": CREATION[B], "winner": B}, 1.0)
    assert of(out, PauseApp) and isinstance(c.autoheal.state, Restarting)
    c.app_stopped(1.1)
    out = c.receive(B, peer(B, creation=999, c=999), 2.0)
    assert of(out, ResumeApp) and c.autoheal.state.name == "not_healing"
    late = c.receive(B, {"t": "autoheal_safe_to_start", "c": CREATION[B]}, 2.1)
    assert "old incarnation" in of(late, Log)[0].text


def test_loser_times_out_waiting_for_the_winner() -> None:
    c = core(A, mode="autoheal")
    c.start(0.0)
    connect(c, B, C)
    out = c.receive(B, {"t": "winner_is", "c": CREATION[B], "winner": B}, 1.0)
    assert SetTimer(TIMER_RESTART, 60.0) in out
    c.app_stopped(1.1)
    out = c.timer(TIMER_RESTART, 61.0)
    assert of(out, ResumeApp) and not c.paused
    assert "timed out" in of(out, Log)[0].text


def test_loser_already_stopped_reports_at_once() -> None:
    c = core(A, mode="autoheal")
    c.start(0.0)
    connect(c, B, C)
    c.app_stopped(0.5)
    out = c.receive(B, {"t": "winner_is", "c": CREATION[B], "winner": B}, 1.0)
    assert [s.node for s in sends(out, "app_down")] == [B]


def test_winner_is_must_come_from_the_winner() -> None:
    c = core(A, mode="autoheal")
    c.start(0.0)
    connect(c, B, C)
    c.receive(C, {"t": "winner_is", "c": CREATION[C], "winner": B}, 1.0)
    assert c.autoheal.state.name == "not_healing" and not c.paused


# ----------------------------------------------------------------------- the state machine


def ctx(
    node: str = A, connected: tuple[str, ...] = (B, C), partitions: tuple[str, ...] = ()
) -> Ctx:
    return Ctx(
        node, CREATION[node], "nm", (A, B, C), frozenset(connected), frozenset(partitions), 0
    )


def test_leader_refuses_while_a_node_is_down() -> None:
    h = Autoheal()
    out = h.handle(B, {"t": "request_start", "node": B}, ctx(connected=(B,)))
    assert any("nodes down" in e.text for e in of(out, Log))
    assert h.state.name == "not_healing"


def test_leader_refuses_when_a_node_cannot_see_everyone() -> None:
    h = Autoheal()
    out = h.handle(B, {"t": "request_start", "node": B}, ctx())
    assert SetTimer(TIMER_COLLECT, 5.0) in out
    assert {s.node for s in sends(out, "autoheal_status_request")} == {B, C}
    h.handle(B, {"t": "autoheal_status", "partitions": [C], "nodes": [A, B], "weight": 0}, ctx())
    out = h.handle(
        C, {"t": "autoheal_status", "partitions": [B], "nodes": [A, B, C], "weight": 0}, ctx()
    )
    assert any("remote_down" in e.text for e in of(out, Log))
    assert h.state.name == "not_healing"


def test_leader_gives_up_without_every_status() -> None:
    h = Autoheal()
    h.handle(B, {"t": "request_start", "node": B}, ctx())
    assert h.state.name == "collecting"
    h.timer(TIMER_COLLECT, ctx())
    assert h.state.name == "not_healing"
    h.handle(B, {"t": "request_start", "node": B}, ctx())
    h.node_down(C, ctx(connected=(B,)))
    assert h.state.name == "not_healing"


def test_leader_decides_and_waits_for_the_winner() -> None:
    h = Autoheal()
    h.handle(B, {"t": "request_start", "node": B}, ctx(partitions=(C,)))
    h.handle(B, {"t": "autoheal_status", "partitions": [C], "nodes": [A, B, C], "weight": 0}, ctx())
    status_c = {"t": "autoheal_status", "partitions": [A, B], "nodes": [A, B, C], "weight": 0}
    out = h.handle(C, status_c, ctx(partitions=(C,)))
    # {A, B} wins by size and A, its first node, is the leader itself: no become_winner on
    # the wire, straight to winner_waiting
    assert not sends(out, "become_winner")
    assert isinstance(h.state, WinnerWaiting) and h.state.notify == (C,)
    assert [s.node for s in sends(out, "winner_is")] == [C]
    # with C heavier, C wins and the leader waits for it
    h = Autoheal()
    h.handle(B, {"t": "request_start", "node": B}, ctx(partitions=(C,)))
    h.handle(B, {"t": "autoheal_status", "partitions": [C], "nodes": [A, B, C], "weight": 0}, ctx())
    out = h.handle(C, status_c | {"weight": 9}, ctx(partitions=(C,)))
    (bw,) = sends(out, "become_winner")
    assert bw.node == C and bw.msg["losers"] == [A, B]
    assert h.state == LeaderWaiting(C, (A, B))


def test_nothing_to_heal_with_one_partition() -> None:
    h = Autoheal()
    h.handle(B, {"t": "request_start", "node": B}, ctx())
    h.handle(B, {"t": "autoheal_status", "partitions": [], "nodes": [A, B, C], "weight": 0}, ctx())
    out = h.handle(
        C, {"t": "autoheal_status", "partitions": [], "nodes": [A, B, C], "weight": 0}, ctx()
    )
    assert any("nothing to heal" in e.text for e in of(out, Log))


def test_winner_aborts_on_any_node_down_and_releases_the_losers() -> None:
    h = Autoheal()
    h.handle(A, {"t": "become_winner", "losers": [B, C]}, ctx())
    assert isinstance(h.state, WinnerWaiting)
    out = h.node_down(C, ctx(connected=(B,)))
    assert [s.node for s in sends(out, "autoheal_safe_to_start")] == [B]
    assert h.state.name == "not_healing"


def test_winner_waits_for_every_loser_then_releases_them() -> None:
    h = Autoheal()
    h.handle(A, {"t": "become_winner", "losers": [B, C]}, ctx())
    assert not h.rabbit_down(B, ctx())
    out = h.rabbit_down(C, ctx())
    assert {s.node for s in sends(out, "autoheal_safe_to_start")} == {B, C}
    assert any("final node has stopped" in e.text for e in of(out, Log))


def test_winner_times_out_waiting_for_losers() -> None:
    h = Autoheal(timeout=60.0)
    out = h.handle(A, {"t": "become_winner", "losers": [B]}, ctx())
    assert SetTimer(TIMER_WINNER, 60.0) in out
    out = h.timer(TIMER_WINNER, ctx())
    assert [s.node for s in sends(out, "autoheal_safe_to_start")] == [B]
    assert h.state.name == "not_healing"


def test_winner_with_a_loser_already_down_aborts() -> None:
    h = Autoheal()
    out = h.handle(A, {"t": "become_winner", "losers": [B, C]}, ctx(connected=(B,)))
    assert any("aborting" in e.text for e in of(out, Log))
    assert h.state.name == "not_healing"


def test_winner_gets_a_different_request_and_aborts() -> None:
    h = Autoheal()
    h.handle(A, {"t": "become_winner", "losers": [B]}, ctx())
    h.handle(A, {"t": "become_winner", "losers": [B]}, ctx())  # same: waits again
    assert isinstance(h.state, WinnerWaiting)
    h.handle(A, {"t": "become_winner", "losers": [B, C]}, ctx())
    assert h.state.name == "not_healing"


def test_leader_drops_to_not_healing_when_the_winner_goes() -> None:
    h = Autoheal()
    h.state = LeaderWaiting(B, (C,))
    h.node_down(C, ctx(connected=(B,)))
    assert isinstance(h.state, LeaderWaiting)  # waits for the winner's decision
    h.node_down(B, ctx(connected=()))
    assert h.state.name == "not_healing"


def test_leader_finishes_on_the_winners_word_and_ignores_the_unexpected() -> None:
    h = Autoheal()
    h.state = LeaderWaiting(B, (C,))
    h.handle(B, {"t": "autoheal_finished", "winner": B}, ctx())
    assert h.state.name == "not_healing"
    out = h.handle(B, {"t": "autoheal_finished", "winner": B}, ctx())
    assert any("unexpected" in e.text for e in of(out, Log))


def test_restarting_ignores_everything_but_safe_to_start() -> None:
    h = Autoheal()
    h.handle(B, {"t": "winner_is", "winner": B}, ctx())
    assert h.holds_app
    h.handle(C, {"t": "become_winner", "losers": [A]}, ctx())
    h.handle(C, {"t": "autoheal_safe_to_start"}, ctx())  # not from the winner
    assert h.holds_app
    h.handle(B, {"t": "autoheal_safe_to_start"}, ctx())
    assert not h.holds_app


def test_status_request_is_answered_in_any_state() -> None:
    h = Autoheal()
    h.handle(B, {"t": "winner_is", "winner": B}, ctx())
    (st,) = sends(
        h.handle(B, {"t": "autoheal_status_request"}, ctx(partitions=(C,))), "autoheal_status"
    )
    assert st.msg["partitions"] == [C] and st.msg["nodes"] == [A, B, C]


def test_request_to_a_non_leader_is_ignored() -> None:
    h = Autoheal()
    out = h.handle(A, {"t": "request_start", "node": A}, ctx(node=B, connected=(A, C)))
    assert any("not the leader" in e.text for e in of(out, Log))
