"""Group commit in the Mnesia shell: one fsync per log for a batch of commits, and nothing
that depends on a commit (an ack, a reply, a message to another node) leaves before it.

Real stores over real NetKernels on loopback with real disc copies (tests/mnesia_like/
test_shell.py's Cluster). The check is made where effects are performed: whenever the shell
performs a message to another node or a final answer to a caller, no disc log of that store
may hold an appended commit that is not fsynced yet.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pykka
import pytest

from mnesia_like import Mnesia, MnesiaError, Schema
from mnesia_like.disc_log import TableLog
from mnesia_like.effects import DiscCommit, Reply
from mnesia_like.errors import Timeout
from monitors.effects import Send
from tests.mnesia_like.test_shell import Cluster, three
from tests.waiting import wait_until


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    yield c
    c.close()


@pytest.fixture
def classic_cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, parallel_commit=False)
    yield c
    c.close()


class Watch:
    """Counts appends and fsyncs, and finds every message to another node or final answer to
    a caller that a store performed before the fsync of a commit appended before the core
    asked for it (`violations`), and every `after` append (a committed marker) performed
    before everything appended before it was on disc, lazy appends included
    (`early_markers`). `fsyncs_of` counts the fsyncs per table log."""

    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        fsync_delay: float = 0.003,
        only: frozenset[str] | None = None,
        counted: Callable[[str, Any], bool] | None = None,
    ) -> None:
        self.violations: list[tuple[str, Any, str]] = []
        self.early_markers: list[tuple[str, str]] = []
        self.appends = 0
        self.fsyncs = 0
        self.fsyncs_of: dict[str, int] = {}
        raw: dict[int, int] = {}  # id(TableLog) -> every append, lazy ones included
        raw_synced: dict[int, int] = {}
        raw_covers: dict[int, int] = {}
        made_raw: dict[int, dict[int, int]] = {}
        real_perform_disc = Mnesia._perform_disc
        appended: dict[int, int] = {}  # id(TableLog) -> commits appended
        synced: dict[int, int] = {}  # id(TableLog) -> commits known to be on disc
        covers: dict[int, int] = {}  # id(SyncTicket) -> commits it covers
        made: dict[int, dict[int, int]] = {}  # id(effect) -> appended when the core made it
        names: dict[int, str] = {}
        real_perform_list = Mnesia._perform_list
        real_perform = Mnesia._perform_one
        real_append = TableLog.append_commit
        real_sync = TableLog.sync
        real_begin = TableLog.sync_begin
        real_end = TableLog.sync_end
        real_fdatasync = os.fdatasync
        watch = self

        def perform_list(shell: Mnesia, effects: Any) -> None:
            for effect in effects:  # one by one: each made after the effects before it ran
                made[id(effect)] = {id(t): appended.get(id(t), 0) for t in shell._logs.values()}
                if type(effect) is DiscCommit and effect.after:
                    made_raw[id(effect)] = {id(t): raw.get(id(t), 0) for t in shell._logs.values()}
                real_perform_list(shell, [effect])

        def perform_disc(shell: Mnesia, effect: Any) -> None:
            before = made_raw.pop(id(effect), None) if type(effect) is DiscCommit else None
            for key, count in (before or {}).items():
                if names.get(key) != effect.table and raw_synced.get(key, 0) < count:
                    watch.early_markers.append((shell.kernel.node, names.get(key, "?")))
            real_perform_disc(shell, effect)

        def perform_one(shell: Mnesia, effect: Any) -> None:
            kind = type(effect)
            before = made.pop(id(effect), {})
            if kind is Send or (kind is Reply and effect.req_id not in shell._early):
                for key, count in before.items():
                    if only is not None and names.get(key) not in only:
                        continue
                    if synced.get(key, 0) < count:
                        watch.violations.append((shell.kernel.node, effect, names[key]))
            real_perform(shell, effect)

        def append_commit(log: TableLog, tid: int, ops: Any, **kw: Any) -> None:
            watch.appends += 1
            real_append(log, tid, ops, **kw)
            raw[id(log)] = raw.get(id(log), 0) + 1
            names[id(log)] = log.table
            if counted is not None and not counted(log.table, ops):
                # an append nothing waits for: it does not count as appended until a later
                # counted one (an fsync covers both), so it never makes a violation itself
                return
            appended[id(log)] = appended.get(id(log), 0) + 1
            names[id(log)] = log.table

        def sync(log: TableLog) -> None:
            if log.unsynced:
                watch.fsyncs_of[log.table] = watch.fsyncs_of.get(log.table, 0) + 1
            real_sync(log)
            synced[id(log)] = appended.get(id(log), 0)
            raw_synced[id(log)] = raw.get(id(log), 0)

        def sync_begin(log: TableLog) -> Any:
            ticket = real_begin(log)
            if ticket is not None:
                watch.fsyncs_of[log.table] = watch.fsyncs_of.get(log.table, 0) + 1
                covers[id(ticket)] = appended.get(id(log), 0)
                raw_covers[id(ticket)] = raw.get(id(log), 0)
            return ticket

        def sync_end(log: TableLog, ticket: Any, error: Any = None) -> None:
            real_end(log, ticket, error)
            synced[id(log)] = max(synced.get(id(log), 0), covers.pop(id(ticket)))
            raw_synced[id(log)] = max(raw_synced.get(id(log), 0), raw_covers.pop(id(ticket)))

        def fdatasync(fd: int) -> None:
            watch.fsyncs += 1
            time.sleep(fsync_delay)  # a slow disc: commits queue up behind each fsync
            real_fdatasync(fd)

        monkeypatch.setattr(Mnesia, "_perform_list", perform_list)
        monkeypatch.setattr(Mnesia, "_perform_one", perform_one)
        monkeypatch.setattr(Mnesia, "_perform_disc", perform_disc)
        monkeypatch.setattr(TableLog, "append_commit", append_commit)
        monkeypatch.setattr(TableLog, "sync", sync)
        monkeypatch.setattr(TableLog, "sync_begin", sync_begin)
        monkeypatch.setattr(TableLog, "sync_end", sync_end)
        monkeypatch.setattr(os, "fdatasync", fdatasync)


def run_threads(n: int, fn: Callable[[int], None]) -> None:
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            fn(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors


def test_no_ack_or_reply_precedes_the_fsync_of_its_commit(
    classic_cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The classic commit, whose table appends are the durable ones (a parallel commit's
    are its prepare records: test_parallel_commit_answers_after_every_prepare_record...)."""
    cluster = classic_cluster
    watch = Watch(monkeypatch)
    a, b, _c = three(cluster)
    na, nb, nc = cluster.names
    a.create_table("n", disc_copies=[na, nb, nc])
    a.create_table("solo", disc_copies=[na])  # transactions with one participant
    per_client = 12

    def client(i: int) -> None:
        db = a if i % 2 else b
        for j in range(per_client):
            table = "solo" if i == 0 else "n"
            key = f"k{i}"

            def bump(tx: Any, table: str = table, key: str = key, w: bool = j % 2 == 1) -> None:
                row = tx.wread(table, key) if w else tx.read(table, key)
                tx.write(table, {"key": key, "value": (row["value"] if row else 0) + 1})

            (a if table == "solo" else db).transaction(bump)
            db.dirty_write("n", {"key": f"d{i}", "value": j})

    run_threads(5, client)
    assert watch.violations == []
    assert a.dirty_read("solo", "k0") == {"key": "k0", "value": per_client}
    for i in range(1, 5):
        for db in (a, b):
            wait_until(
                lambda db=db, i=i: db.dirty_read("n", f"k{i}") == {"key": f"k{i}", "value": 12},
                "replicated",
            )
    # a batch shares its fsyncs: fewer fsyncs than commits appended
    assert 0 < watch.fsyncs < watch.appends, (watch.fsyncs, watch.appends)


