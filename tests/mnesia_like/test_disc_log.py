"""TableLog: round trips, dumps, crash points between a dump's steps, torn and damaged logs,
limits, and a real kill -9 of a process appending with fsync per commit."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnesia_like.disc_log import (
    CommitTooLarge,
    DiscLogError,
    TableLog,
    check_table_name,
    key_from_json,
    key_json,
    tables_dir,
)

REPO = Path(__file__).resolve().parents[2]


def entry(value: Any, ts: int = 1) -> dict[str, Any]:
    return {"v": value, "ts": [ts, "a@host"], "del": False}


def reopen(path: Path, table: str = "t", **kwargs: Any) -> TableLog:
    return TableLog.open(path, table, **kwargs)


# -- round trips ----------------------------------------------------------------------------------


def test_round_trip_keeps_entries_tid_and_keys_as_given(tmp_path: Path) -> None:
    with TableLog.open(tmp_path, "t") as t:
        t.append_commit(1, [("put", "a", entry(1)), ("put", 1, entry(2)), ("put", 1.0, entry(3))])
        t.append_commit(2, [("put", True, entry(4)), ("put", ["x", 2], entry(5))])
        t.append_commit(3, [("del", "a", None), ("put", ("x", 3), entry(6))])
        assert t.last_tid == 3
        before = dict(t.entries)
    with reopen(tmp_path) as t:
        assert t.entries == before
        assert t.last_tid == 3
        assert t.recovered.replayed == 3
        # 1, 1.0 and True are three keys, as in Erlang; a tuple key comes back as a list.
        assert t.get(1) == entry(2) and t.get(1.0) == entry(3) and t.get(True) == entry(4)
        assert t.get("a") is None
        assert sorted(map(repr, (k for k, _ in t.items()))) == sorted(
            map(repr, [1, 1.0, True, ["x", 2], ["x", 3]])
        )
        assert len(t) == 5


def test_key_json_is_canonical_and_refuses_non_keys() -> None:
    assert key_json(("a", 1)) == key_json(["a", 1]) == '["a",1]'
    assert key_from_json(key_json(["a", [1.5, False]])) == ["a", [1.5, False]]
    for bad in (None, {"a": 1}, ["ok", None], object()):
        with pytest.raises(TypeError, match="key"):
            key_json(bad)
    with pytest.raises(ValueError, match="key"):
        key_json(float("nan"))


def test_bad_ops_and_tids_write_nothing(tmp_path: Path) -> None:
    with TableLog.open(tmp_path, "t") as t:
        t.append_commit(5, [("put", "a", entry(1))])
        size = t.log_path.stat().st_size
        with pytest.raises(TypeError, match=r"'b'.*not JSON"):
            t.append_commit(6, [("put", "ok", entry(1)), ("put", "b", entry({1, 2}))])
        with pytest.raises(TypeError, match="not JSON"):
            t.append_commit(6, [("put", "b", entry(float("inf")))])
        with pytest.raises(TypeError, match="key"):
            t.append_commit(6, [("put", {"k": 1}, entry(1))])
        with pytest.raises(ValueError, match="not above"):
            t.append_commit(5, [("put", "b", entry(1))])
        with pytest.raises(ValueError, match="'put' or 'del'"):
            t.append_commit(6, [("upsert", "b", entry(1))])
        with pytest.raises(ValueError, match="without an entry"):
            t.append_commit(6, [("put", "b", None)])
        assert t.log_path.stat().st_size == size
        assert t.last_tid == 5 and list(t.entries) == ['"a"']
        t.append_commit(6, [("put", "b", entry(2))])  # still usable
    with reopen(tmp_path) as t:
        assert t.last_tid == 6 and set(t.entries) == {'"a"', '"b"'}


def test_oversized_commit_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    with TableLog.open(tmp_path, "t", max_commit_bytes=1000) as t:
        t.append_commit(1, [("put", "a", entry("x" * 100))])
        size = t.log_path.stat().st_size
        with pytest.raises(CommitTooLarge, match=r"table 't': commit 2 is \d+ bytes.*1000"):
            t.append_commit(2, [("put", "b", entry("x" * 2000))])
        assert t.log_path.stat().st_size == size and t.last_tid == 1 and len(t) == 1
        t.append_commit(2, [("put", "b", entry("y"))])
    with reopen(tmp_path) as t:
        assert t.last_tid == 2 and len(t) == 2


@pytest.mark.parametrize(
    "name", ["", "../etc", "a/b", ".hidden", "..", "a b", "t\x00", "x" * 201, "é", 7]
)
def test_unsafe_table_names_are_refused(tmp_path: Path, name: Any) -> None:
    with pytest.raises(ValueError, match="table name") as info:
        TableLog.open(tmp_path, name)
    assert repr(name) in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_table_names_that_are_safe_pass() -> None:
    for name in ("rabbit_queue", "t", "a.b-c_1", "x" * 200):
        assert check_table_name(name) == name
    assert tables_dir("/data/a") == Path("/data/a/tables")


def test_a_table_is_opened_by_one_owner_at_a_time(tmp_path: Path) -> None:
    with TableLog.open(tmp_path, "t"), pytest.raises(DiscLogError, match="locked"):
        TableLog.open(tmp_path, "t")
    TableLog.open(tmp_path, "t").close()  # closing released the lock


def test_fsync_policies(tmp_path: Path) -> None:
    for i, policy in enumerate(("none", 0.05, 30.0)):
        with TableLog.open(tmp_path, f"t{i}", fsync=policy) as t:
            t.append_commit(1, [("put", "a", entry(1))])
            t.sync()
            assert not t.sync_due
        with reopen(tmp_path, f"t{i}") as t:
            assert t.last_tid == 1
    with pytest.raises(ValueError, match="fsync"):
        TableLog.open(tmp_path, "t", fsync="always")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fsync"):
        TableLog.open(tmp_path, "t", fsync=0)


def test_fsync_commit_syncs_each_record_before_returning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # kill -9 cannot show a missing fsync (the page cache survives a process); count them.
    from mnesia_like import disc_log

    synced: list[int] = []
    real = os.fdatasync

    def recording_fdatasync(fd: int) -> None:
        real(fd)
        synced.append(os.fstat(fd).st_size)

    monkeypatch.setattr(disc_log.os, "fdatasync", recording_fdatasync)
    with TableLog.open(tmp_path, "c", fsync="commit") as t:
        for tid in (1, 2, 3):
            t.append_commit(tid, [("put", "a", entry(tid))])
            assert synced[-1] == t.log_bytes  # this very record was on disc at return
        assert len(synced) == 3
    with TableLog.open(tmp_path, "n", fsync="none") as t:
        synced.clear()
        t.append_commit(1, [("put", "a", entry(1))])
        assert synced == []
    assert len(synced) == 1  # close() syncs what is pending, whatever the policy


def test_group_commit_appends_without_fsync_and_one_sync_covers_them_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mnesia_like import disc_log

    synced: list[int] = []
    real = os.fdatasync

    def recording_fdatasync(fd: int) -> None:
        real(fd)
        synced.append(os.fstat(fd).st_size)

    monkeypatch.setattr(disc_log.os, "fdatasync", recording_fdatasync)
    with TableLog.open(tmp_path, "g", fsync="commit") as t:
        assert not t.unsynced
        for tid in (1, 2, 3):
            t.append_commit(tid, [("put", tid, entry(tid))], sync=False)
        assert synced == [] and t.unsynced  # written, not yet durable: no ack may go out
        t.sync()
        assert synced == [t.log_bytes] and not t.unsynced  # one fsync for the three
        t.sync()
        assert len(synced) == 1  # nothing pending: no second fsync
        t.append_commit(4, [("put", 4, entry(4))])  # the default still syncs at once
        assert len(synced) == 2 and not t.unsynced
    with reopen(tmp_path, "g") as t:
        assert t.last_tid == 4 and sorted(t.entries) == ["1", "2", "3", "4"]


def test_a_failed_group_fsync_refuses_further_appends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mnesia_like import disc_log

    def failing(_fd: int) -> None:
        raise OSError(5, "Input/output error")

    t = TableLog.open(tmp_path, "t")
    t.append_commit(1, [("put", "a", entry(1))], sync=False)
    monkeypatch.setattr(disc_log.os, "fdatasync", failing)
    with pytest.raises(DiscLogError, match="fsync failed"):
        t.sync()
    monkeypatch.undo()
    with pytest.raises(DiscLogError, match="refuses appends since fsync failed"):
        t.append_commit(2, [("put", "b", entry(2))], sync=False)
    t.close()


def test_a_failed_fsync_is_not_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mnesia_like import disc_log

    def failing(_fd: int) -> None:
        raise OSError(5, "Input/output error")

    t = TableLog.open(tmp_path, "t")
    monkeypatch.setattr(disc_log.os, "fdatasync", failing)
    with pytest.raises(DiscLogError, match="fsync failed"):
        t.append_commit(1, [("put", "a", entry(1))])
    monkeypatch.undo()
    assert t.last_tid == 0 and len(t) == 0  # not applied: the caller must not ack it
    with pytest.raises(DiscLogError, match="refuses appends since fsync failed"):
        t.append_commit(2, [("put", "b", entry(2))])
    t.close()


def test_a_closed_log_refuses_appends(tmp_path: Path) -> None:
    t = TableLog.open(tmp_path, "t")
    t.close()
    with pytest.raises(DiscLogError, match="closed"):
        t.append_commit(1, [])


# -- dumps and replacement --------------------------------------------------------------------------


def test_dump_then_reopen_loads_the_snapshot_and_the_tail(tmp_path: Path) -> None:
    with TableLog.open(tmp_path, "t") as t:
        for tid in range(1, 11):
            t.append_commit(tid, [("put", tid % 4, entry(tid))])
        t.dump()
        assert t.log_records == 0
        t.append_commit(11, [("del", 0, None), ("put", "new", entry(11))])
        expected = dict(t.entries)
    with reopen(tmp_path) as t:
        assert t.entries == expected and t.last_tid == 11
        assert t.recovered.snapshot_records == 4 and t.recovered.snapshot_tid == 10
        assert t.recovered.replayed == 1 and t.recovered.skipped == 0


def test_maybe_dump_follows_the_thresholds(tmp_path: Path) -> None:
    with TableLog.open(tmp_path, "t", dump_records=3) as t:
        t.append_commit(1, [("put", "a", entry(1))])
        t.append_commit(2, [("put", "a", entry(2))])
        assert not t.dump_due and not t.maybe_dump()
        t.append_commit(3, [("put", "a", entry(3))])
        assert t.dump_due and t.maybe_dump()
        assert t.log_records == 0 and t.snap_path.exists()
        t.append_commit(4, [("put", "b", entry("x" * 500))])
        assert not t.maybe_dump()
        assert t.maybe_dump(nbytes=500)  # the log has grown past 500 bytes
        assert t.maybe_dump(records=0)  # a threshold given per call wins
    with reopen(tmp_path) as t:
        assert t.last_tid == 4 and t.recovered.replayed == 0


def test_crash_after_the_snapshot_rename_before_the_log_reset(tmp_path: Path) -> None:
    # dump() is: write the snapshot (generation + 1), then start a new log. Do only the first
    # step, as if killed in between: the old log must be discarded, not replayed again.
    with TableLog.open(tmp_path, "t") as t:
        t.append_commit(1, [("put", "k", entry(1))])
        t.append_commit(2, [("del", "k", None)])
        t.append_commit(3, [("put", "j", entry(3))])
        t._write_snapshot(t._gen + 1, t.last_tid, t.entries)
        expected = dict(t.entries)
    with reopen(tmp_path) as t:
        assert t.entries == expected and t.last_tid == 3
        assert t.recovered.stale_log and t.recovered.skipped == 3 and t.recovered.replayed == 0
        t.append_commit(4, [("put", "k", entry(4))])  # the new log works
    with reopen(tmp_path) as t:
        assert not t.recovered.stale_log and t.recovered.replayed == 1
        assert t.get("k") == entry(4) and t.get("j") == entry(3)


def test_replay_skips_tids_the_snapshot_already_holds(tmp_path: Path) -> None:
    # The backstop behind generations: a snapshot of the same generation taken at tid 2 must
    # not have tids 1 and 2 replayed over it (tid 1 would bring back the key tid 2 deleted).
    with TableLog.open(tmp_path, "t") as t:
        t.append_commit(1, [("put", "k", entry(1))])
        t.append_commit(2, [("del", "k", None), ("put", "j", entry(2))])
        t._write_snapshot(t._gen, 2, t.entries)
        t.append_commit(3, [("put", "i", entry(3))])
    with reopen(tmp_path) as t:
        assert t.get("k") is None and t.get("j") == entry(2) and t.get("i") == entry(3)
        assert (t.recovered.skipped, t.recovered.replayed, t.last_tid) == (2, 1, 3)


def test_replace_all_and_a_crash_in_its_middle(tmp_path: Path) -> None:
    with TableLog.open(tmp_path, "t") as t:
        for tid in range(1, 6):
            t.append_commit(tid, [("put", f"old{tid}", entry(tid))])
        t.replace_all({key_json("new"): entry("n")}, tid=2)  # the other node's (lower) tid
        assert t.entries == {'"new"': entry("n")} and t.last_tid == 2
        t.append_commit(3, [("put", "after", entry(3))])
    with reopen(tmp_path) as t:
        assert set(t.entries) == {'"new"', '"after"'} and t.last_tid == 3
        # Crash after the new snapshot is in place but before the log reset: the old log's
        # tids (above the new snapshot's tid) must still not be replayed over it.
        t.append_commit(9, [("put", "stale", entry(9))])
        t._write_snapshot(t._gen + 1, 1, {key_json("only"): entry("o")})
    with reopen(tmp_path) as t:
        assert t.entries == {'"only"': entry("o")} and t.last_tid == 1
    with TableLog.open(tmp_path, "t") as t, pytest.raises(TypeError):
        t.replace_all({key_json("bad"): entry({1})}, tid=7)


@pytest.mark.parametrize("crash_at_rename", [1, 2])
@pytest.mark.parametrize("operation", ["dump", "replace_all"])
def test_a_crash_at_each_rename_of_a_dump_leaves_old_or_new_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crash_at_rename: int, operation: str
) -> None:
    # A dump renames twice (snapshot, then the new log). Stop it at either rename, as a
    # crash would, and reopen: the table is the old content or the new, never a mixture.
    from mnesia_like import disc_log

    t = TableLog.open(tmp_path, "t")
    t.append_commit(1, [("put", "k", entry(1))])
    t.append_commit(2, [("del", "k", None), ("put", "j", entry(2))])
    old = dict(t.entries)
    new = old if operation == "dump" else {key_json("n"): entry("n")}
    renames = 0
    real_replace = os.replace

    def crashing_replace(src: Any, dst: Any) -> None:
        nonlocal renames
        renames += 1
        if renames == crash_at_rename:
            raise OSError("simulated crash")
        real_replace(src, dst)

    monkeypatch.setattr(disc_log.os, "replace", crashing_replace)
    with pytest.raises((OSError, DiscLogError)):
        t.dump() if operation == "dump" else t.replace_all(new, tid=1)
    monkeypatch.undo()
    if crash_at_rename == 2:  # the snapshot is in place: appends to the old log are refused
        with pytest.raises(DiscLogError, match="reopen"):
            t.append_commit(3, [("put", "lost", entry(3))])
    t.close()
    with reopen(tmp_path) as t:
        assert t.entries == (old if crash_at_rename == 1 else new)
        assert t.recovered.stale_log == (crash_at_rename == 2)


def test_delete_files_removes_the_table(tmp_path: Path) -> None:
    t = TableLog.open(tmp_path, "t")
    t.append_commit(1, [("put", "a", entry(1))])
    t.dump()
    t.append_commit(2, [("put", "b", entry(2))])
    t.delete_files()
    assert list(tmp_path.iterdir()) == []
    with reopen(tmp_path) as t:
        assert t.entries == {} and t.last_tid == 0


def test_corrupt_snapshot_raises_naming_the_file(tmp_path: Path) -> None:
    with TableLog.open(tmp_path, "t") as t:
        t.append_commit(1, [("put", "a", entry(1))])
        t.dump()
    data = bytearray((tmp_path / "t.snap").read_bytes())
    data[-3] ^= 0x01
    (tmp_path / "t.snap").write_bytes(bytes(data))
    with pytest.raises(DiscLogError, match=r"t\.snap.*CRC32"):
        reopen(tmp_path)
    (tmp_path / "t.snap").write_bytes(b"junk")
    with pytest.raises(DiscLogError, match=r"t\.snap.*shorter"):
        reopen(tmp_path)


# -- torn and damaged logs ----------------------------------------------------------------------------


def _three_commits(path: Path) -> tuple[bytes, list[int], dict[str, Any]]:
    """A log of three commits: its bytes, each record's start offset, and the state after 2."""
    starts = []
    with TableLog.open(path, "t") as t:
        for tid in (1, 2, 3):
            starts.append(t.log_bytes)
            t.append_commit(tid, [("put", f"k{tid}", entry("é" * tid)), ("del", "k1", None)])
            if tid == 2:
                after_two = dict(t.entries)
    return (path / "t.log").read_bytes(), starts, after_two


