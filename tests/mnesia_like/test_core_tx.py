"""MnesiaCore transactions: locks on every replica, 2PC, wait-die restarts, aborts, failures."""

from __future__ import annotations

from typing import Any

import pytest

from mnesia_like.errors import BadArgument, Restart, TablesNotLoaded
from tests.mnesia_like.harness import Harness, cluster

A, B, C = "a@h", "b@h", "c@h"


def setup(n: int = 3, **options: Any) -> Harness:
    h = cluster(n, **options)
    h.call(A, "create_table", name="t", attributes=["k", "v"], disc_copies=[A, B], ram_copies=[C])
    return h


def begin(h: Harness, node: str, age: Any = None) -> tuple[str, Any]:
    r = h.call(node, "tx_begin", age=age)
    return r["tid"], r["age"]


@pytest.mark.parametrize("parallel", [False, True], ids=["classic", "parallel"])
def test_a_transaction_commits_on_every_replica_and_disc_before_ack(parallel: bool) -> None:
    """On every replica when it returns; on disc too (a parallel commit's table writes reach
    it with the next fsync: its prepare records held them when the caller was answered)."""
    h = setup(parallel_commit=parallel)
    h.transaction(C, [("tx_write", {"table": "t", "record": {"k": 1, "v": "a"}})])
    r = h.transaction(
        B,
        [
            ("tx_read", {"table": "t", "key": 1}),
            lambda res: ("tx_write", {"table": "t", "record": {"k": 1, "v": res[0]["v"] + "b"}}),
            ("tx_delete", {"table": "t", "key": 1}),
            ("tx_read", {"table": "t", "key": 1}),  # sees its own delete
            ("tx_write", {"table": "t", "record": {"k": 2, "v": "c"}}),
        ],
    )
    assert r[0] == {"k": 1, "v": "a"} and r[3] is None
    for n in h.names:
        assert h.content(n, "t") == {"2": {"k": 2, "v": "c"}}
    if parallel:
        h.sync()
    for n in (A, B):
        assert h.discs[n].tables["t"]["2"]["r"] == {"k": 2, "v": "c"}
        assert h.discs[n].tables["t"]["1"]["r"] is None  # a tombstone


def test_match_and_select_in_a_transaction_see_its_own_writes() -> None:
    h = setup()
    h.call(A, "dirty_write", table="t", record={"k": 1, "v": "x"})
    h.call(A, "dirty_write", table="t", record={"k": 2, "v": "x"})
    r = h.transaction(
        C,
        [
            ("tx_write", {"table": "t", "record": {"k": 3, "v": "x"}}),
            ("tx_delete", {"table": "t", "key": 1}),
            ("tx_match", {"table": "t", "pattern": {"v": "x"}}),
            ("tx_select", {"table": "t", "spec": {"where": [["k", ">", 1]], "fields": ["k"]}}),
        ],
    )
    assert sorted(x["k"] for x in r[2]) == [2, 3]
    assert sorted(x["k"] for x in r[3]) == [2, 3]


def test_an_aborted_transaction_leaves_nothing_behind() -> None:
    h = setup()
    tid, _ = begin(h, A)
    h.call(A, "tx_write", tid=tid, table="t", record={"k": 1, "v": "gone"})
    h.call(A, "tx_abort", tid=tid)
    for n in h.names:
        assert h.content(n, "t") == {}
        assert not h.cores[n].locks.tids()
    assert h.discs[A].tables["t"] == {}


def test_the_older_transaction_waits_at_its_prepare_and_commits_with_the_newer_stamp() -> None:
    h = setup()
    old, _ = begin(h, A)
    young, _ = begin(h, B)
    h.call(B, "tx_read", tid=young, table="t", key=1, lock="write")  # young holds the lock
    # a write takes no lock round: its lock is taken by the prepare ...
    assert h.call(A, "tx_write", tid=old, table="t", record={"k": 1, "v": "old"}) is None
    req = h.submit(A, "tx_commit", tid=old)
    h.run()
    assert h.result(A, req) is None  # ... where the older one waits for the younger's lock
    h.call(B, "tx_write", tid=young, table="t", record={"k": 1, "v": "young"})
    young_stamp = h.call(B, "tx_commit", tid=young)["stamp"]
    reply = h.result(A, req)
    assert reply is not None and reply.error is None
    # Committed after the younger one, the older one's write must win on every replica:
    # its stamp is given at the decision, not at the prepare it waited in.
    assert reply.value["stamp"] > young_stamp
    for n in h.names:
        assert h.content(n, "t")["1"] == {"k": 1, "v": "old"}


