"""Beetle-style Redis failover in the simulator: seeded random schedules and scenes.

The random runs (tests/sim/failover.py: `generate`, `Checker`) kill the master, cut hosts off
a server or the broker, crash the active RCS (also exactly when it publishes invalidate or
sends Promote), hand over to another RCS cleanly or while the old one still believes it is
active, and crash worker hosts; then everything heals and the system must converge.

Invariants, checked as the run goes: (1) master files never name two different masters at
once; (2) a file names a master (writes never go to a replica); (4) a client invalidates only
while the master is down as seen from its host; (5) a promotion needs client_invalidated from
every client under the promoting RCS's token, and a client takes a new master only after every
client invalidated the old one. At the end (3): every file names S, the only master, which
every host reaches, and the active RCS watches S. docs/failover.md tells each one.

A failure prints the schedule, the trace tail and the command that replays it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest

from failover import client_core, server_core
from failover import messages as m
from failover.rcs.census import Census
from failover.rcs.round import Round
from failover.rcs.terms import Terms
from tests.sim.failover import (
    KINDS,
    LATER_KINDS,
    SERVERS,
    SETTLE,
    FailoverRun,
    FailoverSchedule,
    FailoverViolation,
    Op,
    check,
    generate,
    nodes_for,
    prepare,
    run_schedule,
)

R1, R2, R3 = SERVERS
SEEDS = range(40)
TOPOLOGIES = [(2, 2), (2, 3), (3, 2), (3, 3)]


def _run_and_check(s: FailoverSchedule, **options: Any) -> FailoverRun:
    run = prepare(s, **options)
    try:
        run.sim.run_until(s.end)
        check(run)
    except FailoverViolation as v:
        pytest.fail(run.report(v, s), pytrace=False)
    return run


@pytest.mark.parametrize(("n_rcs", "n_rcc"), TOPOLOGIES)
@pytest.mark.parametrize("seed", SEEDS)
def test_random_fault_schedules(seed: int, n_rcs: int, n_rcc: int) -> None:
    _run_and_check(generate(seed, n_rcs, n_rcc))


def test_runs_replay_exactly() -> None:
    a = run_schedule(generate(7, 3, 3))
    b = run_schedule(generate(7, 3, 3))
    assert [(e.t, e.node, e.what, repr(e.detail)) for e in a.kind.events] == [
        (e.t, e.node, e.what, repr(e.detail)) for e in b.kind.events
    ]
    assert a.sim.steps == b.sim.steps and a.redis.stats == b.redis.stats


# ---- scenes --------------------------------------------------------------------------------------


def play(
    ops: list[Op],
    heal_at: float,
    *,
    seed: int = 1,
    n_rcs: int = 2,
    n_rcc: int = 3,
    setup: Callable[[FailoverRun], None] | None = None,
    **options: Any,
) -> FailoverRun:
    """Run hand-written operations, heal at `heal_at`, settle, check everything."""
    rcs, rcc = nodes_for(n_rcs, n_rcc)
    s = FailoverSchedule(seed, rcs, rcc, ops, heal_at, heal_at + SETTLE)
    run = prepare(s, **options)
    if setup is not None:
        setup(run)
    try:
        run.sim.run_until(s.end)
        check(run)
    except FailoverViolation as v:
        pytest.fail(run.report(v, s), pytrace=False)
    return run


def promotes(run: FailoverRun) -> list[tuple[float, str, Any]]:
    return [(e.t, e.node, e.detail) for e in run.kind.of("promote")]


def notes(run: FailoverRun, text: str) -> list[tuple[float, str]]:
    return [(e.t, e.node) for e in run.kind.of("notify") if text in e.detail]


def file_history(run: FailoverRun, node: str) -> list[tuple[float, str | None]]:
    return [(e.t, e.detail) for e in run.kind.of("file") if e.node == node]


def final_master(run: FailoverRun) -> str:
    (name,) = set(run.checker.files().values())
    return name


def test_a_master_kill_promotes_the_replica_with_the_most_data() -> None:
    """r2 replicates once a second, r3 every 50 ms: r3 has more of the workers' writes when r1
    dies. Beetle would promote r2, the first in configured order."""

    def lagging_r2(run: FailoverRun) -> None:
        run.redis.servers[R2].sync_every = 1.0
        run.redis.servers[R3].sync_every = 0.05

    run = play([Op(3.2, "kill", (R1,))], heal_at=12.0, setup=lagging_r2)
    ((t, rcs, server),) = promotes(run)
    assert server == R3 and rcs == "rcs1@sim"
    # the kill closes the RCS's watch connection, the check at once is refused: no retries,
    # only the ping and invalidate rounds (each client checks r1 itself, refused too)
    assert 3.2 < t <= 3.2 + 0.1
    assert run.kind.of("connection_lost")[0].t < 3.2 + 0.01
    assert final_master(run) == R3
    assert run.redis.servers[R1].master == R3  # the old master came back as a replica


def test_a_master_silent_for_less_than_the_retries_causes_no_switch() -> None:
    """Beetle's "Redis master only temporarily down", for a master that gives no answer (a
    SIGSTOP: nothing refuses, no connection closes): no round, files never emptied."""
    run = play([Op(3.0, "hang_master"), Op(4.5, "revive_all")], heal_at=6.0)
    assert not promotes(run) and not run.kind.of("ping")[1:]  # only the census ping
    assert not run.kind.of("connection_lost")
    for node in run.rcc:
        assert file_history(run, node) == []


def test_a_hung_master_keeps_the_deliberate_checks() -> None:
    """No answer is not a refusal: a hung master is switched after the 3 failed checks."""
    run = play([Op(3.2, "hang_master")], heal_at=12.0)
    ((t, _, server),) = promotes(run)
    assert 3.2 + 2.0 <= t <= 3.2 + 3.0 + 2.0  # 3 checks, 1 s apart; each client's own check
    assert server != R1 and final_master(run) == server


def test_a_refusal_seen_by_the_rcs_alone_causes_no_switch() -> None:
    """The master refuses the RCS's connections (a REJECT rule, a proxy that is down) but
    serves the workers: the refusal starts a round at once, and every client refuses to
    invalidate a master it still reaches. After that cancelled round, refusals count as
    ordinary failures (3 checks per round), so the rounds do not come every tick."""
    run = play([Op(3.0, "reject_master", ("active", 10.0))], heal_at=14.0)
    assert not promotes(run) and final_master(run) == R1
    cancelled = notes(run, "switch cancelled")
    assert 2 <= len(cancelled) <= 3
    first_ping = next(e.t for e in run.kind.of("ping") if e.t > 3.0)
    assert first_ping < 3.0 + 1.1  # the first refusal is believed, at the next check
    for node in run.rcc:
        assert file_history(run, node) == []


def test_a_cut_between_the_rcs_and_the_master_causes_no_switch() -> None:
    """The RCS cannot reach r1 for 10 s, the workers can: every round is cancelled (the
    clients refuse to invalidate a master they still use) and nobody's file is emptied."""
    run = play([Op(3.0, "cut_master", ("active", 10.0))], heal_at=14.0)
    assert not promotes(run)
    assert len(notes(run, "switch cancelled")) >= 2
    for node in run.rcc:
        assert file_history(run, node) == []
    assert final_master(run) == R1