def test_torn_tail_is_cut_at_every_byte_of_the_last_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data, starts, after_two = _three_commits(tmp_path)
    last = starts[2]
    log_path = tmp_path / "t.log"
    for cut in range(last, len(data)):
        log_path.write_bytes(data[:cut])
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="mnesia_like.disc_log"):
            t = reopen(tmp_path)
        try:
            assert t.last_tid == 2 and t.entries == after_two, cut
            if cut > last:
                assert t.recovered.truncated_bytes == cut - last
                assert t.recovered.truncated_at == last
                assert f"{log_path}: cutting it at offset {last} ({cut - last} bytes" in caplog.text
            assert log_path.stat().st_size == last
        finally:
            t.close()
    # After a cut, appends go on from a clean end.
    with reopen(tmp_path) as t:
        t.append_commit(3, [("put", "again", entry(3))])
    with reopen(tmp_path) as t:
        assert t.last_tid == 3 and t.recovered.truncated_bytes == 0


def test_a_damaged_byte_anywhere_in_the_last_record_is_a_tail_cut(tmp_path: Path) -> None:
    data, starts, after_two = _three_commits(tmp_path)
    for i in range(starts[2], len(data)):
        damaged = bytearray(data)
        damaged[i] ^= 0x40
        (tmp_path / "t.log").write_bytes(bytes(damaged))
        with reopen(tmp_path) as t:
            assert t.last_tid == 2 and t.entries == after_two, i
            assert t.recovered.truncated_bytes == len(data) - starts[2]


