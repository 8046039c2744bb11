"""RedisMasterFile: format, validation, caching, atomic writes, multi-set writers in processes."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from failover import master_file
from failover.master_file import RedisMasterFile

A = "127.0.0.1:6379"
B = "redis-b.example.internal:16380"  # a different length: a torn read would show


def counting(mf: RedisMasterFile, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count how often `mf` really opens and reads its file."""
    loads: list[int] = []
    original = mf._read_content

    def wrapper() -> tuple[os.stat_result | None, str]:
        loads.append(1)
        return original()

    monkeypatch.setattr(mf, "_read_content", wrapper)
    return loads


def age(path: Path, seconds: float = 60.0) -> None:
    """Make the file look old (outside the racy window) without changing its content."""
    past = time.time_ns() - int(seconds * 1e9)
    os.utime(path, ns=(past, past))


# -- format and validation ---------------------------------------------------------------------


def test_write_read_clear_single_set(tmp_path: Path) -> None:
    mf = RedisMasterFile(tmp_path / "redis-master")
    assert mf.read() is None  # missing file: no master
    assert mf.write(A) is True
    assert (tmp_path / "redis-master").read_text() == f"{A}\n"
    assert mf.read() == A
    assert mf.write(A) is False  # already says so: not rewritten
    assert mf.clear() is True
    assert (tmp_path / "redis-master").read_text() == ""
    assert mf.read() is None
    assert mf.write("") is False  # "" is "no master" too, and it already says that
    assert mf.path == tmp_path / "redis-master"
    assert repr(mf) == f"RedisMasterFile({str(tmp_path / 'redis-master')!r}, system='system')"


def test_unchanged_write_keeps_the_inode(tmp_path: Path) -> None:
    mf = RedisMasterFile(tmp_path / "m")
    mf.write(A)
    inode = os.stat(mf.path).st_ino
    assert mf.write(f" {A} ") is False  # normalised to the same content
    assert os.stat(mf.path).st_ino == inode


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("localhost", "no port"),
        ("localhost:0", "1..65535"),
        ("localhost:65536", "1..65535"),
        ("localhost:http", "1..65535"),
        ("my host:6379", "bad host"),
        (":6379", "bad host"),
        ("::1:6379", "brackets"),
        ("a/b:6379", "bad host"),
    ],
)
def test_write_rejects_malformed_addresses(tmp_path: Path, bad: str, why: str) -> None:
    mf = RedisMasterFile(tmp_path / "m")
    with pytest.raises(ValueError, match=why) as info:
        mf.write(bad)
    assert str(tmp_path / "m") in str(info.value)
    assert "host:port" in str(info.value)
    assert not mf.path.exists()


def test_ipv6_in_brackets(tmp_path: Path) -> None:
    mf = RedisMasterFile(tmp_path / "m")
    mf.write("[::1]:6379")
    assert mf.read() == "[::1]:6379"


@pytest.mark.parametrize("system", ["", "a/b", "a b", "x\n"])
def test_bad_system_names(tmp_path: Path, system: str) -> None:
    with pytest.raises(ValueError, match="system name"):
        RedisMasterFile(tmp_path / "m", system)


def test_multi_set_lines_and_plain_fallback(tmp_path: Path) -> None:
    path = tmp_path / "m"
    path.write_text(f"alpha/{A}\n\n  beta/{B}  \n")
    assert RedisMasterFile(path, "alpha").read() == A
    assert RedisMasterFile(path, "beta").read() == B
    assert RedisMasterFile(path, "gamma").read() is None  # no line: no master
    path.write_text(f"{A}\nbeta/{B}\n")
    assert RedisMasterFile(path, "gamma").read() == A  # a plain line applies to any system
    assert RedisMasterFile(path, "beta").read() == B  # its own line wins
    path.write_text(f"beta/{B}\n{A}\n")  # order does not matter
    assert RedisMasterFile(path, "beta").read() == B
    path.write_text(f"{A}\nbeta/\n")  # explicitly none for beta
    assert RedisMasterFile(path, "beta").read() is None
    assert RedisMasterFile(path, "alpha").read() == A


def test_a_writer_keeps_other_systems_lines(tmp_path: Path) -> None:
    path = tmp_path / "m"
    path.write_text(f"beta/{B}\n")
    alpha = RedisMasterFile(path, "alpha")
    alpha.write(A)
    assert path.read_text() == f"alpha/{A}\nbeta/{B}\n"
    alpha.clear()
    assert path.read_text() == f"beta/{B}\n"
    assert alpha.read() is None
    assert RedisMasterFile(path, "beta").read() == B


