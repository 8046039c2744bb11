"""Elections: Celery's test_Gossip election cases and test_control's test_election, ported, and
what makes ours agree and finish (election_core's docstring says why each rule is there)."""

from __future__ import annotations

from typing import Any

import pytest

from monitors.effects import CancelTimer, SetTimer
from monitors.gossip import wire
from monitors.gossip.clock import LamportClock
from monitors.gossip.effects import (
    Direct,
    ElectionDecided,
    ElectionFailed,
    Publish,
    RunElection,
)
from monitors.gossip.election_core import TIMER_PREFIX, ElectionCore
from tests.gossip.test_gossip_core import T0, msg, started


def core(host: str = "a@h", pid: int = 1, alive: tuple[str, ...] = ("b@h", "c@h"), **kw: Any):
    c = ElectionCore(wire.Stamper(host, pid, LamportClock()), **kw)
    c.alive = set(alive)
    c.set_ready(True, T0)
    return c


def pubs(effects: list[Any], rk: str) -> list[dict[str, Any]]:
    """Bodies of the messages sent with routing key `rk`, broadcast or direct."""
    return [e.body for e in effects if isinstance(e, Publish | Direct) and e.routing_key == rk]


def elect(host: str, pid: int, clock: int, eid: str = "e1", candidate: bool = True, **f: Any):
    fields = {"id": eid, "topic": "task", "action": {"by": host}, "candidate": candidate, **f}
    return msg(wire.ELECT, host, pid, clock, **fields)


def ack(host: str, to: str, to_clock: int, eid: str = "e1", **f: Any) -> dict[str, Any]:
    return msg(wire.ELECT_ACK, host, 5, 1, id=eid, to=to, to_clock=to_clock, **f)


def decided(effects: list[Any]) -> list[ElectionDecided]:
    return [e for e in effects if isinstance(e, ElectionDecided)]


# ---- Celery's test_election / test_on_elect ------------------------------------------------------


def test_election() -> None:
    c = core()
    c.s.clock.value = 10
    out = c.election("id1", "task", {"name": "t"}, T0)
    (body,) = pubs(out, wire.ELECT)
    assert body["id"] == "id1" and body["topic"] == "task" and body["action"] == {"name": "t"}
    assert body["clock"] == 11 and body["hostname"] == "a@h" and body["pid"] == 1
    assert body["candidate"] is True
    assert wire.problem(wire.ELECT, body) is None
    assert SetTimer(TIMER_PREFIX + "id1", 3.0) in out  # the retry timer
    assert c.pending["id1"].own is not None


def test_control_election_command_is_election() -> None:
    """test_control's test_election: the remote `election` command lands in the same call."""
    pump = started("a@h", "b@h")
    pump.call("b@h", "election", "id2", "task", {"name": "t"})  # as the control handler would
    assert pump.of("a@h", ElectionDecided) == [ElectionDecided("id2", "b@h", "task")]
    assert pump.of("b@h", RunElection) == [RunElection("task", {"name": "t"}, "id2")]


def test_on_elect() -> None:
    c = core()
    c.s.clock.value = 3
    out = c.on_elect(elect("b@h", 7, clock=5), T0)
    (a,) = pubs(out, wire.ELECT_ACK)
    (sent,) = [e for e in out if getattr(e, "routing_key", None) == wire.ELECT_ACK]
    assert isinstance(sent, Direct) and sent.node == "b@h"  # to the proposer only
    assert a["id"] == "e1" and a["to"] == "b@h.7" and a["to_clock"] == 5
    assert a["best"] == [5, "b@h", 7] and a["best_topic"] == "task"
    assert wire.problem(wire.ELECT_ACK, a) is None
    assert [p.member for p in c.pending["e1"].proposals.values()] == ["b@h.7"]
    assert not decided(out)  # we did not ask: we never decide