def test_a_younger_transaction_dies_at_its_prepare_on_an_older_ones_lock() -> None:
    h = setup()
    old, _ = begin(h, A)
    young, _ = begin(h, B)
    h.call(A, "tx_read", tid=old, table="t", key=1, lock="write")
    h.call(B, "tx_write", tid=young, table="t", record={"k": 1, "v": "young"})
    with pytest.raises(Restart, match="older transaction"):
        h.call(B, "tx_commit", tid=young)
    h.call(A, "tx_write", tid=old, table="t", record={"k": 1, "v": "old"})
    h.call(A, "tx_commit", tid=old)
    for n in h.names:
        assert h.content(n, "t")["1"] == {"k": 1, "v": "old"}
        assert not h.cores[n].locks.tids()


def test_a_deadlock_restarts_the_younger_one() -> None:
    h = setup()
    old, _ = begin(h, A)
    young, _ = begin(h, B)
    h.call(A, "tx_read", tid=old, table="t", key=1, lock="write")
    h.call(B, "tx_read", tid=young, table="t", key=2, lock="write")
    req = h.submit(A, "tx_read", tid=old, table="t", key=2, lock="write")  # waits
    h.run()
    with pytest.raises(Restart, match="older transaction"):
        h.call(B, "tx_read", tid=young, table="t", key=1, lock="write")
    reply = h.result(A, req)
    assert reply is not None and reply.error is None
    h.call(A, "tx_write", tid=old, table="t", record={"k": 1, "v": "old"})
    h.call(A, "tx_write", tid=old, table="t", record={"k": 2, "v": "old"})
    h.call(A, "tx_commit", tid=old)
    assert h.content(B, "t") == {"1": {"k": 1, "v": "old"}, "2": {"k": 2, "v": "old"}}
    with pytest.raises(Restart):  # the dead one is gone everywhere
        h.call(B, "tx_commit", tid=young)


def test_a_participant_down_before_the_decision_restarts_and_leaves_nothing() -> None:
    h = setup()
    tid, _ = begin(h, A)
    h.call(A, "tx_write", tid=tid, table="t", record={"k": 1, "v": "x"})
    h.crash(C)
    with pytest.raises(Restart, match="c@h went down"):
        h.call(A, "tx_commit", tid=tid)
    assert h.content(A, "t") == {} and h.content(B, "t") == {}
    assert not h.cores[A].locks.tids() and not h.cores[B].locks.tids()
    # and the retry works without it
    h.transaction(A, [("tx_write", {"table": "t", "record": {"k": 1, "v": "y"}})])
    assert h.content(B, "t") == {"1": {"k": 1, "v": "y"}}


def test_prepared_participants_that_lose_the_coordinator_ask_each_other() -> None:
    """The coordinator (C) goes after A got the commit but before B did: B asks A, and
    commits."""
    h = setup()
    tid, _ = begin(h, C)
    h.call(C, "tx_write", tid=tid, table="t", record={"k": 1, "v": "x"})
    h.submit(C, "tx_commit", tid=tid)
    # deliver until A has the commit
    while h.queue:
        src, dst, msg = h.queue[0]
        if msg["t"] == "commit" and dst == B:
            break
        h.queue.popleft()
        core = h.cores.get(dst)
        if core is not None:
            h.perform(dst, core.receive(src, msg, h.now))
    assert h.content(A, "t") == {"1": {"k": 1, "v": "x"}} and h.content(B, "t") == {}
    h.crash(C)
    h.run()
    assert h.content(B, "t") == {"1": {"k": 1, "v": "x"}}
    assert h.logged("resolved: committed")


def _deliver_until(h: Harness, stop: str) -> None:
    """Deliver queued messages in order until the next one is of type `stop`."""
    while h.queue:
        src, dst, msg = h.queue[0]
        if msg["t"] == stop:
            return
        h.queue.popleft()
        h.perform(dst, h.cores[dst].receive(src, msg, h.now))


