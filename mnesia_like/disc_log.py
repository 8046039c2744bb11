"""Disc copies for mnesia_like: per table, an append-only commit log plus a periodic snapshot.

This is Mnesia's disc_copies in miniature. Every commit is appended to `<table>.log` (and, by
default, fsynced before the caller may acknowledge it); now and then the whole table is dumped
to `<table>.snap` and the log starts afresh, so that start-up reads one snapshot and a short
log tail instead of the table's whole history. docs/mnesia_like-disc.md describes the format.

What the core hands over is opaque JSON: per key an *entry* (e.g. `{"v": record, "ts": [...],
"del": false}`). Keys are JSON values (str, int, float, bool or lists of them); inside, a key
is held as its canonical JSON text (`key_json`), so that `1`, `1.0`, `True` and `"1"` stay four
keys and a list key can index a dict. Keys come back as JSON gives them: a tuple as a list.

Crash safety rests on three rules:
- a commit is one framed record (magic, length, CRC32, JSON payload) written with one write():
  it is replayed whole or not at all, and a torn or corrupt *tail* is cut off at open;
- a snapshot and a fresh log are each written beside their final name, fsynced and renamed into
  place, and both carry a generation number: a log whose generation is older than the snapshot's
  is left over from a dump that crashed after the snapshot was renamed, and is discarded whole;
- every log record carries its commit id (tid), and records at or below the snapshot's tid are
  skipped, so replaying a log over a snapshot that already holds it changes nothing.

A TableLog is not thread-safe: one actor owns it, as one Mnesia dumper owns a table's log.
A dump may run in the background (`maybe_dump(background=True)`, `dump_start`): the log is
switched to `<table>.log.next` (generation + 1) first, the snapshot of the table as of that
switch is written on a thread of the dump's own while commits go on into the new log, and
only then is the new log renamed over the old. open() replays the old log and the next one
when a crash stopped a dump before its snapshot was in place, and the next one alone after;
see "dumping in the background" below.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gc
import json
import json.scanner
import logging
import math
import os
import re
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from monitors.durable_files import atomic_write, fsync_dir, write_all

log = logging.getLogger("mnesia_like.disc_log")

FORMAT = 1  # version of the log and snapshot formats; both record it
LOG_MAGIC = b"\xffRBL"  # 0xff never occurs in UTF-8 (or in our ASCII JSON): no false match
SNAP_MAGIC = b"\xffRBS"
_RECORD = struct.Struct("<4sII")  # magic, payload length, CRC32 of the payload
_SNAP = struct.Struct("<4sQI")  # magic, payload length (a table may exceed 4 GiB), CRC32

DEFAULT_MAX_COMMIT_BYTES = 64 * 1024 * 1024
DEFAULT_DUMP_RECORDS = 1000  # Mnesia's dump_log_write_threshold
DEFAULT_DUMP_BYTES = 64 * 1024 * 1024  # and a size bound, so a few huge commits dump too
# Entries encoded per call when writing a snapshot: the C encoder holds the GIL for a whole
# call, and a background dump must leave the owner's thread its turns (about 1 ms a chunk).
_SNAP_CHUNK = 1000
# Tests only: called with (step, table log) at each step of a background dump ("next-ready",
# "switched", "snapshot-renamed", "log-renamed"), to copy the files as a crash there leaves them.
_DUMP_HOOK: Callable[[str, TableLog], None] | None = None

# A table name becomes part of file names: letters, digits, "_", "-" and ".", not starting
# with "." (no hidden files, no "..") and short enough that "<name>.snap.tmp" fits in 255 bytes.
_TABLE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,199}")

# Compact, ASCII-only (so a payload never holds a 0xff byte, see LOG_MAGIC), and strict: NaN
# and infinities are not JSON, and another reader would refuse them. Both use the C encoder.
_encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
_encode_key = json.JSONEncoder(separators=(",", ":"), allow_nan=False, sort_keys=True).encode
# (text, index) -> (value, end). typeshed types make_scanner's context as a scanner, not the
# decoder whose settings it reads, so the decoder is passed as Any.
_scan_json = json.scanner.make_scanner(cast(Any, json.JSONDecoder()))

FsyncPolicy = Literal["commit", "none"] | float
Op = tuple[Literal["put", "del"], Any, Any]


class DiscLogError(Exception):
    """The files of a disc table cannot be used as they are: an operator must look at them."""


class CommitTooLarge(DiscLogError, ValueError):
    """One commit's payload is above the log's max_commit_bytes; nothing was written."""


@dataclass(frozen=True)
class Recovery:
    """What open() found and did, for logs, the status page and tests."""

    snapshot_records: int  # entries loaded from the snapshot
    snapshot_tid: int  # the tid the snapshot was taken at (0: no snapshot)
    replayed: int  # log records applied on top of it
    skipped: int  # log records already in the snapshot (tid <= its tid, or a stale log)
    truncated_bytes: int  # torn or corrupt tail cut off the log
    truncated_at: int | None  # the log offset it was cut at
    stale_log: bool  # the log predates the snapshot (a dump crashed before it reset the log)
    seconds: float  # how long the load took


def tables_dir(data_dir: str | os.PathLike[str]) -> Path:
    """Where a node keeps its disc tables: `data_dir/tables`."""
    return Path(data_dir) / "tables"


def check_table_name(table: str) -> str:
    """Return `table` if it is safe as part of a file name, else raise ValueError naming it."""
    if not isinstance(table, str) or not _TABLE_NAME.fullmatch(table):
        raise ValueError(
            f"table name {table!r} cannot name a disc table: use 1-200 letters, digits, "
            "'_', '-' or '.', not starting with '.'"
        )
    return table


def _check_key(key: Any) -> None:
    # Checked before encoding: the encoder would accept None or a dict, which are not keys.
    if isinstance(key, str | bool | int):
        return
    if isinstance(key, float):
        if not math.isfinite(key):
            raise ValueError(f"key {key!r} is not a JSON number")
        return
    if isinstance(key, list | tuple):
        for part in key:
            _check_key(part)
        return
    raise TypeError(
        f"key {key!r} is a {type(key).__name__}: keys are str, int, float, bool or lists of them"
    )


def key_json(key: Any) -> str:
    """The canonical JSON text of a key: the dict key `TableLog.entries` uses for it."""
    if type(key) is str:  # the common case, no walk needed
        return _encode_key(key)
    _check_key(key)
    return _encode_key(key)


def key_from_json(text: str) -> Any:
    """The key a `key_json` text stands for (a tuple comes back as a list)."""
    return json.loads(text)


def check_fsync(fsync: Any) -> FsyncPolicy:
    """The fsync policy, or ValueError naming what is accepted (the shell checks it at start)."""
    if fsync in ("commit", "none"):
        return fsync
    if isinstance(fsync, int | float) and not isinstance(fsync, bool) and fsync > 0:
        return float(fsync)
    raise ValueError(f"fsync must be 'commit', 'none' or an interval in seconds > 0, not {fsync!r}")


def _record_end(data: bytes, pos: int, size: int) -> int | None:
    """The end offset of a whole, intact log record at `pos`, or None."""
    if size - pos < _RECORD.size:
        return None
    magic, length, crc = _RECORD.unpack_from(data, pos)
    end = pos + _RECORD.size + length
    if magic != LOG_MAGIC or end > size:
        return None
    if zlib.crc32(memoryview(data)[pos + _RECORD.size : end]) != crc:
        return None
    return end


def _next_record(data: bytes, start: int, size: int) -> int | None:
    """The offset of the first intact record at or after `start`, or None: is a bad record
    the log's tail (nothing valid follows: a torn write) or a hole in its middle?"""
    pos = data.find(LOG_MAGIC, start)
    while pos != -1:
        if _record_end(data, pos, size) is not None:
            return pos
        pos = data.find(LOG_MAGIC, pos + 1)
    return None


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    # Loading builds hundreds of thousands of small dicts and lists, none of them garbage;
    # the cyclic collector would walk them again and again as they pile up (it halves the
    # load time of a 100,000-record table to hold it off).
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass
class _Scan:
    """A log file as open() found it: its intact records from the start, and its generation."""

    path: Path
    data: bytes
    text: str  # the intact part, decoded as latin-1 (see TableLog._decode)
    spans: list[tuple[int, int]]  # (start, end) of each intact record, the header first
    pos: int  # where the intact records end
    size: int
    gen: int | None  # the header's generation; None: missing, empty or headless


