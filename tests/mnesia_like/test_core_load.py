"""MnesiaCore loading at start: the last-stopped rule, force_load, ram copies, durability."""

from __future__ import annotations

from tests.mnesia_like.harness import Harness, cluster

A, B, C = "a@h", "b@h", "c@h"


def disc_cluster(**options) -> Harness:
    h = cluster(3, **options)
    h.call(A, "create_table", name="t", attributes=["k", "v"], disc_copies=[A, B, C])
    return h


def loaded(h: Harness, node: str) -> bool:
    return "t" in h.cores[node].loaded


def test_the_last_node_to_stop_loads_from_its_disc_and_the_others_wait_for_it() -> None:
    h = disc_cluster()
    h.call(A, "dirty_write", table="t", record={"k": 1, "v": "before"})
    h.stop(C)
    h.stop(B)
    h.call(A, "dirty_write", table="t", record={"k": 1, "v": "only a has it"})
    h.stop(A)
    h.boot(B, C)
    h.run(max_time=3.0)
    assert not loaded(h, B) and not loaded(h, C)
    waits = h.logged("waiting for a node to load the table from")
    assert {n for n, _ in waits} == {B, C}
    assert all(log.fields["waiting_for"] == [A] for _, log in waits)
    h.boot(A)
    for n in h.names:
        assert h.call(n, "dirty_read", table="t", key=1) == {"k": 1, "v": "only a has it"}
    assert any("from local disc" in log.fields.get("how", "") for n, log in h.logs if n == A)


def test_force_load_overrides_the_wait() -> None:
    h = disc_cluster()
    h.call(A, "dirty_write", table="t", record={"k": 1, "v": "x"})
    h.stop(B)
    h.stop(A)
    h.stop(C)
    h.node_options[B]["force_load"] = True
    h.boot(B)
    assert loaded(h, B) and h.content(B, "t") == {"1": {"k": 1, "v": "x"}}


def test_the_wait_logs_again_as_an_error_after_the_load_timeout() -> None:
    h = disc_cluster(load_timeout=2.0)
    h.stop(C)
    h.stop(B)
    h.stop(A)
    h.boot(B)
    h.run(max_time=5.0)
    assert not loaded(h, B)
    assert h.logged("table still not loaded")
    assert h.events_of("load_timeout") == [(B, B, "t")]


def test_nodes_that_went_down_together_agree_on_the_newest_copy() -> None:
    h = disc_cluster()
    h.call(A, "dirty_write", table="t", record={"k": 1, "v": "x"})
    # a power cut: every node still believes the others were running
    for n in h.names:
        h.cores.pop(n)
    h.links.clear()
    h.boot(A, B, C)
    h.run(max_time=3.0)
    for n in h.names:
        assert loaded(h, n) and h.content(n, "t") == {"1": {"k": 1, "v": "x"}}


def test_acknowledged_commits_survive_crashes_of_every_node() -> None:
    h = disc_cluster()
    for i in range(5):
        h.transaction(A, [("tx_write", {"table": "t", "record": {"k": i, "v": i}})])
    h.crash(A)
    h.transaction(B, [("tx_write", {"table": "t", "record": {"k": 9, "v": 9}})])
    h.crash(B)
    h.crash(C)
    h.boot(A, B, C)
    h.run(max_time=3.0)
    for n in h.names:
        assert sorted(int(k) for k in h.content(n, "t")) == [0, 1, 2, 3, 4, 9]


def test_a_ram_table_loads_empty_when_no_replica_is_left_and_copies_otherwise() -> None:
    h = cluster(2)
    h.call(A, "create_table", name="r", ram_copies=[A, B])
    h.call(A, "dirty_write", table="r", record={"key": 1, "value": 1})
    h.crash(B)
    h.boot(B)
    assert h.content(B, "r") == {"1": {"key": 1, "value": 1}}
    h.crash(A)
    h.crash(B)
    h.boot(A)
    h.run(max_time=2.0)
    assert h.content(A, "r") == {}


def test_a_restarted_node_keeps_its_clock_ahead_of_its_old_stamps() -> None:
    h = disc_cluster()
    for i in range(20):
        h.call(C, "dirty_write", table="t", record={"k": 1, "v": i})
    stamp = h.discs[C].tables["t"]["1"]["s"][0]
    h.stop(A)
    h.stop(B)
    h.stop(C)
    h.boot(C)
    assert h.cores[C].clock >= stamp