def test_on_elect_missing_field_is_logged_not_raised() -> None:
    from monitors.gossip.gossip_core import GossipCore

    g = GossipCore("a@h", 1)
    bad = elect("b@h", 7, 5)
    del bad["topic"]
    (log,) = g.receive(wire.ELECT, bad, T0)
    assert "missing field 'topic'" in log.fields["why"]
    assert g.elections.pending == {}


# ---- test_on_elect_ack_win / lose / win_but_no_action ------------------------------------------------


def test_on_elect_ack_win() -> None:
    c = core()
    (mine,) = pubs(c.election("e1", "task", {"n": 1}, T0), wire.ELECT)
    assert c.on_ack(ack("b@h", "a@h.1", mine["clock"]), T0) == []  # c@h has not acked
    out = c.on_ack(ack("c@h", "a@h.1", mine["clock"]), T0)
    (result,) = pubs(out, wire.ELECT_RESULT)
    assert result["winner"] == "a@h" and result["winner_pid"] == 1
    assert decided(out) == [ElectionDecided("e1", "a@h", "task")]
    assert RunElection("task", {"n": 1}, "e1") in out
    assert CancelTimer(TIMER_PREFIX + "e1") in out
    assert "e1" not in c.pending


def test_on_elect_ack_lose() -> None:
    c = core()
    c.s.clock.value = 10
    c.on_elect(elect("b@h", 7, clock=4), T0)  # b proposed earlier (lower clock)
    (mine,) = pubs(c.election("e1", "task", None, T0), wire.ELECT)
    c.on_ack(ack("b@h", "a@h.1", mine["clock"]), T0)
    out = c.on_ack(ack("c@h", "a@h.1", mine["clock"]), T0)
    assert decided(out) == [ElectionDecided("e1", "b@h", "task")]
    assert not [e for e in out if isinstance(e, RunElection)]


def test_on_elect_ack_tie_on_clock_goes_to_the_lower_id() -> None:
    c = core(host="b@h", pid=2)
    c.s.clock.value = 4
    c.on_elect(elect("a@h", 9, clock=6), T0)  # same clock as ours will be: a@h.9 < b@h.2
    c.s.clock.value = 5
    (mine,) = pubs(c.election("e1", "task", None, T0), wire.ELECT)
    assert mine["clock"] == 6
    c.alive = {"a@h"}
    out = c.on_ack(ack("a@h", "b@h.2", 6), T0)
    assert decided(out) == [ElectionDecided("e1", "a@h", "task")]


def test_on_elect_ack_win_but_no_action() -> None:
    """Celery logs an unknown topic; here the shell owns the handlers, the core passes the
    topic and an action that may be None."""
    c = core(alive=())
    out = c.election("e1", "no-such-topic", None, T0)
    assert RunElection("no-such-topic", None, "e1") in out


def test_acks_for_another_proposal_do_not_count() -> None:
    """Celery counts every ack of the id: with two proposers that decides too early."""
    c = core()
    (mine,) = pubs(c.election("e1", "task", None, T0), wire.ELECT)
    c.on_ack(ack("b@h", "x@h.3", 2), T0)
    assert c.on_ack(ack("c@h", "x@h.3", 2), T0) == []
    assert c.on_ack(ack("c@h", "a@h.1", mine["clock"] - 1), T0) == []  # an older proposal
    assert "e1" in c.pending


def test_an_ack_teaches_the_lowest_candidate_it_knows() -> None:
    c = core()
    (mine,) = pubs(c.election("e1", "task", None, T0), wire.ELECT)
    c.on_ack(ack("b@h", "a@h.1", mine["clock"]), T0)
    hint = {"best": [0, "z@h", 4], "best_topic": "task"}  # z@h proposed; we missed it
    out = c.on_ack(ack("c@h", "a@h.1", mine["clock"], **hint), T0)
    assert decided(out) == [ElectionDecided("e1", "z@h", "task")]


# ---- agreement on a bus --------------------------------------------------------------------------