def test_clearing_under_a_plain_line_writes_an_explicit_none(tmp_path: Path) -> None:
    path = tmp_path / "m"
    path.write_text(f"{A}\nbeta/{B}\n")
    alpha = RedisMasterFile(path, "alpha")
    assert alpha.read() == A  # from the plain line
    alpha.clear()
    assert alpha.read() is None  # the plain line must not keep applying to alpha
    assert RedisMasterFile(path, "gamma").read() == A
    assert path.read_text() == f"{A}\nalpha/\nbeta/{B}\n"


def test_multi_set_flag_writes_system_lines_into_an_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "m"
    RedisMasterFile(path, "alpha", multi_set=True).write(A)
    assert path.read_text() == f"alpha/{A}\n"
    assert RedisMasterFile(path, "beta").read() is None  # not taken for every system
    RedisMasterFile(path, "beta").write(B)  # the file has system lines: the form is kept
    assert path.read_text() == f"alpha/{A}\nbeta/{B}\n"


def test_a_single_set_writer_replaces_a_plain_file(tmp_path: Path) -> None:
    path = tmp_path / "m"
    path.write_text(f"{A}\n")
    RedisMasterFile(path).write(B)
    assert path.read_text() == f"{B}\n"


def test_permissions_are_kept(tmp_path: Path) -> None:
    mf = RedisMasterFile(tmp_path / "m")
    mf.write(A)
    assert os.stat(mf.path).st_mode & 0o777 == 0o644
    os.chmod(mf.path, 0o640)
    mf.write(B)
    assert os.stat(mf.path).st_mode & 0o777 == 0o640


# -- malformed content -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "line"),
    [
        ("not an address\n", "line 1"),
        (f"\nalpha/{A}\nsystem/nope\n", "line 3"),
        (f"{A}\n{B}\n", "2 different masters"),
        (f"system/{A}\nsystem/{B}\n", "2 different masters"),
        ("127.0.0.1:99999\n", "line 1"),
    ],
)
def test_malformed_content_is_no_master_and_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: str, line: str
) -> None:
    path = tmp_path / "m"
    path.write_text(content)
    mf = RedisMasterFile(path)
    with caplog.at_level(logging.WARNING, logger="failover.master_file"):
        assert mf.read() is None
        assert mf.read() is None
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, "one warning per bad content, not one per read"
    assert str(path) in warnings[0].getMessage()
    assert line in warnings[0].getMessage()


def test_bad_lines_of_other_systems_are_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "m"
    path.write_text(f"beta/garbage\nalpha/{A}\nbeta/{B}\n")
    with caplog.at_level(logging.WARNING):
        assert RedisMasterFile(path, "alpha").read() == A
    assert not caplog.records


def test_duplicate_identical_lines_are_fine(tmp_path: Path) -> None:
    path = tmp_path / "m"
    path.write_text(f"{A}\n{A}\r\n")
    assert RedisMasterFile(path).read() == A


def test_a_path_that_cannot_be_read_is_no_master(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "dir").mkdir()
    mf = RedisMasterFile(tmp_path / "dir")
    with caplog.at_level(logging.WARNING, logger="failover.master_file"):
        assert mf.read() is None
    assert str(tmp_path / "dir") in caplog.text


