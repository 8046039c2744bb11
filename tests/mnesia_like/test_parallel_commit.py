"""Parallel commit (MnesiaCore(parallel_commit=True), coordinator.py): a crash after every
effect of a commit, on each node and on two at once, keeps it atomic (every replica ends with
the write or none does) and durable (an acknowledged commit is on every replica); the outcome
is recovered from the participants' prepare records alone."""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest

from mnesia_like.effects import DiscCommit, Reply
from tests.mnesia_like.harness import Harness, cluster

A, B, C = "a@h", "b@h", "c@h"
OPTIONS = {"parallel_commit": True, "outcome_retry": 0.2, "outcome_timeout": 600.0}


def _setup() -> Harness:
    h = cluster(3, **OPTIONS)
    h.call(A, "create_table", name="t", attributes=["k", "v"], disc_copies=[A, B, C])
    h.call(A, "wait_for_tables", tables=["t"], timeout=5.0)
    h.transaction(A, [("tx_write", {"table": "t", "record": {"k": 1, "v": "old"}})])
    return h


def _commit_with_crashes(
    victim: str,
    nth: int,
    coordinator_too: bool,
    last_voter: str | None = None,
    after_ack: str | None = None,
) -> tuple[bool, Harness]:
    """Commit {k: 1, v: new} from a; crash `victim` right after its `nth` effect (and, with
    `coordinator_too`, a right after it acknowledges the commit; `after_ack` right after it
    acks the commit, its lazy table appends not yet on disc); then reboot and settle.
    `last_voter`: its prepare is held back until the others voted. Returns (the commit was
    acknowledged, the harness)."""
    h = _setup()
    tid = h.call(A, "tx_begin")["tid"]
    h.call(A, "tx_write", tid=tid, table="t", record={"k": 1, "v": "new"})
    seen = {victim: 0}
    acked: list[bool] = []

    def crash_after(node: str, effect: Any) -> bool:
        if isinstance(effect, Reply) and node == A and isinstance(effect.value, dict):
            acked.append(effect.error is None and bool(effect.value.get("stamp")))
            if coordinator_too and acked[-1]:
                return True
        if node == after_ack and getattr(effect, "msg", {}).get("t") == "ack":
            return True
        if node == victim:
            seen[victim] += 1
            return seen[victim] == nth
        return False

    h.submit(A, "tx_commit", tid=tid)
    held = [m for m in h.queue if m[1] == last_voter and m[2]["t"] == "prepare"]
    if held:
        h.queue = deque(m for m in h.queue if m not in held)
        h.run(max_time=0.0)  # the others prepare and vote; a waits for the last vote
        h.queue.extend(held)
    h.crash_after = crash_after
    h.run(max_time=0.0)
    h.crash_after = None
    down = [n for n in (A, B, C) if n not in h.cores]
    if down:
        h.boot(*down)
    h.heal_all()
    h.run(max_time=30.0)
    return bool(acked and acked[-1]), h


def _check(h: Harness, acked: bool) -> str:
    for n in (A, B, C):
        h.call(n, "wait_for_tables", tables=["t"], timeout=5.0)
    values = {n: h.content(n, "t").get("1", {}).get("v") for n in (A, B, C)}
    assert len(set(values.values())) == 1, f"atomicity: replicas differ {values}"
    value = values[A]
    assert value in ("old", "new"), values
    if acked:
        assert value == "new", f"durability: an acknowledged commit is lost: {values}"
    for n in (A, B, C):  # nothing left in doubt
        assert not h.cores[n].participant.txs, (n, h.cores[n].participant.txs)
    return str(value)


@pytest.mark.parametrize("last_voter", [None, C], ids=["fifo", "c-last"])
@pytest.mark.parametrize("coordinator_too", [False, True], ids=["one", "and-a"])
@pytest.mark.parametrize("victim", [A, B, C])
def test_a_crash_after_every_effect_of_a_parallel_commit(
    victim: str, coordinator_too: bool, last_voter: str | None
) -> None:
    outcomes = set()
    for nth in range(1, 25):
        acked, h = _commit_with_crashes(victim, nth, coordinator_too, last_voter)
        outcomes.add(_check(h, acked))
    assert "new" in outcomes  # the crash points reached past the commit, too


def test_no_decision_log_and_one_record_per_participant() -> None:
    h = _setup()
    before = {n: dict(h.discs[n].tables.get("_prepared", {})) for n in (A, B, C)}
    decisions = dict(h.discs[A].tables.get("_decisions", {}))  # the schema operation's
    h.transaction(A, [("tx_write", {"table": "t", "record": {"k": 2, "v": "x"}})])
    for n in (A, B, C):  # a marker waits for a later fsync: on disc, still the record
        new = {k: v for k, v in h.discs[n].tables["_prepared"].items() if k not in before[n]}
        assert [v["r"].get("d") for v in new.values()] == [None], (n, new)
    h.sync()
    for n in (A, B, C):
        after = h.discs[n].tables["_prepared"]
        new = {k: v for k, v in after.items() if k not in before[n]}
        # one record per transaction, become a committed marker once applied
        assert len(new) == 1, (n, new)
        assert next(iter(new.values()))["r"]["d"] == "committed"
    assert h.discs[A].tables.get("_decisions", {}) == decisions  # no decision logged


def _failures_with_three_crashes() -> int:
    """b crashed after each of its effects, a right after it answers, c right after its ack:
    the schedules where every replica must recover the outcome from prepare records alone."""
    failures = 0
    for nth in range(1, 25):
        acked, h = _commit_with_crashes(B, nth, True, last_voter=B, after_ack=C)
        try:
            _check(h, acked)
        except AssertionError:
            failures += 1
    return failures


def test_three_crashes_recover_the_outcome_from_the_records() -> None:
    assert _failures_with_three_crashes() == 0


def test_the_crash_test_catches_a_vote_before_its_prepare_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The check can fail: a participant that votes before its prepare record is on disc,
    crashed between the two, answers "never heard of it" after its restart; when the
    coordinator crashes after answering and the third participant after its ack, the two
    recover from their records, ask it, and abort an acknowledged commit."""
    from mnesia_like.participant import Participant

    real = Participant._vote_on

    def vote_first(self: Participant, sender: str, m: dict[str, Any], part: Any) -> Any:
        out = real(self, sender, m, part)
        if len(out) == 2 and isinstance(out[0], DiscCommit):
            out = [out[1], out[0]]
        return out

    monkeypatch.setattr(Participant, "_vote_on", vote_first)
    assert _failures_with_three_crashes() > 0