def test_one_worker_host_that_still_sees_the_master_blocks_the_switch() -> None:
    ops = [Op(3.0, "cut_master", (n, 10.0)) for n in ("rcs1@sim", "w1@sim", "w2@sim")]
    run = play(ops, heal_at=14.0)
    assert not promotes(run) and final_master(run) == R1
    assert file_history(run, "w3@sim") == []  # w3 never stopped using r1


def test_an_rcc_that_cannot_be_reached_blocks_the_switch() -> None:
    run = play([Op(2.5, "bus_cut", ("w3@sim", 10.0)), Op(3.0, "kill", (R1,))], heal_at=25.0)
    ((t, _, server),) = promotes(run)
    assert t > 12.5  # only once w3 is back on the broker
    assert notes(run, "no pong from ['w3@sim']")
    assert final_master(run) == server != R1


def test_no_replica_available_resorts_to_the_old_master() -> None:
    """Beetle's "No redis slave available to become new master"."""
    ops = [Op(2.0, "kill", (R2,)), Op(2.0, "kill", (R3,)), Op(3.0, "kill", (R1,))]
    run = play([*ops, Op(12.0, "revive_all")], heal_at=13.0)
    assert notes(run, "no slave available to become new master, promoting old master")
    assert not promotes(run) and final_master(run) == R1