def _frame(payload: bytes) -> bytes:
    return _RECORD.pack(LOG_MAGIC, len(payload), zlib.crc32(payload)) + payload


@dataclass(frozen=True)
class SyncTicket:
    """An fsync of a log as of `nbytes` of generation `gen`, on a duplicate descriptor (see
    `TableLog.sync_begin`). `run()` (any thread, once) syncs and closes the duplicate, after
    the logs a background dump switched away from with records not yet synced (`carried`):
    the commits in the new log follow theirs, and must not be acknowledged before them."""

    fd: int
    gen: int
    nbytes: int
    carried: tuple[int, ...] = ()

    def run(self) -> None:
        fds = (*self.carried, self.fd)
        try:
            for fd in fds:
                os.fdatasync(fd)
        finally:
            for fd in fds:
                os.close(fd)


@dataclass
class _Dump:
    """A background dump in flight (see TableLog.dump_start): `phase` is "prepare" while its
    thread makes the next log, then "write" while it writes the snapshot and renames."""

    gen: int
    phase: str = "prepare"
    done: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    fd: int | None = None  # the next log, opened O_APPEND (the owner's once switched)
    header_bytes: int = 0
    entries: dict[str, Any] = field(default_factory=dict)  # what the snapshot holds, at tid
    tid: int = 0
    error: BaseException | None = None