def test_damage_in_the_middle_raises_naming_file_and_offset(tmp_path: Path) -> None:
    data, starts, _ = _three_commits(tmp_path)
    log_path = tmp_path / "t.log"
    for i in range(starts[1], starts[2]):  # every byte of the middle record, header included
        damaged = bytearray(data)
        damaged[i] ^= 0x40
        log_path.write_bytes(bytes(damaged))
        with pytest.raises(DiscLogError) as info:
            reopen(tmp_path)
        assert f"{log_path}: damaged record at offset {starts[1]}" in str(info.value), i
        assert f"intact record at offset {starts[2]}" in str(info.value)
        assert log_path.read_bytes() == bytes(damaged)  # nothing was cut


def test_a_zeroed_hole_in_the_middle_raises_and_repair_cuts_it(tmp_path: Path) -> None:
    data, starts, _ = _three_commits(tmp_path)
    hole = data[: starts[1]] + bytes(starts[2] - starts[1]) + data[starts[2] :]
    (tmp_path / "t.log").write_bytes(hole)
    with pytest.raises(DiscLogError, match="repair=True"):
        reopen(tmp_path)
    with reopen(tmp_path, repair=True) as t:
        assert t.last_tid == 1 and (tmp_path / "t.log").stat().st_size == starts[1]