def test_concurrent_proposers_agree_and_one_runs() -> None:
    pump = started("a@h", "b@h", "c@h", "d@h")
    for name in pump.cores:  # everyone asks before anything is delivered
        pump.feed(name, pump.cores[name].election("e1", "task", {"by": name}, pump.now))
    pump.run()
    winners = {e.winner for n in pump.cores for e in pump.of(n, ElectionDecided)}
    assert len(winners) == 1
    runs = [(n, e) for n in pump.cores for e in pump.of(n, RunElection)]
    assert len(runs) == 1 and runs[0][0] == winners.pop()
    assert runs[0][1].action == {"by": runs[0][0]}  # the winner runs its own action
    for n in pump.cores:
        assert len(pump.of(n, ElectionDecided)) == 1


def test_everyone_learns_the_result() -> None:
    pump = started("a@h", "b@h", "c@h")
    pump.call("a@h", "election", "e1", "task", None)
    for n in pump.cores:
        assert pump.of(n, ElectionDecided) == [ElectionDecided("e1", "a@h", "task")]


def test_asking_again_after_the_result_answers_at_once() -> None:
    pump = started("a@h", "b@h")
    pump.call("a@h", "election", "e1", "task", None)
    pump.clear()
    out = pump.call("a@h", "election", "e1", "task", None)
    assert decided(out) == [ElectionDecided("e1", "a@h", "task")]
    assert not pump.of("a@h", RunElection)  # not twice


def test_a_late_proposer_gets_the_result_directly() -> None:
    c = core()
    c.alive = set()
    c.election("e1", "task", None, T0)
    out = c.on_elect(elect("b@h", 7, clock=99), T0)
    (d,) = [e for e in out if isinstance(e, Direct)]
    assert d.node == "b@h" and d.routing_key == wire.ELECT_RESULT
    assert d.body["winner"] == "a@h"


def test_conflicting_results_keep_the_lowest_everywhere() -> None:
    c = core()
    res = {"id": "e1", "topic": "task", "action": None}
    high = msg(wire.ELECT_RESULT, "b@h", 7, 1, **res, winner="b@h", winner_pid=7, winner_clock=9)
    low = msg(wire.ELECT_RESULT, "c@h", 8, 1, **res, winner="c@h", winner_pid=8, winner_clock=3)
    assert decided(c.on_result(high, T0)) == [ElectionDecided("e1", "b@h", "task")]
    assert decided(c.on_result(low, T0)) == [ElectionDecided("e1", "c@h", "task")]
    out = c.on_result(high, T0)  # the worse one again: ignored, and ours re-announced
    assert not decided(out)
    assert pubs(out, wire.ELECT_RESULT)[0]["winner"] == "c@h"


# ---- a participant that dies does not block ---------------------------------------------------------


def test_a_lost_participant_is_no_longer_waited_for() -> None:
    c = core()
    (mine,) = pubs(c.election("e1", "task", None, T0), wire.ELECT)
    c.on_ack(ack("b@h", "a@h.1", mine["clock"]), T0)
    out = c.node_gone("c@h", T0 + 9)  # c died before acking
    assert decided(out) == [ElectionDecided("e1", "a@h", "task")]


def test_a_dead_candidate_still_stands_so_late_deciders_agree() -> None:
    """b proposed lowest, then died: everyone still picks b (at most once, never twice)."""
    c = core()
    c.on_elect(elect("b@h", 7, clock=1), T0)
    (mine,) = pubs(c.election("e1", "task", None, T0), wire.ELECT)
    out = c.node_gone("b@h", T0 + 9)
    assert not decided(out)  # c has not acked
    out = c.on_ack(ack("c@h", "a@h.1", mine["clock"]), T0 + 9)
    assert decided(out) == [ElectionDecided("e1", "b@h", "task")]
    assert not [e for e in out if isinstance(e, RunElection)]