def test_a_clean_handover_keeps_the_master_and_the_new_rcs_switches_later() -> None:
    run = play([Op(5.0, "handover", (0.2,)), Op(10.0, "kill", (R1,))], heal_at=20.0)
    ((t, rcs, _),) = promotes(run)
    assert (
        rcs == "rcs2@sim" and 10.0 < t < 10.2
    )  # the new RCS watches r1 too: a kill is seen at once
    old = run.kind.host(run.sim, "rcs1@sim")
    assert old is not None and not old.core.active
    new = run.kind.host(run.sim, "rcs2@sim")
    assert new is not None and new.core.term == 2


@pytest.mark.parametrize("when", ["ping", "invalidate", "promote"])
def test_an_active_rcs_crashing_mid_switch_is_finished_by_its_successor(when: str) -> None:
    """Crash the active RCS exactly when it pings, invalidates, or has sent Promote (the
    command reaches Redis; the announcement never goes out). The next one finishes: one
    promotion in all, one master at the end."""
    ops = [Op(3.0, "crash_on", (when,)), Op(3.001, "kill", (R1,)), Op(16.0, "revive_all")]
    run = play(ops, heal_at=18.0)
    assert run.active == "rcs2@sim"
    ((_, rcs, server),) = promotes(run)
    # after Promote the successor adopts the promoted replica; before it, it promotes one
    assert rcs == ("rcs1@sim" if when == "promote" else "rcs2@sim")
    assert run.redis.masters() == [final_master(run)] == [server]


def test_a_fresh_rcs_elected_at_once_keeps_the_master_the_workers_use() -> None:
    """Found by the simulator: both RCS crash after a switch to a replica; the old master r1
    comes back a master; an RCS booted with its own stale file (r1) is elected at once. It
    must ask the workers (census) rather than announce r1."""

    def setup(run: FailoverRun) -> None:
        sim = run.sim
        sim.at(10.0, run.crash, "rcs1@sim")
        sim.at(10.0, run.crash, "rcs2@sim")
        sim.at(11.0, run.redis.revive, R1)
        sim.at(12.0, sim.boot, "rcs2@sim")
        sim.at(12.0, run.elect, "rcs2@sim")

    run = play([Op(3.0, "kill", (R1,))], heal_at=14.0, setup=setup)
    ((_, _, server),) = promotes(run)
    assert final_master(run) == server
    assert run.sim.nodes["rcs2@sim"].disk["rcs_master"] == server


def test_an_isolated_rcs_does_not_touch_its_successors_master() -> None:
    """rcs1 loses the broker (and so the election) but still reaches Redis. rcs2 switches
    away from r1; r1 returns. rcs1, not told, sees its master back: it must not turn rcs2's
    master into a replica (its term is not confirmed by the clients), nor announce r1."""
    ops = [
        Op(3.0, "bus_cut", ("active", 12.0)),
        Op(3.001, "overlap", (12.0,)),
        Op(3.5, "kill", (R1,)),
        Op(10.0, "revive_all"),
    ]
    run = play(ops, heal_at=16.0)
    assert [e.node for e in run.kind.of("promote")] == ["rcs2@sim"]
    assert not [e for e in run.kind.of("make_replica") if e.node == "rcs1@sim"]
    assert final_master(run) != R1