@pytest.mark.parametrize("decided", [False, True])
def test_in_doubt_participants_wait_for_the_coordinator(decided: bool) -> None:
    """The classic commit: the coordinator goes after the participants voted yes. They wait
    for it (it may only be cut off); once it is back it answers from its decision log:
    committed if it had all the votes (it may have applied its part and answered the user),
    else unknown: abort. (A parallel commit's participants decide alone: test_parallel_commit.)"""
    h = setup(parallel_commit=False)
    tid, _ = begin(h, C)
    h.call(C, "tx_write", tid=tid, table="t", record={"k": 1, "v": "x"})
    h.submit(C, "tx_commit", tid=tid)
    if decided:
        _deliver_until(h, "commit")
    else:
        _deliver_until(h, "vote")
        while h.queue and h.queue[0][2]["t"] != "prepare":  # the votes are lost
            h.queue.popleft()
        _deliver_until(h, "vote")
    h.queue.clear()
    h.crash(C)
    h.run(max_time=3.0)
    assert h.cores[A].locks.tids() and h.cores[B].locks.tids()
    h.boot(C)
    for n in (A, B):
        assert h.content(n, "t") == ({"1": {"k": 1, "v": "x"}} if decided else {})
        assert not h.cores[n].locks.tids()
    if decided:
        assert h.logged("resolved: committed")
        # applied with the stamp of the decision, which the decision log kept
        (decision,) = h.discs[C].tables["_decisions"].values()
        for n in (A, B):
            assert h.discs[n].tables["t"]["1"]["s"] == decision["r"]["st"]
    else:
        assert h.logged("its coordinator restarted")


def test_an_operation_without_an_active_replica_fails_clearly() -> None:
    h = cluster(2)
    h.call(A, "create_table", name="r", ram_copies=[B])
    h.crash(B)
    tid, _ = begin(h, A)
    with pytest.raises(TablesNotLoaded, match="no active replica"):
        h.call(A, "tx_read", tid=tid, table="r", key=1)
    with pytest.raises(TablesNotLoaded):
        h.call(A, "dirty_write", table="r", record={"key": 1})


def test_schema_operations_conflict_like_transactions() -> None:
    h = setup()
    tid, _ = begin(h, B)  # older than the schema op below
    h.call(B, "tx_write", tid=tid, table="t", record={"k": 1, "v": "x"})
    h.call(A, "create_table", name="u", ram_copies=[A, C])
    h.call(B, "tx_commit", tid=tid)
    assert sorted(h.call(C, "system_info", key="tables")) == ["t", "u"]


def test_a_loading_replica_gets_writes_committed_while_it_copies() -> None:
    h = setup()
    for i in range(5):
        h.call(A, "dirty_write", table="t", record={"k": i, "v": "old"})
    h.crash(C)
    h.call(A, "dirty_write", table="t", record={"k": 0, "v": "while down"})
    h.boot(C)
    assert h.content(C, "t") == h.content(A, "t")
    assert h.content(C, "t")["0"]["v"] == "while down"


# ---- the decision log, and reads that take the write lock (wread)


def test_a_transaction_only_this_node_takes_part_in_logs_no_decision() -> None:
    """The classic commit: nobody can be in doubt about a transaction only this node takes
    part in, so its commit record is the decision (no fsync of the decision log on its
    path). With other participants the decision is logged first."""
    h = setup(parallel_commit=False)
    h.call(A, "create_table", name="solo", attributes=["k", "v"], disc_copies=[A])
    decisions = dict(h.discs[A].tables["_decisions"])  # the schema transactions'
    h.transaction(A, [("tx_write", {"table": "solo", "record": {"k": 1, "v": "x"}})])
    assert h.discs[A].tables["solo"]["1"]["r"] == {"k": 1, "v": "x"}
    assert h.discs[A].tables["_decisions"] == decisions
    h.transaction(A, [("tx_write", {"table": "t", "record": {"k": 1, "v": "y"}})])
    assert len(h.discs[A].tables["_decisions"]) == len(decisions) + 1
    assert not h.discs[B].tables.get("_decisions")  # only the coordinator logs it