def test_a_candidacy_received_counts_as_its_ack() -> None:
    """Every node asks at once: b's and c's own proposals reach a, which then knows both
    candidacies and decides without waiting for their acks; a restart of b (gone) undoes it."""
    c = core()
    (mine,) = pubs(c.election("e1", "task", None, T0), wire.ELECT)
    assert not decided(c.on_elect(elect("b@h", 7, clock=mine["clock"] + 1), T0))
    c.node_gone("b@h", T0)
    c.node_joined("b@h", T0)
    assert not decided(c.on_elect(elect("c@h", 8, clock=mine["clock"] + 2), T0))
    out = c.on_ack(ack("b@h", "a@h.1", mine["clock"]), T0)  # b's new life acks: all covered
    assert decided(out) == [ElectionDecided("e1", "a@h", "task")]


def test_the_proposal_is_resent_until_the_deadline_then_a_clear_failure() -> None:
    c = core(retry=3.0, attempts=3)
    (mine,) = pubs(c.election("e1", "task", None, T0), wire.ELECT)
    c.on_ack(ack("b@h", "a@h.1", mine["clock"]), T0)
    key = TIMER_PREFIX + "e1"
    out = c.timer(key, T0 + 3)
    (again,) = pubs(out, wire.ELECT)
    assert again["clock"] == mine["clock"]  # the same proposal, not a new bid
    assert SetTimer(key, 3.0) in out
    c.timer(key, T0 + 6)
    out = c.timer(key, T0 + 9)
    (failed,) = [e for e in out if isinstance(e, ElectionFailed)]
    assert failed.election_id == "e1"
    assert "no ack from ['c@h']" in failed.reason
    assert c.timer(key, T0 + 12) == []


def test_blocking_elect_fails_at_its_timeout() -> None:
    from monitors.gossip.gossip_core import GossipCore

    g = GossipCore("a@h", 1)
    g.start(T0)
    g.timer("mingle", T0 + 1)
    g.receive(wire.HEARTBEAT, msg(wire.HEARTBEAT, "b@h", 7, freq=2.0), T0 + 1)  # never acks
    out = g.elect("e1", "task", None, 0.5, T0 + 1)
    assert SetTimer(TIMER_PREFIX + "e1", 0.5) in out
    out = g.timer(TIMER_PREFIX + "e1", T0 + 1.5)
    assert [e.election_id for e in out if isinstance(e, ElectionFailed)] == ["e1"]


def test_a_joining_node_gets_our_standing_proposal() -> None:
    c = core()
    c.election("e1", "task", None, T0)
    (d,) = c.node_joined("new@h", T0)
    assert isinstance(d, Direct) and d.node == "new@h" and d.routing_key == wire.ELECT
    assert "new@h" in c.alive


def test_reconnect_resends_our_proposal_then_our_acks() -> None:
    c = core()
    c.on_elect(elect("b@h", 7, clock=50), T0)
    c.election("e1", "task", None, T0)
    c.set_ready(False, T0)
    out = c.set_ready(True, T0 + 5, resend=True)
    rks = [e.routing_key for e in out if isinstance(e, Publish | Direct)]
    assert rks == [wire.ELECT, wire.ELECT_ACK]


def test_elections_wait_for_mingle() -> None:
    from monitors.gossip.gossip_core import GossipCore

    g = GossipCore("a@h", 1)
    g.start(T0)
    out = g.election("e1", "task", None, T0)
    assert not pubs(out, wire.ELECT)
    out = g.timer("mingle", T0 + 1)
    assert pubs(out, wire.ELECT) and decided(out)  # alone: proposed and decided


# ---- paused: never stands, never decides, still acks ----------------------------------------------------


def test_a_paused_node_acks_but_neither_stands_nor_decides() -> None:
    c = core()
    c.set_paused(True, T0)
    assert pubs(c.on_elect(elect("b@h", 7, clock=5), T0), wire.ELECT_ACK)  # still acks
    (mine,) = pubs(c.election("e1", "task", None, T0), wire.ELECT)
    assert mine["candidate"] is False
    c.on_ack(ack("b@h", "a@h.1", mine["clock"]), T0)
    assert not decided(c.on_ack(ack("c@h", "a@h.1", mine["clock"]), T0))