def test_writing_into_a_missing_directory_raises(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        RedisMasterFile(tmp_path / "nope" / "m").write(A)


# -- the read cache ------------------------------------------------------------------------------


def test_read_is_cached_until_the_file_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mf = RedisMasterFile(tmp_path / "m", racy_window=0)
    loads = counting(mf, monkeypatch)
    mf.write(A)
    assert [mf.read() for _ in range(5)] == [A] * 5
    assert len(loads) == 1
    RedisMasterFile(mf.path).write(B)  # another writer (another process, say)
    assert mf.read() == B
    assert mf.read() == B
    assert len(loads) == 2


def test_a_recently_changed_file_is_reread_then_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mf = RedisMasterFile(tmp_path / "m")  # default racy window
    loads = counting(mf, monkeypatch)
    mf.write(A)
    mf.read()
    mf.read()
    assert len(loads) == 2, "a file changed within the racy window is not trusted to the cache"
    later = time.time_ns() + 60 * 10**9  # the window is over (ctime cannot be set back)
    monkeypatch.setattr(master_file, "time", SimpleNamespace(time_ns=lambda: later))
    mf.read()
    mf.read()
    mf.read()
    assert len(loads) == 3


def test_same_size_same_mtime_rename_is_seen(tmp_path: Path) -> None:
    """A rewrite within one timestamp tick: new inode, same size, same mtime."""
    mf = RedisMasterFile(tmp_path / "m", racy_window=0)
    mf.write("127.0.0.1:6379")
    age(mf.path)
    mtime = os.stat(mf.path).st_mtime_ns
    assert mf.read() == "127.0.0.1:6379"
    RedisMasterFile(mf.path).write("127.0.0.1:6380")
    os.utime(mf.path, ns=(mtime, mtime))
    assert mf.read() == "127.0.0.1:6380"


def test_in_place_rewrite_with_restored_mtime_is_seen(tmp_path: Path) -> None:
    """A non-atomic writer (Beetle's Ruby RCC rewrites in place) that even restores the mtime:
    the ctime still moves."""
    mf = RedisMasterFile(tmp_path / "m", racy_window=0)
    mf.path.write_text("127.0.0.1:6379\n")
    age(mf.path)
    stat = os.stat(mf.path)
    assert mf.read() == "127.0.0.1:6379"
    time.sleep(0.01)  # let the coarse ctime clock tick: this is the scenario, not a sync
    with open(mf.path, "r+") as handle:
        handle.write("127.0.0.1:6380\n")
    os.utime(mf.path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert os.stat(mf.path).st_ino == stat.st_ino
    assert mf.read() == "127.0.0.1:6380"


def test_deleting_the_file_means_no_master(tmp_path: Path) -> None:
    mf = RedisMasterFile(tmp_path / "m", racy_window=0)
    mf.write(A)
    assert mf.read() == A
    mf.path.unlink()
    assert mf.read() is None


# -- atomicity and concurrent writers ----------------------------------------------------------


def test_readers_never_see_a_partial_file(tmp_path: Path) -> None:
    path = tmp_path / "m"
    path.write_text(f"alpha/{A}\nbeta/{B}\n")
    writer_mf = RedisMasterFile(path, "alpha")
    allowed_raw = {f"alpha/{A}\nbeta/{B}\n", f"alpha/{B}\nbeta/{B}\n"}
    seen_raw: set[str] = set()
    seen_parsed: set[str | None] = set()
    stop = threading.Event()
    errors: list[str] = []

    def reader() -> None:
        mf = RedisMasterFile(path, "alpha")
        while not stop.is_set():
            raw = path.read_text()
            seen_raw.add(raw)
            if raw not in allowed_raw:
                errors.append(raw)
            seen_parsed.add(mf.read())

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        for i in range(100):
            writer_mf.write(B if i % 2 == 0 else A)
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
    assert not errors, f"torn reads: {errors[:3]}"
    assert seen_parsed <= {A, B}
    assert seen_raw == allowed_raw, "the readers saw both versions"
    leftovers = sorted(p.name for p in tmp_path.iterdir())
    assert leftovers == ["m", "m.lock"], "no temporary files are left behind"


WRITER = textwrap.dedent(
    """
    import sys
    from failover.master_file import RedisMasterFile
    path, system, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    mf = RedisMasterFile(path, system, multi_set=True)
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(count):
        mf.write(f"127.0.0.1:{1000 + i}")
    """
)


def test_writers_in_two_processes_never_lose_each_others_lines(tmp_path: Path) -> None:
    """Each process counts its system's port up; a lost update (read-modify-write without the
    lock) would put an OLD port of the other system back, which the watcher would see."""
    path = tmp_path / "m"
    count = 60
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), system, str(count)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for system in ("alpha", "beta")
    ]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    for proc in procs:  # start both at once
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    highest = {"alpha": 0, "beta": 0}
    went_back: list[str] = []
    while any(proc.poll() is None for proc in procs):
        try:
            text = path.read_text()
        except FileNotFoundError:
            continue
        for line in text.splitlines():
            system, _, address = line.partition("/")
            port = int(address.rpartition(":")[2])
            if port < highest[system]:
                went_back.append(f"{system}: {highest[system]} -> {port}")
            highest[system] = max(highest[system], port)
        time.sleep(0.001)  # look often, but leave the CPU to the writers
    for proc in procs:
        assert proc.wait(30) == 0
    assert not went_back, f"lost updates: {went_back[:5]}"
    final = f"alpha/127.0.0.1:{1000 + count - 1}\nbeta/127.0.0.1:{1000 + count - 1}\n"
    assert path.read_text() == final