def test_a_record_with_a_good_checksum_but_bad_json_is_not_taken_for_a_torn_tail(
    tmp_path: Path,
) -> None:
    from mnesia_like.disc_log import _frame

    data, _, _ = _three_commits(tmp_path)
    (tmp_path / "t.log").write_bytes(data + _frame(b"[4,[[") + _frame(b"[5,[]]x"))
    with pytest.raises(DiscLogError, match=f"offset {len(data)} has a good checksum but bad JSON"):
        reopen(tmp_path)
    (tmp_path / "t.log").write_bytes(data + _frame(b"[5,[]]x"))
    with pytest.raises(DiscLogError, match=f"offset {len(data)} .* ends at offset"):
        reopen(tmp_path)


def test_a_log_of_another_table_or_format_is_refused(tmp_path: Path) -> None:
    with TableLog.open(tmp_path, "t") as t:
        t.append_commit(1, [("put", "a", entry(1))])
    os.rename(tmp_path / "t.log", tmp_path / "u.log")
    with pytest.raises(DiscLogError, match="the log of table 't', not 'u'"):
        TableLog.open(tmp_path, "u")


# -- a model check -----------------------------------------------------------------------------------

_KEYS = st.sampled_from(["a", "b", 1, 1.0, True, ["a", 1]])
_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), _KEYS, st.integers(0, 9)),
        st.tuples(st.just("del"), _KEYS, st.none()),
        st.tuples(st.sampled_from(["dump", "reopen", "replace"]), st.none(), st.none()),
    ),
    max_size=30,
)