def test_a_candidate_paused_later_decides_only_once_resumed() -> None:
    c = core()
    (mine,) = pubs(c.election("e1", "task", None, T0), wire.ELECT)
    c.set_paused(True, T0)
    c.on_ack(ack("b@h", "a@h.1", mine["clock"]), T0)
    assert c.on_ack(ack("c@h", "a@h.1", mine["clock"]), T0) == []
    assert decided(c.set_paused(False, T0 + 1)) == [ElectionDecided("e1", "a@h", "task")]


def test_paused_minority_never_wins() -> None:
    pump = started("a@h", "b@h", "c@h")
    pump.call("a@h", "set_paused", True)
    for name in pump.cores:
        pump.feed(name, pump.cores[name].election("e1", "task", None, pump.now))
    pump.run()
    winners = {e.winner for n in pump.cores for e in pump.of(n, ElectionDecided)}
    assert len(winners) == 1 and "a@h" not in winners
    assert not pump.of("a@h", RunElection)


def test_only_paused_proposers_fail_with_no_candidate() -> None:
    c = core(alive=(), retry=1.0, attempts=1)
    c.set_paused(True, T0)
    c.election("e1", "task", None, T0)
    (failed,) = [e for e in c.timer(TIMER_PREFIX + "e1", T0 + 1) if isinstance(e, ElectionFailed)]
    assert failed.reason == "no candidate: every proposer was paused"


def test_a_paused_proposer_that_resumes_stands() -> None:
    c = core(alive=())
    c.set_paused(True, T0)
    c.election("e1", "task", {"x": 1}, T0)
    out = c.set_paused(False, T0 + 1)
    (again,) = pubs(out, wire.ELECT)
    assert again["candidate"] is True
    assert RunElection("task", {"x": 1}, "e1") in out


def test_won_while_paused_runs_on_resume() -> None:
    c = core()
    (mine,) = pubs(c.election("e1", "task", {"x": 1}, T0), wire.ELECT)
    c.on_ack(ack("b@h", "a@h.1", mine["clock"]), T0)
    c.set_paused(True, T0)  # paused after standing: the candidacy stays
    res = {"id": "e1", "topic": "task", "action": {"x": 1}}
    result = msg(
        wire.ELECT_RESULT,
        "c@h",
        8,
        1,
        **res,
        winner="a@h",
        winner_pid=1,
        winner_clock=mine["clock"],
    )
    out = c.on_result(result, T0)
    assert decided(out) and not [e for e in out if isinstance(e, RunElection)]
    assert c.ran == set()
    out = c.set_paused(False, T0 + 5)
    assert [e for e in out if isinstance(e, RunElection)] == [RunElection("task", {"x": 1}, "e1")]
    assert c.ran == {"e1"}
    assert not [e for e in c.set_paused(False, T0 + 6) if isinstance(e, RunElection)]


# ---- bounds -----------------------------------------------------------------------------------------


def test_pending_elections_are_bounded_and_forgotten() -> None:
    c = core(max_pending=2, forget=10.0)
    c.on_elect(elect("b@h", 7, 1, eid="x1"), T0)
    c.on_elect(elect("b@h", 7, 1, eid="x2"), T0)
    assert [e.text for e in c.on_elect(elect("b@h", 7, 1, eid="x3"), T0)] == [
        "election dropped: too many in progress"
    ]
    assert c.election("x4", "task", None, T0) == [
        ElectionFailed("x4", "too many elections in progress (2)")
    ]
    c.expire(T0 + 11)
    assert c.pending == {}


@pytest.mark.parametrize("bad", ["", "x" * 300])
def test_bad_election_ids_fail_cleanly(bad: str) -> None:
    from monitors.gossip.gossip_core import GossipCore

    (failed,) = GossipCore("a@h", 1).election(bad, "task", None, T0)
    assert isinstance(failed, ElectionFailed)