def test_wread_takes_the_write_lock_and_the_write_needs_no_lock_round() -> None:
    h = setup()
    h.call(A, "dirty_write", table="t", record={"k": 1, "v": 0})
    old, _ = begin(h, B)
    young, _ = begin(h, C)
    assert h.call(B, "tx_read", tid=old, table="t", key=1, lock="write") == {"k": 1, "v": 0}
    for n in (A, B, C):
        assert (old, "t", "1", "write") in [(old, *x) for x in h.cores[n].locks.held_by(old)]
    # a younger reader conflicts with the write lock at once (a plain read lock would share)
    with pytest.raises(Restart, match="older transaction"):
        h.call(C, "tx_read", tid=young, table="t", key=1)
    # the write is buffered without messages: answered before anything is delivered
    sent = len(h.queue)
    req = h.submit(B, "tx_write", tid=old, table="t", record={"k": 1, "v": 1})
    reply = h.result(B, req)
    assert reply is not None and reply.error is None and len(h.queue) == sent
    h.call(B, "tx_commit", tid=old)
    for n in h.names:
        assert h.content(n, "t") == {"1": {"k": 1, "v": 1}}
        assert not h.cores[n].locks.tids()


def test_read_modify_writes_with_wread_on_one_key_serialise() -> None:
    """Two increments of one counter: with wread the older waits at its read and the younger
    restarts there, so neither reads a value the other then overwrites."""
    h = setup()
    h.call(A, "dirty_write", table="t", record={"k": "n", "v": 0})
    old, _ = begin(h, A)
    young, _ = begin(h, B)
    r_young = h.call(B, "tx_read", tid=young, table="t", key="n", lock="write")
    req = h.submit(A, "tx_read", tid=old, table="t", key="n", lock="write")
    h.run()
    assert h.result(A, req) is None  # the older one waits for the younger
    h.call(B, "tx_write", tid=young, table="t", record={"k": "n", "v": r_young["v"] + 1})
    h.call(B, "tx_commit", tid=young)
    reply = h.result(A, req)
    assert reply is not None and reply.value == {"k": "n", "v": 1}  # it sees the young commit
    h.call(A, "tx_write", tid=old, table="t", record={"k": "n", "v": reply.value["v"] + 1})
    h.call(A, "tx_commit", tid=old)
    assert h.content(C, "t") == {'"n"': {"k": "n", "v": 2}}


def test_a_wread_write_after_a_replica_lost_the_lock_restarts_at_prepare() -> None:
    """The shortcut trusts the locks it was granted; a replica that dropped them (it reloaded
    its tables) votes no, so the transaction restarts instead of committing unlocked."""
    h = setup()
    tid, _ = begin(h, A)
    h.call(A, "tx_read", tid=tid, table="t", key=1, lock="write")
    h.perform(B, h.cores[B].drop_transactions())  # B forgets every transaction (an autoheal reload)
    h.run()
    h.call(A, "tx_write", tid=tid, table="t", record={"k": 1, "v": "x"})
    with pytest.raises(Restart, match="voted no"):
        h.call(A, "tx_commit", tid=tid)
    for n in h.names:
        assert h.content(n, "t") == {}


def test_a_bad_lock_mode_is_refused() -> None:
    h = setup()
    tid, _ = begin(h, A)
    with pytest.raises(BadArgument, match="lock must be"):
        h.call(A, "tx_read", tid=tid, table="t", key=1, lock="exclusive")
    with pytest.raises(BadArgument, match="lock"):  # only reads take a lock mode
        h.call(A, "tx_match", tid=tid, table="t", pattern={}, lock="write")


def test_a_caller_chosen_tid_and_the_age_of_the_attempt_before() -> None:
    """Schema.transaction begins without waiting: it picks the tid and, on a restart, names
    the attempt before, whose age the new one keeps (wait-die's fairness)."""
    h = setup()
    first = h.call(A, "tx_begin", tid="tx-1")
    assert first["tid"] == "tx-1"
    h.call(A, "tx_write", tid="tx-1", table="t", record={"k": 1, "v": "x"})
    h.call(A, "tx_abort", tid="tx-1")
    again = h.call(A, "tx_begin", tid="tx-2", prev="tx-1")
    assert again["age"] == first["age"]
    fresh = h.call(A, "tx_begin", tid="tx-3", prev="never-seen")
    assert fresh["age"] > first["age"]
    with pytest.raises(BadArgument, match="not a new tid"):
        h.call(A, "tx_begin", tid="tx-2")  # still running
    h.call(A, "tx_write", tid="tx-2", table="t", record={"k": 1, "v": "y"})
    h.call(A, "tx_commit", tid="tx-2")
    assert h.content(B, "t") == {"1": {"k": 1, "v": "y"}}