@settings(max_examples=40, deadline=None)
@given(_STEPS)
def test_any_sequence_of_commits_dumps_and_reopens_matches_a_dict(steps: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        model: dict[str, Any] = {}
        t = TableLog.open(tmp, "t", fsync="none")
        tid = 0
        try:
            for kind, key, value in steps:
                if kind in ("put", "del"):
                    tid += 1
                    t.append_commit(tid, [(kind, key, None if value is None else entry(value))])
                    if kind == "put":
                        model[key_json(key)] = entry(value)
                    else:
                        model.pop(key_json(key), None)
                elif kind == "dump":
                    t.dump()
                elif kind == "replace":
                    model = {key_json("r"): entry(tid)}
                    t.replace_all(model, tid)
                else:
                    t.close()
                    t = TableLog.open(tmp, "t", fsync="none")
                assert t.entries == model and t.last_tid == tid
        finally:
            t.close()
        with TableLog.open(tmp, "t") as t:
            assert json.dumps(t.entries, sort_keys=True) == json.dumps(model, sort_keys=True)


# -- kill -9 ------------------------------------------------------------------------------------------

_WRITER = textwrap.dedent(
    """
    import sys
    from mnesia_like.disc_log import TableLog

    t = TableLog.open(sys.argv[1], "t", fsync="commit", dump_records=int(sys.argv[2]))
    background = sys.argv[3] == "background"
    tid = t.last_tid
    while True:
        tid += 1
        ops = [("put", f"k{tid}", {"v": "x" * (tid % 300), "ts": [tid, "w"], "del": False})]
        if tid % 5 == 0:
            ops.append(("del", f"k{tid - 3}", None))
        t.append_commit(tid, ops)
        sys.stdout.write(f"{tid}\\n")
        sys.stdout.flush()
        t.maybe_dump(background=background)
    """
)


def _acked_until_killed(tmp_path: Path, acks_before_kill: int, dump_every: int, how: str) -> list:
    """Run the writer (dumps "inline" or in the "background") until it acknowledged
    `acks_before_kill` commits, SIGKILL it, and return every commit it acknowledged."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(tmp_path), str(dump_every), how],
        stdout=subprocess.PIPE,
        env=env,
        cwd=REPO,
    )
    assert child.stdout is not None
    acked: list[int] = []
    try:
        while len(acked) < acks_before_kill:
            line = child.stdout.readline()
            assert line, f"writer ended early (exit code {child.wait()})"
            acked.append(int(line))
        os.kill(child.pid, signal.SIGKILL)
        # Through the buffered reader: readline() has read ahead, and communicate() reads the
        # raw pipe, which would drop acks already in that buffer (seen: 6 acks lost).
        rest = child.stdout.read()
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL
    # Acks written to the pipe before the kill still count; a torn last line does not.
    acked += [int(line) for line in rest.decode().splitlines(keepends=True) if line.endswith("\n")]
    return acked


def _expected_keys(last_tid: int) -> set[str]:
    keys = {key_json(f"k{tid}") for tid in range(1, last_tid + 1)}
    return keys - {key_json(f"k{tid - 3}") for tid in range(5, last_tid + 1, 5)}


@pytest.mark.parametrize(("acks_before_kill", "dump_every"), [(150, 40), (233, 7)])
def test_kill_9_loses_no_acknowledged_commit(
    tmp_path: Path, acks_before_kill: int, dump_every: int
) -> None:
    acked = _acked_until_killed(tmp_path, acks_before_kill, dump_every, "inline")
    with TableLog.open(tmp_path, "t") as t:
        # Every acknowledged commit is there, and at most the one in flight beyond them.
        assert max(acked) <= t.last_tid <= max(acked) + 1
        assert set(t.entries) == _expected_keys(t.last_tid)
        for tid in acked:
            if tid % 5 != 2 or tid + 3 > t.last_tid:  # not deleted by a later commit
                assert t.get(f"k{tid}") == {"v": "x" * (tid % 300), "ts": [tid, "w"], "del": False}


# -- background dumps ---------------------------------------------------------------------------------


def _copy_as_crash(src: Path, dst: Path) -> Path:
    """The table's files as a kill -9 at this instant leaves them (the page cache survives)."""
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.is_file():
            (dst / f.name).write_bytes(f.read_bytes())
    return dst


def _run_dump_to_the_switch(t: TableLog) -> None:
    assert t.dump_start()
    job = t._dump
    assert job is not None and job.thread is not None
    job.thread.join(10)
    assert t.dump_poll()  # the switch: the dump is still in flight, writing its snapshot


def test_a_crash_at_every_step_of_a_background_dump_loses_no_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Commits go on (fsync per commit: each one acknowledged when it returns) between the
    # steps; at each step the files are copied as a crash there would leave them, and each
    # copy must open with every commit acknowledged by then, nothing more, nothing less.
    from mnesia_like import disc_log

    live = tmp_path / "live"
    crashes: dict[str, tuple[Path, dict[str, Any], int]] = {}
    t = TableLog.open(live, "t")
    model: dict[str, Any] = {}
    tid = 0

    def commit(n: int) -> None:
        nonlocal tid
        for _ in range(n):
            tid += 1
            ops: list[Any] = [("put", f"k{tid}", entry(tid))]
            if tid % 4 == 0:
                ops.append(("del", f"k{tid - 2}", None))
                model.pop(key_json(f"k{tid - 2}"), None)
            t.append_commit(tid, ops)
            model[key_json(f"k{tid}")] = entry(tid)

    write_may_go = __import__("threading").Event()

    def hook(step: str, tlog: TableLog) -> None:
        if step == "snapshot-renamed":
            assert write_may_go.wait(10)  # the owner commits while the snapshot is written
        crashes[step] = (_copy_as_crash(live, tmp_path / step), dict(model), tid)

    monkeypatch.setattr(disc_log, "_DUMP_HOOK", hook)
    commit(20)
    assert t.dump_start()
    assert t._dump is not None and t._dump.thread is not None
    t._dump.thread.join(10)  # "next-ready" copied: snapshot 0, log 0, next 1 (header only)
    commit(3)  # still into the old log: the switch waits for the owner's poll
    assert t.dump_poll()  # the switch ("switched" copied)
    commit(10)  # into the next log while the thread writes the snapshot
    write_may_go.set()
    t._dump.thread.join(10)
    assert not t.dump_poll() and not t.dumping  # "snapshot-renamed" and "log-renamed" copied
    commit(5)
    final = dict(model)
    t.close()
    monkeypatch.setattr(disc_log, "_DUMP_HOOK", None)
    assert set(crashes) == {"next-ready", "switched", "snapshot-renamed", "log-renamed"}
    # what each crash point leaves: both logs before the snapshot's rename, next alone after
    assert (tmp_path / "next-ready" / "t.log.next").exists()
    assert (tmp_path / "snapshot-renamed" / "t.log.next").exists()
    assert not (tmp_path / "log-renamed" / "t.log.next").exists()
    for step, (path, expected, last) in crashes.items():
        with reopen(path) as c:
            assert c.entries == expected, step
            assert c.last_tid == last, step
            c.append_commit(last + 1, [("put", "after", entry(0))])  # and it goes on
        with reopen(path) as c:
            assert c.get("after") == entry(0) and not c.next_path.exists(), step
    with reopen(live) as t:
        assert t.entries == final and t.last_tid == tid
        assert t.recovered.snapshot_tid == 23 and t.recovered.replayed == 15


def test_commits_proceed_while_a_background_dump_is_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The dump's thread is held inside its snapshot write; the owner's commits must not wait
    # for it (each append returns, fsynced, while the dump is still in flight).
    import threading

    from mnesia_like import disc_log

    held, release = threading.Event(), threading.Event()

    def hook(step: str, tlog: TableLog) -> None:
        if step == "snapshot-renamed":
            held.set()
            assert release.wait(10)

    monkeypatch.setattr(disc_log, "_DUMP_HOOK", hook)
    t = TableLog.open(tmp_path, "t", dump_records=5)
    try:
        for tid in range(1, 6):
            t.append_commit(tid, [("put", tid, entry(tid))])
        assert t.maybe_dump(background=True)
        assert t._dump is not None and t._dump.thread is not None
        t._dump.thread.join(10)
        assert not t.maybe_dump(background=True)  # moves it on: the switch
        assert held.wait(10)
        for tid in range(6, 56):  # the dump is stuck in its thread: commits go on
            t.append_commit(tid, [("put", tid, entry(tid))])
            assert t.dumping and t._dump.thread.is_alive()
        assert t.log_records == 50
    finally:
        release.set()
        t.close()  # waits for the dump
    with reopen(tmp_path) as t:
        assert t.last_tid == 55 and len(t.entries) == 55
        assert t.recovered.snapshot_tid == 5 and t.recovered.replayed == 50


def test_group_commit_across_a_background_switch_syncs_the_old_log_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Records appended without fsync (group commit) just before the switch are in the old
    # log; the next sync must cover them before the new log's, or a commit of the new log
    # could be acknowledged while an earlier one is not on disc.
    t = TableLog.open(tmp_path, "t")
    t.append_commit(1, [("put", "a", entry(1))])
    t.append_commit(2, [("put", "b", entry(2))], sync=False)
    old_fd = t._fd
    _run_dump_to_the_switch(t)
    t.append_commit(3, [("put", "c", entry(3))], sync=False)
    synced: list[int] = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (synced.append(fd), real(fd))[1])
    ticket = t.sync_begin()
    assert ticket is not None and ticket.carried == (old_fd,)
    ticket.run()
    t.sync_end(ticket)
    assert synced == [old_fd, ticket.fd] and not t.unsynced
    monkeypatch.undo()
    t.close()
    with reopen(tmp_path) as t:
        assert t.last_tid == 3 and set(t.entries) == {'"a"', '"b"', '"c"'}