class TableLog:
    """The disc copy of one table: `entries` in memory, a log and a snapshot on disc.

    Make one with `TableLog.open(...)`. `entries` maps key_json -> entry and is kept up to
    date by append_commit and replace_all; treat the entry objects as immutable once handed
    over (they are stored, not copied, and a later dump writes them as they are then).
    """

    def __init__(
        self,
        directory: Path,
        table: str,
        *,
        fsync: FsyncPolicy,
        max_commit_bytes: int,
        dump_records: int,
        dump_bytes: int,
    ) -> None:
        # Private: open() builds the object and then loads it.
        self.directory = directory
        self.table = table
        self.fsync: FsyncPolicy = fsync
        self.max_commit_bytes = max_commit_bytes
        self.dump_records = dump_records
        self.dump_bytes = dump_bytes
        self.log_path = directory / f"{table}.log"
        self.snap_path = directory / f"{table}.snap"
        self.next_path = directory / f"{table}.log.next"  # a background dump's new log
        self._lock_path = directory / f"{table}.lock"
        self.entries: dict[str, Any] = {}
        self.last_tid = 0
        self.log_records = 0  # commits in the log since the last dump
        self.log_bytes = 0  # size of the log file
        self.recovered = Recovery(0, 0, 0, 0, 0, None, False, 0.0)
        self._gen = 0  # generation of the snapshot; the live log carries the same one
        self._fd: int | None = None  # the log, opened O_APPEND
        self._lock_fd: int | None = None
        self._unsynced = False
        self._last_sync = time.monotonic()
        self._broken: str | None = None  # why appends are refused (the disc state is unknown)
        self._carried: list[int] = []  # logs switched away from with records not yet synced
        self._dump: _Dump | None = None  # a background dump in flight
        self._gen_floor = 0  # generations at or below this may have files left: not reused

    # -- opening and recovery ---------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        table: str,
        fsync: FsyncPolicy = "commit",
        *,
        max_commit_bytes: int = DEFAULT_MAX_COMMIT_BYTES,
        dump_records: int = DEFAULT_DUMP_RECORDS,
        dump_bytes: int = DEFAULT_DUMP_BYTES,
        repair: bool = False,
    ) -> TableLog:
        """Load a table's disc copy (snapshot, then the log on top) and open its log.

        `directory` is the node's tables directory (see `tables_dir`); it is created if
        missing. `fsync` is "commit" (fsync before append_commit returns: the caller may ack),
        "none" (the OS writes back when it likes), or seconds: fsync at most that often, on an
        append or on `sync()`, which the owner calls from a timer. A torn or corrupt tail of
        the log is cut off with a WARNING; damage followed by intact records raises
        DiscLogError, unless `repair=True`, which cuts the log there and loses what follows.
        """
        check_table_name(table)
        if max_commit_bytes <= 0 or max_commit_bytes > 0xFFFFFFFF:
            raise ValueError(f"max_commit_bytes must be in 1..{0xFFFFFFFF}, not {max_commit_bytes}")
        directory = Path(directory)
        if not directory.is_dir():
            directory.mkdir(parents=True, exist_ok=True)
            fsync_dir(directory.parent)  # or a power cut could take the new directory away
        self = cls(
            directory,
            table,
            fsync=check_fsync(fsync),
            max_commit_bytes=max_commit_bytes,
            dump_records=dump_records,
            dump_bytes=dump_bytes,
        )
        self._lock()
        try:
            with _gc_paused():
                self._load(repair)
        except BaseException:
            self._release()
            raise
        return self

    def _lock(self) -> None:
        # Two owners appending to one log would interleave records; flock is released by the
        # kernel when the process dies, so a kill -9 never leaves a stale lock behind.
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise DiscLogError(
                    f"table {self.table!r}: {self._lock_path} is locked: another TableLog "
                    "(in this process or another) has this table open"
                ) from None
            raise
        self._lock_fd = fd

    def _load(self, repair: bool) -> None:
        started = time.perf_counter()
        for leftover in (self.snap_path, self.log_path, self.next_path):  # mid atomic_write
            with contextlib.suppress(FileNotFoundError):
                os.unlink(leftover.with_name(leftover.name + ".tmp"))
        snap_records, snap_tid = self._load_snapshot()
        snap_gen = self._gen
        main = self._scan(self.log_path)
        nxt = self._scan(self.next_path)
        # Which logs hold commits to replay over the snapshot (generation S), in order: the
        # log of generation S, then a `.log.next` of S + 1 (a background dump switched to it
        # and crashed before its snapshot was in place), or a `.log.next` of S alone (it
        # crashed after the snapshot's rename, before the next log's). A log older than the
        # snapshot is stale: everything in it is in the snapshot.
        stale = main.gen is not None and main.gen < snap_gen
        if main.gen is not None and main.gen > snap_gen:
            raise DiscLogError(
                f"{self.log_path}: log generation {main.gen!r} is newer than the snapshot's "
                f"({snap_gen}, {self.snap_path}): the snapshot is missing or was "
                "replaced by an older one"
            )
        live = [main] if main.gen == snap_gen else []
        next_stale = nxt.gen is not None and nxt.gen < snap_gen
        if nxt.gen is not None and not next_stale:
            if not (
                (nxt.gen == snap_gen and main.gen != snap_gen)
                or (nxt.gen == snap_gen + 1 and main.gen in (None, snap_gen))
            ):
                raise DiscLogError(
                    f"{self.next_path}: next log of generation {nxt.gen} cannot follow the "
                    f"snapshot ({snap_gen}) and the log ({main.gen}): a file is missing or "
                    "was replaced by an older one"
                )
            live.append(nxt)
        use_main, use_next = main.gen == snap_gen, len(live) > int(main.gen == snap_gen)
        replayed = skipped = truncated = 0
        truncated_at: int | None = None
        if stale:
            skipped += len(main.spans) - 1
        for scan in live:
            r, k = self._replay(scan.text, scan.spans[1:], snap_tid, scan.path)
            replayed, skipped = replayed + r, skipped + k
        for scan in live:  # only now: a log refused above is left exactly as it was found
            if scan.size > scan.pos:
                self._cut(scan.path, scan.data, scan.pos, repair)
                truncated += scan.size - scan.pos
                truncated_at = scan.pos
        if use_next:
            # Finish the dump that crashed: a snapshot of all that was replayed, a fresh log,
            # and only then the next log goes (a crash before that finds it stale).
            self._gen = max(self._gen, nxt.gen or 0)
            self._install(self.entries, self.last_tid)
            os.unlink(self.next_path)
            fsync_dir(self.directory)
        elif use_main:
            self._fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND)
            self.log_bytes = main.pos
            self.log_records = len(main.spans) - 1
        else:
            self._reset_log(self._gen)  # missing, empty, headless or stale: start it afresh
        if next_stale:
            os.unlink(self.next_path)
            fsync_dir(self.directory)
        self.recovered = Recovery(
            snapshot_records=snap_records,
            snapshot_tid=snap_tid,
            replayed=replayed,
            skipped=skipped,
            truncated_bytes=truncated,
            truncated_at=truncated_at,
            stale_log=stale,
            seconds=time.perf_counter() - started,
        )
        level = logging.INFO if truncated or stale or nxt.gen is not None else logging.DEBUG
        log.log(
            level,
            "table %r: loaded %d entries from %s and replayed %d of %d log records in %.3f s%s%s%s",
            self.table,
            snap_records,
            self.snap_path.name,
            replayed,
            replayed + skipped,
            self.recovered.seconds,
            f"; cut {truncated} bytes at offset {truncated_at}" if truncated else "",
            "; discarded a log older than the snapshot" if stale else "",
            "; finished a background dump a crash interrupted" if use_next else "",
        )

    def _scan(self, path: Path) -> _Scan:
        """The intact records of a log file from its start, and its header's generation
        (None if the file is missing, empty or headless)."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            data = b""
        size = len(data)
        pos = 0
        spans: list[tuple[int, int]] = []
        while pos < size:
            end = _record_end(data, pos, size)
            if end is None:
                break
            spans.append((pos, end))
            pos = end
        scan = _Scan(path, data, data[:pos].decode("latin-1"), spans, pos, size, None)
        if not spans:
            return scan
        header = self._decode(scan.text, *spans[0], path)
        if not isinstance(header, dict):
            raise DiscLogError(f"{path}: offset 0 holds no log header ({str(header)[:200]})")
        if header.get("format") != FORMAT:
            raise DiscLogError(
                f"{path}: log format {header.get('format')!r} is not supported "
                f"(this rabbitry reads format {FORMAT})"
            )
        if header.get("table") != self.table:
            raise DiscLogError(
                f"{path}: the log of table {header.get('table')!r}, not {self.table!r}"
            )
        gen = header.get("gen")
        if not isinstance(gen, int) or isinstance(gen, bool):
            raise DiscLogError(f"{path}: log header has no generation ({gen!r})")
        scan.gen = gen
        return scan

    def _load_snapshot(self) -> tuple[int, int]:
        try:
            data = self.snap_path.read_bytes()
        except FileNotFoundError:
            return 0, 0
        where = f"snapshot {self.snap_path}"
        if len(data) < _SNAP.size:
            raise DiscLogError(f"{where}: {len(data)} bytes, shorter than its header")
        magic, length, crc = _SNAP.unpack_from(data)
        if magic != SNAP_MAGIC:
            raise DiscLogError(f"{where}: bad magic {magic!r}: not a rabbitry table snapshot")
        payload = memoryview(data)[_SNAP.size :]
        if len(payload) != length or zlib.crc32(payload) != crc:
            raise DiscLogError(
                f"{where}: length or CRC32 mismatch (header says {length} bytes, found "
                f"{len(payload)}): the file is damaged; restore this table from a replica"
            )
        try:
            doc = json.loads(bytes(payload))
        except ValueError as exc:
            raise DiscLogError(
                f"{where}: checksum matches but JSON does not parse: {exc}"
            ) from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            found = doc.get("format") if isinstance(doc, dict) else doc
            raise DiscLogError(
                f"{where}: snapshot format {found!r} is not supported (this rabbitry reads "
                f"format {FORMAT})"
            )
        if doc.get("table") != self.table:
            raise DiscLogError(f"{where}: holds table {doc.get('table')!r}, not {self.table!r}")
        gen, tid, entries = doc.get("gen"), doc.get("tid"), doc.get("entries")
        if not (isinstance(gen, int) and isinstance(tid, int) and isinstance(entries, dict)):
            raise DiscLogError(f"{where}: gen, tid or entries missing or of the wrong type")
        self._gen, self.last_tid, self.entries = gen, tid, entries
        return len(entries), tid

    def _cut(self, path: Path, data: bytes, pos: int, repair: bool) -> None:
        dropped = len(data) - pos
        following = _next_record(data, pos + 1, len(data))
        if following is not None:
            if not repair:
                raise DiscLogError(
                    f"{path}: damaged record at offset {pos}, followed by an intact "
                    f"record at offset {following}: this is not a torn write at the tail, and "
                    "skipping it could lose committed transactions. Restore this table from a "
                    "replica, or open it with repair=True to cut the log at offset "
                    f"{pos} ({dropped} bytes, losing every commit after it)"
                )
            log.error(
                "table %r: repair: cutting %s at offset %d, dropping %d bytes that include "
                "intact records (the first at offset %d)",
                self.table,
                path,
                pos,
                dropped,
                following,
            )
        else:
            log.warning(
                "table %r: torn or corrupt tail in %s: cutting it at offset %d (%d bytes "
                "dropped: a write a crash cut short, or damage at the very end)",
                self.table,
                path,
                pos,
                dropped,
            )
        fd = os.open(path, os.O_WRONLY)
        try:
            os.ftruncate(fd, pos)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _decode(self, text: str, start: int, end: int, path: Path) -> Any:
        # `text` is the whole log decoded as latin-1 (one char per byte, so offsets agree;
        # payloads are ASCII): the C scanner parses each payload in place, with no slice,
        # bytes-to-str decode or wrapper call per record (40% off replaying a long log).
        try:
            value, stop = _scan_json(text, start + _RECORD.size)
        except (StopIteration, ValueError) as exc:
            problem = f"bad JSON ({exc!r})"
        else:
            if stop == end:
                return value
            problem = f"JSON that ends at offset {stop}, not {end}"
        raise DiscLogError(f"{path}: record at offset {start} has a good checksum but {problem}")

    def _replay(
        self, text: str, spans: list[tuple[int, int]], snap_tid: int, path: Path
    ) -> tuple[int, int]:
        entries = self.entries
        replayed = skipped = 0
        last = max(snap_tid, self.last_tid)  # a second log (`.log.next`) follows the first
        for start, end in spans:
            record = self._decode(text, start, end, path)
            try:
                tid, ops = record
                if not isinstance(tid, int):
                    raise TypeError(tid)
            except (TypeError, ValueError):
                raise DiscLogError(
                    f"{path}: record at offset {start} is not a commit [tid, ops]"
                ) from None
            if tid <= snap_tid:
                skipped += 1  # already in the snapshot: replaying it again could undo a later op
                continue
            if tid <= last:
                raise DiscLogError(
                    f"{path}: record at offset {start} has tid {tid}, not above the "
                    f"previous one ({last}): the log is out of order"
                )
            try:
                for op in ops:
                    if op[0] == "p":
                        entries[op[1]] = op[2]
                    elif op[0] == "d":
                        entries.pop(op[1], None)
                    else:
                        raise KeyError(op[0])
            except (IndexError, KeyError, TypeError):
                raise DiscLogError(
                    f"{path}: record at offset {start} (tid {tid}) has a malformed op"
                ) from None
            last = tid
            replayed += 1
        self.last_tid = last
        return replayed, skipped

    # -- writing ------------------------------------------------------------------------------

    def append_commit(self, tid: int, ops: Sequence[Op], *, sync: bool = True) -> None:
        """Log one commit as one record, then apply it to `entries`.

        `ops` are `("put", key, entry)` and `("del", key, None)`, applied in order. `tid` must
        be above `last_tid`: replay skips tids the snapshot already holds. Under
        fsync="commit" the record is on disc when this returns, so the caller may acknowledge
        the commit. A bad op or an oversized commit raises before anything is written.

        `sync=False` (group commit) leaves the fsync of a fsync="commit" log to the caller:
        the record is written (in the page cache) but not yet durable, and the caller must call
        `sync()` before it acknowledges this commit. One `sync()` then covers every commit
        appended since the last one. Other policies ignore `sync`.
        """
        self._usable()
        if not isinstance(tid, int) or isinstance(tid, bool):
            raise TypeError(f"table {self.table!r}: tid must be an int, not {tid!r}")
        if tid <= self.last_tid:
            raise ValueError(
                f"table {self.table!r}: tid {tid} is not above the last commit's ({self.last_tid})"
            )
        parts: list[str] = []
        applied: list[tuple[bool, str, Any]] = []
        for op in ops:
            kind, key, entry = op
            kj = key_json(key)
            if kind == "put":
                if entry is None:
                    raise ValueError(f"table {self.table!r}: put of key {key!r} without an entry")
                try:
                    parts.append(_encode(["p", kj, entry]))
                except (TypeError, ValueError) as exc:
                    raise TypeError(
                        f"table {self.table!r}: the entry for key {key!r} is not JSON: {exc}"
                    ) from None
                applied.append((True, kj, entry))
            elif kind == "del":
                if entry is not None:
                    raise ValueError(f"table {self.table!r}: del of key {key!r} with an entry")
                parts.append(_encode(["d", kj]))
                applied.append((False, kj, None))
            else:
                raise ValueError(f"table {self.table!r}: op {kind!r} is not 'put' or 'del'")
        payload = f"[{tid},[{','.join(parts)}]]".encode()
        if len(payload) > self.max_commit_bytes:
            raise CommitTooLarge(
                f"table {self.table!r}: commit {tid} is {len(payload)} bytes, above "
                f"max_commit_bytes ({self.max_commit_bytes}); nothing was written"
            )
        self._append(_frame(payload), sync)
        entries = self.entries
        for put, kj, entry in applied:
            if put:
                entries[kj] = entry
            else:
                entries.pop(kj, None)
        self.last_tid = tid
        self.log_records += 1

    def _append(self, record: bytes, sync: bool = True) -> None:
        # One write() per record: a crash tears at most this record, which open() then cuts.
        fd = self._fd
        assert fd is not None
        try:
            write_all(fd, record)
        except OSError as exc:
            # Take a partial record back out, or the next append would follow garbage and
            # turn a torn tail into damage in the middle.
            try:
                os.ftruncate(fd, self.log_bytes)
            except OSError as exc2:
                self._broken = f"a failed append could not be undone ({exc2})"
            raise DiscLogError(
                f"{self.log_path}: append failed: {exc}; the commit was not written"
            ) from exc
        self.log_bytes += len(record)
        self._unsynced = True
        if (sync and self.fsync == "commit") or self.sync_due:
            self._sync()

    def _sync(self) -> None:
        assert self._fd is not None
        try:
            while self._carried:  # the older log's records first: ours follow them
                fd = self._carried[0]
                os.fdatasync(fd)
                os.close(self._carried.pop(0))
            os.fdatasync(self._fd)  # the data and the file size: all a reader needs
        except OSError as exc:
            # After a failed fsync the kernel may have dropped the dirty pages: retrying
            # would "succeed" with data lost. Stop here; a reopen reads what is really there.
            self._broken = f"fsync failed ({exc})"
            raise DiscLogError(
                f"{self.log_path}: fsync failed: {exc}; the last commits may not be on disc. "
                "This log refuses further appends: reopen the table to recover."
            ) from exc
        self._unsynced = False
        self._last_sync = time.monotonic()

    def sync(self) -> None:
        """fsync what was appended since the last fsync (the timer under an interval policy;
        the owner's group commit after `append_commit(..., sync=False)`)."""
        self._usable()
        if self._unsynced:
            self._sync()

    def sync_begin(self) -> SyncTicket | None:
        """Group commit on another thread: a ticket for an fsync of what is appended so far,
        or None if nothing is pending. `ticket.run()` may be called from any thread (it syncs
        a duplicate of the descriptor, so this log may append, dump or close meanwhile); then
        the owner calls `sync_end(ticket, error)` on its own thread."""
        self._usable()
        if not self._unsynced:
            return None
        assert self._fd is not None
        carried, self._carried = tuple(self._carried), []  # the ticket syncs and closes them
        return SyncTicket(os.dup(self._fd), self._gen, self.log_bytes, carried)

    def sync_end(self, ticket: SyncTicket, error: BaseException | None = None) -> None:
        """After `ticket.run()`: the appends it covered are on disc (appends made since stay
        pending); with an `error`, this log refuses further appends, as a failed `sync()`
        does (raises DiscLogError)."""
        if error is not None:
            self._broken = f"fsync failed ({error})"
            raise DiscLogError(
                f"{self.log_path}: fsync failed: {error}; the last commits may not be on disc. "
                "This log refuses further appends: reopen the table to recover."
            ) from error
        if self._fd is not None and ticket.gen == self._gen and ticket.nbytes == self.log_bytes:
            self._unsynced = False
            self._last_sync = time.monotonic()

    @property
    def unsynced(self) -> bool:
        """True when something appended is not yet known to be on disc (fsync pending)."""
        return self._unsynced

    @property
    def sync_due(self) -> bool:
        """True when appends wait for an fsync that an interval policy says is due."""
        if not self._unsynced or not isinstance(self.fsync, float):
            return False
        return time.monotonic() - self._last_sync >= self.fsync

    # -- dumping ------------------------------------------------------------------------------

    @property
    def dump_due(self) -> bool:
        """True when the log has outgrown dump_records commits or dump_bytes bytes."""
        return self.log_records >= self.dump_records or self.log_bytes >= self.dump_bytes

    def maybe_dump(
        self, records: int | None = None, nbytes: int | None = None, *, background: bool = False
    ) -> bool:
        """Dump if the log holds at least `records` commits or `nbytes` bytes (defaults: the
        thresholds given to open()), as Mnesia's dump_log_write_threshold does; True if it did
        (with `background`: if it started one).

        `background=True` is for an owner that calls this from a timer: the dump runs on a
        thread of its own (see `dump_start`), and each call moves one in flight on
        (`dump_poll`), so the owner's thread never waits for the snapshot's write or fsyncs."""
        if background and self._dump is not None:
            self.dump_poll()
            return False
        records = self.dump_records if records is None else records
        limit = self.dump_bytes if nbytes is None else nbytes
        if self.log_records >= records or self.log_bytes >= limit:
            if background:
                return self.dump_start()
            self.dump()
            return True
        return False

    def dump(self) -> None:
        """Write a snapshot of `entries` at `last_tid`, then start an empty log (on this
        thread; a background dump in flight is finished first).

        The snapshot goes first, so a crash leaves the old snapshot and whole log, or the new
        snapshot and a log of the old generation, which open() discards (it holds nothing the
        snapshot lacks). Never a state that needs both.
        """
        self._usable()
        self._dump_settle()
        self._install(self.entries, self.last_tid)

    # -- dumping in the background ------------------------------------------------------------
    #
    # As Mnesia's dumper: the log is switched to a new one first, and the snapshot of the
    # table as of that switch is written meanwhile, while commits go on into the new log.
    # The steps, with G the generation of the snapshot and of the log:
    #   1. (thread) `<T>.log.next` with a header of generation G+1: tmp, fsync, rename,
    #      directory fsync. Nothing depends on it yet.
    #   2. (owner, at its next dump_poll) the switch: appends go to `.log.next` from now on; the
    #      old log, if it holds records not yet synced, is carried: the next fsync of the log
    #      syncs it first (sync, sync_begin), so no commit of the new log is acknowledged
    #      before those of the old. The snapshot's content is a shallow copy of `entries` at
    #      `last_tid` (entries are never changed in place).
    #   3. (thread) the snapshot of generation G+1: tmp, fsync, rename, directory fsync.
    #   4. (thread) `.log.next` renamed over `<T>.log`, directory fsync.
    # A crash after 1 or 2 leaves snapshot G, log G and next G+1: open() replays both logs.
    # After 3: snapshot G+1, a stale log G, next G+1: open() replays next alone. After 4: the
    # usual pair. open() finishes a dump it found interrupted with a dump of its own.

    @property
    def dumping(self) -> bool:
        """True while a background dump is in flight."""
        return self._dump is not None

    def dump_start(self) -> bool:
        """Start a background dump (False if one is in flight). The owner then calls
        `dump_poll()` now and then (a timer): it switches the log when the thread has made
        the next one, and ends the dump when the snapshot is in place."""
        self._usable()
        if self._dump is not None:
            return False
        job = _Dump(max(self._gen, self._gen_floor) + 1)
        self._gen_floor = job.gen  # a crash may leave its `.log.next`: never reuse its number
        self._dump = job
        self._run(job, self._dump_prepare)
        return True

    def dump_poll(self) -> bool:
        """Move a background dump on (owner's thread, never blocks); True while one is in
        flight. A failure raises DiscLogError: before the switch the table is as it was;
        after it this log refuses appends (reopen: open() recovers from the files)."""
        job = self._dump
        if job is None:
            return False
        if not job.done.is_set():
            return True
        if job.phase == "prepare":
            if job.error is not None:
                self._dump_drop(job)
                raise DiscLogError(
                    f"{self.next_path}: a background dump could not start the next log: "
                    f"{job.error}; the table is unchanged"
                ) from job.error
            self._switch(job)
            return True
        self._dump = None
        if job.error is not None:
            self._broken = f"a background dump failed ({job.error})"
            raise DiscLogError(
                f"{self.snap_path}: a background dump failed: {job.error}; this log refuses "
                "further appends: reopen the table to recover."
            ) from job.error
        return False

    def _dump_settle(self) -> None:
        """Wait for a background dump in flight (a replace_all, a close): one writing its
        snapshot is finished, one still making its next log is given up."""
        job = self._dump
        if job is None:
            return
        assert job.thread is not None
        job.thread.join()
        if job.phase == "prepare":
            self._dump_drop(job)
            return
        with contextlib.suppress(DiscLogError):  # a failure has marked this log broken
            self.dump_poll()

    def _dump_drop(self, job: _Dump) -> None:
        self._dump = None
        if job.fd is not None:
            os.close(job.fd)
            job.fd = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.next_path)
        fsync_dir(self.directory)

    def _run(self, job: _Dump, step: Callable[[_Dump], None]) -> None:
        job.done.clear()
        job.thread = threading.Thread(
            target=self._dump_thread, args=(job, step), name=f"dump-{self.table}", daemon=True
        )
        job.thread.start()

    @staticmethod
    def _dump_thread(job: _Dump, step: Callable[[_Dump], None]) -> None:
        try:
            step(job)
        except BaseException as exc:  # handed to the owner by dump_poll
            job.error = exc
        finally:
            job.done.set()

    def _dump_prepare(self, job: _Dump) -> None:
        """Step 1, on the dump's thread."""
        header = self._header(job.gen)
        atomic_write(self.next_path, header)
        job.fd = os.open(self.next_path, os.O_WRONLY | os.O_APPEND)
        job.header_bytes = len(header)
        if _DUMP_HOOK is not None:
            _DUMP_HOOK("next-ready", self)

    def _switch(self, job: _Dump) -> None:
        """Step 2, on the owner's thread: microseconds, and a dict copy of the table."""
        assert self._fd is not None and job.fd is not None
        if self._unsynced:
            self._carried.append(self._fd)  # synced, then closed, by the next fsync
        else:
            os.close(self._fd)
        self._fd, job.fd = job.fd, None
        self._gen = job.gen
        self.log_bytes, self.log_records = job.header_bytes, 0
        job.entries, job.tid = dict(self.entries), self.last_tid
        job.phase = "write"
        if _DUMP_HOOK is not None:
            _DUMP_HOOK("switched", self)
        self._run(job, self._dump_write)

    def _dump_write(self, job: _Dump) -> None:
        """Steps 3 and 4, on the dump's thread."""
        self._write_snapshot(job.gen, job.tid, job.entries)
        job.entries = {}
        if _DUMP_HOOK is not None:
            _DUMP_HOOK("snapshot-renamed", self)
        os.replace(self.next_path, self.log_path)  # the owner's descriptor follows the file
        fsync_dir(self.directory)
        if _DUMP_HOOK is not None:
            _DUMP_HOOK("log-renamed", self)

    def replace_all(self, entries: Mapping[str, Any], tid: int) -> None:
        """Make `entries` (key_json -> entry) at `tid` the whole table, atomically.

        For a table reloaded from another node (a copy, or the loser's side of a heal). `tid`
        may be below `last_tid`, since it is the other node's; later commits must be above it.
        A crash leaves the old content or the new one, never a mixture: the old log has an
        older generation than the new snapshot, so it is not replayed over it.
        """
        self._usable()
        if not isinstance(tid, int) or isinstance(tid, bool):
            raise TypeError(f"table {self.table!r}: tid must be an int, not {tid!r}")
        if not isinstance(entries, Mapping):
            raise TypeError(f"table {self.table!r}: entries must map key_json -> entry")
        self._dump_settle()
        self._usable()
        entries = dict(entries)
        for kj in entries:
            if not isinstance(kj, str):
                raise TypeError(f"table {self.table!r}: entries key {kj!r} is not a key_json str")
        self._install(entries, tid)

    def _install(self, entries: dict[str, Any], tid: int) -> None:
        gen = max(self._gen, self._gen_floor) + 1
        self._write_snapshot(gen, tid, entries)  # encodes first: a bad entry writes nothing
        self._gen, self.entries, self.last_tid = gen, entries, tid
        # A crash here is the case open() handles as a stale log.
        self._reset_log(gen)

    def _write_snapshot(self, gen: int, tid: int, entries: Mapping[str, Any]) -> None:
        # The text of `_encode(doc)`, made in chunks of entries (see _SNAP_CHUNK).
        head = _encode({"format": FORMAT, "table": self.table, "gen": gen, "tid": tid})
        parts = [f'{head[:-1]},"entries":{{'.encode()]
        items = list(entries.items())
        sep = ""
        try:
            for i in range(0, len(items), _SNAP_CHUNK):
                parts.append((sep + _encode(dict(items[i : i + _SNAP_CHUNK]))[1:-1]).encode())
                sep = ","
        except (TypeError, ValueError) as exc:
            raise TypeError(f"table {self.table!r}: an entry is not JSON: {exc}") from None
        parts.append(b"}}")
        crc = 0
        for part in parts:
            crc = zlib.crc32(part, crc)
        length = sum(len(part) for part in parts)
        atomic_write(self.snap_path, [_SNAP.pack(SNAP_MAGIC, length, crc), *parts])

    def _header(self, gen: int) -> bytes:
        return _frame(_encode({"format": FORMAT, "table": self.table, "gen": gen}).encode())

    def _reset_log(self, gen: int) -> None:
        header = self._header(gen)
        while self._carried:  # their records are in the snapshot just written
            os.close(self._carried.pop())
        try:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            atomic_write(self.log_path, header)
            self._fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND)
        except OSError as exc:
            # The snapshot may be in place with the old log still open: appending to that log
            # would write commits that the next open discards as stale.
            self._broken = f"starting a new log failed ({exc})"
            raise DiscLogError(
                f"{self.log_path}: could not start a new log: {exc}; reopen the table"
            ) from exc
        self.log_bytes = len(header)
        self.log_records = 0
        self._unsynced = False

    # -- reading ------------------------------------------------------------------------------

    def get(self, key: Any) -> Any:
        """The entry stored for `key`, or None."""
        return self.entries.get(key_json(key))

    def items(self) -> Iterator[tuple[Any, Any]]:
        """(key, entry) pairs, keys decoded back from their JSON text."""
        for kj, entry in self.entries.items():
            yield json.loads(kj), entry

    def __len__(self) -> int:
        return len(self.entries)

    def __repr__(self) -> str:
        state = "closed" if self._fd is None else f"tid={self.last_tid}"
        return f"<TableLog {self.table!r} {len(self.entries)} entries {state}>"

    # -- ending ---------------------------------------------------------------------------------

    def close(self) -> None:
        """fsync whatever is pending (any policy: a clean stop loses nothing) and let go. A
        background dump in flight is finished first (or given up before its switch)."""
        self._dump_settle()
        if self._fd is not None:
            try:
                if self._unsynced and self._broken is None:
                    self._sync()
            finally:
                os.close(self._fd)
                self._fd = None
                while self._carried:
                    os.close(self._carried.pop())
        self._release()

    def delete_files(self) -> None:
        """Close, then remove the table's files (the table left this node, as del_table_copy)."""
        self.close()
        # The log goes before the snapshot: a crash in between leaves an older snapshot alone,
        # which opens as a whole table, never a log of a newer generation with no snapshot.
        for path in (
            self.log_path,
            self.next_path,
            self.snap_path,
            self.log_path.with_name(self.log_path.name + ".tmp"),
            self.next_path.with_name(self.next_path.name + ".tmp"),
            self.snap_path.with_name(self.snap_path.name + ".tmp"),
            self._lock_path,
        ):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        fsync_dir(self.directory)
        self.entries = {}
        self.last_tid = 0

    def _release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor drops the flock
            self._lock_fd = None

    def _usable(self) -> None:
        if self._broken is not None:
            raise DiscLogError(
                f"{self.log_path}: this log refuses appends since {self._broken}; reopen the table"
            )
        if self._fd is None:
            raise DiscLogError(f"table {self.table!r}: the disc log is closed")

    def __enter__(self) -> TableLog:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
