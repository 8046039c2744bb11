"""The cluster files: JSON form, atomic writes, clear errors, legacy and empty files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from monitors.node_monitor.status import (
    CLUSTER_NODES_FILE,
    RUNNING_NODES_FILE,
    ClusterFileError,
    ClusterStatus,
    atomic_write,
    read_cluster_status,
    write_cluster_status,
)

A, B, C = "a@h", "b@h", "c@h"


def test_status_is_sorted_and_deduplicated() -> None:
    s = ClusterStatus(all=[C, A, B, A], disc=[B, A], running=[A])
    assert s.all == (A, B, C)
    assert s.disc == (A, B)
    assert s == ClusterStatus(all=[A, B, C], disc=[A, B], running=[A])


def test_normalized_and_reset() -> None:
    s = ClusterStatus(all=[A], disc=[B], running=[C]).normalized("d@h")
    assert s.all == (A, B, C, "d@h")
    assert ClusterStatus.reset(A) == ClusterStatus(all=[A], disc=[A], running=[A])


def test_status_rejects_a_string() -> None:
    with pytest.raises(TypeError, match=r"ClusterStatus\.all"):
        ClusterStatus(all="a@h")


def test_round_trip(tmp_path: Path) -> None:
    s = ClusterStatus(all=[A, B, C], disc=[A, B], running=[A, C])
    write_cluster_status(tmp_path, s)
    assert json.loads((tmp_path / CLUSTER_NODES_FILE).read_text()) == {
        "version": 1,
        "all": [A, B, C],
        "disc": [A, B],
    }
    assert json.loads((tmp_path / RUNNING_NODES_FILE).read_text()) == {
        "version": 1,
        "running": [A, C],
    }
    assert read_cluster_status(tmp_path, A) == s


def test_running_always_holds_the_node_itself(tmp_path: Path) -> None:
    write_cluster_status(tmp_path, ClusterStatus(all=[A, B], disc=[A], running=[B]))
    assert read_cluster_status(tmp_path, A).running == (A, B)


def test_fresh_node_has_no_status(tmp_path: Path) -> None:
    assert read_cluster_status(tmp_path, A) is None
    assert read_cluster_status(tmp_path / "missing", A) is None


def test_missing_running_file_means_just_us(tmp_path: Path) -> None:
    (tmp_path / CLUSTER_NODES_FILE).write_text(
        '{"version": 1, "all": ["a@h", "b@h"], "disc": ["a@h"]}'
    )
    assert read_cluster_status(tmp_path, A) == ClusterStatus(all=[A, B], disc=[A], running=[A])


def test_crash_between_write_and_rename_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = ClusterStatus(all=[A, B], disc=[A, B], running=[A, B])
    write_cluster_status(tmp_path, old)
    before = (tmp_path / CLUSTER_NODES_FILE).read_bytes()

    class Crash(BaseException):
        pass

    def crash(src: str, dst: str) -> None:
        assert Path(src).read_bytes()  # the new content was written and fsynced
        raise Crash

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(Crash):
        write_cluster_status(tmp_path, ClusterStatus(all=[A], disc=[A], running=[A]))
    monkeypatch.undo()
    assert (tmp_path / CLUSTER_NODES_FILE).read_bytes() == before
    assert not (tmp_path / (CLUSTER_NODES_FILE + ".tmp")).exists()
    assert read_cluster_status(tmp_path, A) == old


def test_a_stale_tmp_file_from_a_hard_crash_is_ignored_then_replaced(tmp_path: Path) -> None:
    s = ClusterStatus(all=[A, B], disc=[A], running=[A])
    write_cluster_status(tmp_path, s)
    (tmp_path / (CLUSTER_NODES_FILE + ".tmp")).write_text('{"version": 1, "al')  # torn
    assert read_cluster_status(tmp_path, A) == s
    write_cluster_status(tmp_path, s)
    assert read_cluster_status(tmp_path, A) == s


def test_atomic_write_creates_the_directory(tmp_path: Path) -> None:
    atomic_write(tmp_path / "x" / "y" / "f", b"hello")
    assert (tmp_path / "x" / "y" / "f").read_bytes() == b"hello"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"version": 1, "all": ["a@h"', "is not valid JSON"),
        ("{['a@h'],['a@h']}.", "Erlang term file"),
        ('"a@h"', "expected a JSON object"),
        ('{"all": ["a@h"], "disc": []}', "has no version key"),
        ('{"version": 2, "all": [], "disc": []}', "newer rabbitry"),
        ('{"version": "1", "all": [], "disc": []}', "version must be a positive integer"),
        ('{"version": 1, "all": ["a@h"]}', "lacks the key"),
        ('{"version": 1, "all": "a@h", "disc": []}', "all must be a list"),
        ('{"version": 1, "all": ["a@h", 3], "disc": []}', r"all\[1\] must be a node name"),
        ('{"version": 1, "all": ["nohost"], "disc": []}', r"all\[0\] must be a node name"),
    ],
)
def test_corrupt_cluster_file_gives_a_clear_error(
    tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / CLUSTER_NODES_FILE
    path.write_text(content)
    with pytest.raises(ClusterFileError, match=message) as info:
        read_cluster_status(tmp_path, A)
    assert str(path) in str(info.value)
    assert "restore it from a peer" in str(info.value)


def test_binary_garbage_gives_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / CLUSTER_NODES_FILE).write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ClusterFileError, match="not UTF-8"):
        read_cluster_status(tmp_path, A)


def test_corrupt_running_file_gives_a_clear_error(tmp_path: Path) -> None:
    write_cluster_status(tmp_path, ClusterStatus(all=[A], disc=[A], running=[A]))
    (tmp_path / RUNNING_NODES_FILE).write_text('{"version": 1, "running": {"a@h": 1}}')
    with pytest.raises(ClusterFileError, match="running must be a list"):
        read_cluster_status(tmp_path, A)


def test_legacy_node_list(tmp_path: Path) -> None:
    # RabbitMQ's legacy `[AllNodes].`: disc is this node if listed, else all of them
    (tmp_path / CLUSTER_NODES_FILE).write_text('["a@h", "b@h"]')
    assert read_cluster_status(tmp_path, A) == ClusterStatus(all=[A, B], disc=[A], running=[A])
    assert read_cluster_status(tmp_path, C) == ClusterStatus(
        all=[A, B, C], disc=[A, B], running=[C]
    )
    (tmp_path / CLUSTER_NODES_FILE).write_text("[]")
    assert read_cluster_status(tmp_path, A) == ClusterStatus(all=[A], disc=[A], running=[A])


def test_legacy_running_list(tmp_path: Path) -> None:
    write_cluster_status(tmp_path, ClusterStatus(all=[A, B], disc=[A], running=[A]))
    (tmp_path / RUNNING_NODES_FILE).write_text('["b@h"]')
    assert read_cluster_status(tmp_path, A).running == (A, B)


def test_empty_files_count_as_missing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / CLUSTER_NODES_FILE).write_text("")
    assert read_cluster_status(tmp_path, A) is None
    assert "is empty" in caplog.text
    (tmp_path / CLUSTER_NODES_FILE).write_text('{"version": 1, "all": ["a@h"], "disc": ["a@h"]}')
    (tmp_path / RUNNING_NODES_FILE).write_text("  \n")
    assert read_cluster_status(tmp_path, A) == ClusterStatus(all=[A], disc=[A], running=[A])