def test_the_check_catches_an_ack_that_does_not_wait(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the holding back, replies would leave before the fsync: the check sees it."""
    watch = Watch(monkeypatch)
    monkeypatch.setattr(Mnesia, "_may_pass", lambda *_args: True)
    db = cluster.start(cluster.names[0], extra_db_nodes=[])
    db.create_table("t", disc_copies=[cluster.names[0]])
    db.dirty_write("t", {"key": 1, "value": 1})
    assert any(type(v[1]) is Reply for v in watch.violations)


def test_a_failed_group_fsync_answers_nobody_and_ends_the_store(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = cluster.names[0]
    db = cluster.start(name, extra_db_nodes=[])
    db.create_table("t", disc_copies=[name])
    db.dirty_write("t", {"key": 1, "value": "durable"})
    ref = cluster.stores[name]

    def failing(_fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", failing)
    outcomes: list[Any] = []

    def writer(i: int) -> None:
        try:
            db.dirty_write("t", {"key": 10 + i, "value": "lost"})
            outcomes.append("acknowledged")
        except (MnesiaError, pykka.ActorDeadError) as exc:  # stopped, or gone before the call
            outcomes.append(exc)

    run_threads(3, writer)
    assert len(outcomes) == 3 and "acknowledged" not in outcomes
    # told at once that the store stopped, not left to wait out their timeout
    assert not [o for o in outcomes if isinstance(o, Timeout)], outcomes
    wait_until(lambda: not ref.is_alive(), "the store ended")
    monkeypatch.undo()
    cluster.stores.pop(name)
    again = cluster.start(name, extra_db_nodes=[])
    again.wait_for_tables(["t"], timeout=10)
    assert again.dirty_read("t", 1) == {"key": 1, "value": "durable"}


def _bump_from_three(cluster: Cluster) -> list:
    """Three stores, a disc table "c" on all, and 8 wread-then-write increments of one
    counter from each store at once (24 in all); returns the stores."""
    dbs = three(cluster)
    dbs[0].create_table("c", disc_copies=cluster.names)
    # a transaction: on every replica when it returns (a dirty write reaches the others later)
    dbs[0].transaction(lambda tx: tx.write("c", {"key": "n", "value": 0}))

    def bump(tx: Any) -> None:
        row = tx.wread("c", "n")
        tx.write("c", {"key": "n", "value": row["value"] + 1})

    def client(i: int) -> None:
        for _ in range(8):
            dbs[i].transaction(bump)

    run_threads(3, client)
    return dbs


def test_wread_counters_on_one_key_from_three_stores(cluster: Cluster) -> None:
    dbs = _bump_from_three(cluster)
    for db in dbs:
        assert db.dirty_read("c", "n") == {"key": "n", "value": 24}


def test_schema_read_keeps_its_default_lock(cluster: Cluster) -> None:
    db: Schema = cluster.start(cluster.names[0], extra_db_nodes=[])
    db.create_table("t", disc_copies=[cluster.names[0]])
    db.dirty_write("t", {"key": 1, "value": 1})
    assert db.transaction(lambda tx: tx.read("t", 1, lock="write")) == {"key": 1, "value": 1}
    with pytest.raises(MnesiaError, match="lock must be"):
        db.transaction(lambda tx: tx.read("t", 1, lock="sticky"))


def test_parallel_commit_answers_after_every_prepare_record_is_on_disc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """parallel_commit: votes and answers wait for the prepare records (the `_prepared` log),
    not for the tables' appends, which are lazy; counters from three stores add up, on
    every replica, and each store keeps a committed marker per transaction."""
    cluster = Cluster(tmp_path, parallel_commit=True)
    try:

        def record(table: str, ops: Any) -> bool:
            # a prepare record (a put of its body) or its deletion (an abort): what a vote or
            # an answer waits for; committed markers wait for nothing
            kind, _key, entry = ops[0]
            return kind == "del" or "ops" in (entry or {}).get("r", {})

        watch = Watch(monkeypatch, only=frozenset({"_prepared"}), counted=record)
        dbs = _bump_from_three(cluster)
        assert watch.violations == []
        assert watch.early_markers == []
        for db in dbs:
            wait_until(
                lambda db=db: db.dirty_read("c", "n") == {"key": "n", "value": 24}, "applied"
            )
        for name in cluster.names:
            prepared = tmp_path / name / "tables" / "_prepared.log"
            # the prepare records and markers: at least one record per transaction
            assert prepared.read_bytes().count(b"\xffRBL") > 25, name
    finally:
        cluster.close()


def _puts_from_one_store(cluster: Cluster, count: int) -> Schema:
    """Three stores, a disc table "p" on all, and `count` writes from store a, one after
    another, each its own transaction; returns store a."""
    dbs = three(cluster)
    dbs[0].create_table("p", disc_copies=cluster.names)
    for db in dbs:
        db.wait_for_tables(["p"], timeout=10)
    for n in range(count):
        dbs[0].transaction(lambda tx, n=n: tx.write("p", {"key": n % 5, "value": n}))
    return dbs[0]


@pytest.mark.parametrize("mutant", [False, True], ids=["shell", "markers-not-held"])
def test_parallel_commit_leaves_the_table_fsync_off_the_commit_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mutant: bool
) -> None:
    """A parallel commit's fsync is its prepare record's: the table append of the commit
    before it is lazy and waits for a later fsync (here never: LAZY_SYNC is an hour), so the
    table logs take no fsync per transaction; the committed markers, which must never reach
    the disc before the table appends they stand for, wait with them. The mutant releases
    the markers with the prepare record's fsync: the check sees each of them early."""
    monkeypatch.setattr("mnesia_like.shell.LAZY_SYNC", 3600.0)
    if mutant:
        defer = Mnesia._defer_lazy

        def markers_not_held(shell: Mnesia, batch: Any) -> Any:
            held = list(batch.held)
            later = defer(shell, batch)
            if later is not None:
                batch.held, later.held = held, []
            return later

        monkeypatch.setattr(Mnesia, "_defer_lazy", markers_not_held)
    cluster = Cluster(tmp_path, parallel_commit=True)
    try:
        watch = Watch(monkeypatch, fsync_delay=0.0)
        db = _puts_from_one_store(cluster, 20)
        if mutant:
            assert watch.early_markers
            return
        assert watch.early_markers == []
        assert watch.fsyncs_of.get("p", 0) == 0, watch.fsyncs_of
        assert watch.fsyncs_of.get("_prepared", 0) >= 20, watch.fsyncs_of
        assert db.dirty_read("p", 4) == {"key": 4, "value": 19}
    finally:
        cluster.close()
    # the lazy appends reach the disc at the latest with a clean stop: a restart has them
    cluster = Cluster(tmp_path, parallel_commit=True)
    try:
        name = cluster.names[0]
        again = cluster.start(name, extra_db_nodes=[], force_load=True)
        again.wait_for_tables(["p"], timeout=10)
        assert again.dirty_read("p", 4) == {"key": 4, "value": 19}
    finally:
        cluster.close()


def test_a_table_whose_lazy_appends_wait_can_be_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deleting a table whose parallel commits' appends still wait for their fsync (LAZY_SYNC
    made an hour long) takes its log out of the waiting batch: the stores go on committing,
    a clean stop syncs what is left, and a restart has no trace of the table."""
    monkeypatch.setattr("mnesia_like.shell.LAZY_SYNC", 3600.0)
    cluster = Cluster(tmp_path, parallel_commit=True)
    try:
        db = _puts_from_one_store(cluster, 10)
        db.delete_table("p")
        db.create_table("q", disc_copies=cluster.names)
        db.wait_for_tables(["q"], timeout=10)
        for n in range(5):
            db.transaction(lambda tx, n=n: tx.write("q", {"key": n, "value": n}))
        assert db.dirty_read("q", 4) == {"key": 4, "value": 4}
        assert all(ref.is_alive() for ref in cluster.stores.values())
    finally:
        cluster.close()
    cluster = Cluster(tmp_path, parallel_commit=True)
    try:
        again = cluster.start(cluster.names[0], extra_db_nodes=[], force_load=True)
        again.wait_for_tables(["q"], timeout=10)
        assert again.dirty_read("q", 4) == {"key": 4, "value": 4}
        assert "p" not in again.system_info("tables")
    finally:
        cluster.close()