def test_a_deposed_rcs_that_hears_the_new_term_stands_down() -> None:
    run = play([Op(3.0, "overlap", (5.0,))], heal_at=9.0)
    downs = notes(run, "standing down")
    assert downs and downs[0][1] == "rcs1@sim" and downs[0][0] < 3.1
    assert not promotes(run) and final_master(run) == R1


def test_workers_write_only_to_masters_throughout() -> None:
    run = run_schedule(generate(3, 3, 3))
    assert run.redis.stats["writes"] > 1000 and run.redis.stats["refused"] == 0


# ---- the checker has teeth: each safety mechanism, removed, breaks an invariant ----------------

_receive = client_core.ConfigurationClientCore.receive
_rcc_info = client_core.ConfigurationClientCore.redis_info


def _rcc_any_token(self: Any, routing_key: str, body: Any, now: float) -> Any:
    if isinstance(body, dict) and body.get("type") in (m.PING, m.INVALIDATE, m.RECONFIGURE):
        self.max_token = m.NO_TOKEN  # Beetle with two RCSes: the last message wins
    return _receive(self, routing_key, body, now)


def _rcc_no_check(self: Any, request_id: int, infos: Any, now: float) -> Any:
    return _rcc_info(self, request_id, dict.fromkeys(infos), now)  # the doc's check, not done


def _no_standdown(self: Any, tok: m.Token, who: str, now: float) -> list[Any]:
    self.s.max_heard = max(self.s.max_heard, tok)
    return []


C, S = client_core.ConfigurationClientCore, server_core.ConfigurationServerCore
# (mechanism removed, patches, a schedule it fails, the invariant): the seeds come from a
# sweep of 120 seeds x 3 topologies with each mutant (docs/failover.md, "What the simulator
# found"); a change to `generate` changes the schedules, and these need looking up again.
MUTANTS = [
    ("clients do not check the master", [(C, "redis_info", _rcc_no_check)], (3, 3, 2),
     "no_invalidation_while_master_visible"),
    ("switch after the pongs", [(Round, "invalidate", lambda self, now: self.switch.start(now))],
     (0, 3, 2), "all_invalidated"),
    ("switch when the round times out",
     [(Round, "timed_out", lambda self, now: self.switch.start(now))],
     (3, 3, 2), "all_invalidated"),
    ("no census at activation", [(Census, "census", lambda self, now: self.s.detect(now))],
     (6, 2, 3), "all_invalidated"),
    ("no term confirmation before demoting", [(S, "term_confirmed", lambda self, now: True)],
     (4, 2, 2), "files_name_masters"),
    ("no terms", [(C, "receive", _rcc_any_token), (Terms, "hear", _no_standdown)], (67, 3, 3),
     "one_master_in_files"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("patches", "schedule", "invariant"),
    [pytest.param(p, s, i, id=name) for name, p, s, i in MUTANTS],
)
def test_the_invariants_catch_a_missing_safety_mechanism(
    patches: list[tuple[type, str, Any]], schedule: tuple[int, int, int], invariant: str
) -> None:
    patchers = [mock.patch.object(cls, attr, fn) for cls, attr, fn in patches]
    for p in patchers:
        p.start()
    try:
        with pytest.raises(FailoverViolation) as info:
            check(run_schedule(generate(*schedule)))
    finally:
        for p in patchers:
            p.stop()
    assert info.value.invariant == invariant


@pytest.mark.parametrize(("n_rcs", "n_rcc"), [(2, 3), (3, 2)])
@pytest.mark.parametrize("seed", range(20))
def test_random_schedules_with_silent_and_refusing_masters(
    seed: int, n_rcs: int, n_rcc: int
) -> None:
    """The later fault kinds mixed in: masters that hang (no answer) and masters that refuse
    the active RCS alone (the refusal fast path must still never switch without the clients)."""
    _run_and_check(generate(seed, n_rcs, n_rcc, kinds=(*KINDS, *LATER_KINDS, *LATER_KINDS)))