def test_close_and_replace_all_wait_for_a_background_dump(tmp_path: Path) -> None:
    t = TableLog.open(tmp_path, "t")
    for tid in range(1, 4):
        t.append_commit(tid, [("put", tid, entry(tid))])
    assert t.dump_start()  # given up before its switch: the table is as it was
    t.replace_all({key_json("n"): entry("n")}, tid=9)
    assert not t.dumping and not t.next_path.exists()
    _run_dump_to_the_switch(t)
    t.append_commit(10, [("put", "m", entry(10))])
    t.close()
    with reopen(tmp_path) as t:
        assert set(t.entries) == {'"n"', '"m"'} and t.last_tid == 10
        assert not t.next_path.exists() and t.recovered.snapshot_tid == 9


def test_a_next_log_that_cannot_follow_the_files_is_refused(tmp_path: Path) -> None:
    with TableLog.open(tmp_path, "t") as t:
        t.append_commit(1, [("put", "a", entry(1))])
        header = t._header(5)  # a generation no dump of these files could have made
    (tmp_path / "t.log.next").write_bytes(header)
    with pytest.raises(DiscLogError, match="cannot follow"):
        reopen(tmp_path)


@pytest.mark.parametrize("dump_every", [5, 13])
def test_kill_9_during_background_dumps_loses_no_acknowledged_commit(
    tmp_path: Path, dump_every: int
) -> None:
    # As test_kill_9_loses_no_acknowledged_commit, with the dumps on their own thread: the
    # kill lands at whatever step a dump is in (with dumps every few commits, some always is).
    acked = _acked_until_killed(tmp_path, 400, dump_every, "background")
    with TableLog.open(tmp_path, "t") as t:
        assert max(acked) <= t.last_tid <= max(acked) + 1
        assert set(t.entries) == _expected_keys(t.last_tid)
        assert t.recovered.snapshot_tid > 0  # background dumps did happen
