"""The Redis master file: the one place a worker host learns which Redis server is the master.

Beetle's design: the configuration client (RCC) on each worker host writes the current
master's "host:port" into a file; every worker process re-reads it before each Redis command
when it changed; an empty file means "no master, wait". Since Beetle 2.3.0 one file may hold
several failover sets, one line each: "system/host:port".

Format (what `read` accepts):
    ""                          no master, for every system
    "host:port"                 the master, for every system (the single-set form)
    "name/host:port" lines      the master of system `name`; lines of other systems are ignored
    "name/"                     explicitly no master for `name` (written only to override a
                                plain line in a mixed file; see `write`)
A line for our system wins over a plain line. Blank lines are ignored. Anything else that
could apply to our system (a bad address, two different values) makes `read` return None with
a warning naming the file and the line: a worker must never guess which server is the master.

Guarantees:
- Writes are atomic: a new file is written beside the old one, fsynced, renamed over it, and
  the directory fsynced. A reader sees the old content or the new, never a mix, and after a
  crash the file is one or the other.
- Writers of different systems in different processes do not lose each other's lines: the
  read-modify-write runs under an exclusive flock on "<file>.lock".
- `read` is cheap when nothing changed: one stat(). The cache key is (device, inode, size,
  mtime_ns, ctime_ns), so a rename-over (new inode) or an in-place rewrite is seen even within
  one second. File timestamps come from a coarse clock, so a file changed in the last
  `racy_window` seconds is re-read on every call anyway (git's "racily clean" rule): two
  rewrites inside one clock tick cannot hide behind an equal key.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from failover.redis_ops import format_address, parse_address
from monitors.durable_files import atomic_write

log = logging.getLogger(__name__)

RACY_WINDOW = 2.0  # seconds: covers 1-2 s timestamp granularity (ext3, FAT) and clock ticks

_Key = tuple[int, int, int, int, int]


@dataclass
class _Parsed:
    """A file's content as writers see it: the plain line and the per-system lines."""

    plain: str | None = None
    systems: dict[str, str | None] = field(default_factory=dict)
    bad_lines: list[tuple[int, str]] = field(default_factory=list)


def _parse(text: str) -> _Parsed:
    """Split content into lines, leniently (writers keep what is not theirs)."""
    parsed = _Parsed()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        name, slash, master = line.partition("/")
        if slash:
            parsed.systems[name.strip()] = master.strip() or None
        elif parsed.plain is None:
            parsed.plain = line
        else:
            parsed.bad_lines.append((number, line))
    return parsed


def _check_system(system: str) -> str:
    if not isinstance(system, str) or not system or any(c.isspace() or c == "/" for c in system):
        raise ValueError(
            f"RedisMasterFile: system name {system!r} must be a non-empty word without '/' or "
            'spaces (it is the "system/" prefix of a line in the master file)'
        )
    return system


class RedisMasterFile:
    """One host's master file, seen by one failover set (`system`, Beetle's system_name).

    Thread-safe: `read` may be called from many threads; its cache is replaced as one tuple.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        system: str = "system",
        *,
        multi_set: bool = False,
        racy_window: float = RACY_WINDOW,
    ) -> None:
        """`multi_set=True` makes `write` always use "system/host:port" lines, even in an empty
        file. Without it, a file that has no system lines yet is written in the single-set form
        "host:port" (Beetle before 2.3.0), and one that has system lines keeps that form. Use
        it when several failover sets share the file: a plain line applies to EVERY system, so
        the first set written in single-set form would be taken as every set's master."""
        self.path = Path(path)
        self.system = _check_system(system)
        self.multi_set = multi_set
        self.racy_window = racy_window
        # (stat key, master, racy): replaced as a whole, so readers in threads never see a mix
        self._cache: tuple[_Key | None, str | None, bool] | None = None
        self._warned: str | None = None

    def __repr__(self) -> str:
        return f"RedisMasterFile({str(self.path)!r}, system={self.system!r})"

    # -- reading ---------------------------------------------------------------------------

    def read(self) -> str | None:
        """The master's "host:port" for our system, or None for "no master".

        Re-reads the file only if its stat key changed (or it changed very recently); never
        raises for bad content or a missing file: both mean "no master", and bad content is
        logged with the file and line.
        """
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._cache = (None, None, False)
            return None
        except OSError as exc:
            self._warn_once(f"cannot stat {self.path}: {exc}; treating it as naming no master")
            return None
        cache = self._cache
        if cache is not None and not cache[2] and cache[0] == _key(st):
            return cache[1]
        return self._reload()

    def _read_content(self) -> tuple[os.stat_result | None, str]:
        """Open and read the file; the stat is of the opened file, so the content and the
        cache key belong together even if a writer renames a new file in meanwhile."""
        try:
            with open(self.path, "rb") as handle:
                st = os.fstat(handle.fileno())
                data = handle.read()
        except FileNotFoundError:
            return None, ""
        return st, data.decode("utf-8", errors="replace")

    def _reload(self) -> str | None:
        try:
            st, text = self._read_content()
        except OSError as exc:
            self._warn_once(f"cannot read {self.path}: {exc}; treating it as naming no master")
            return None
        master = self._master_from(text)
        if st is None:
            self._cache = (None, None, False)
            return None
        newest = max(st.st_mtime_ns, st.st_ctime_ns)
        racy = time.time_ns() - newest < self.racy_window * 1e9
        self._cache = (_key(st), master, racy)
        return master

    def _master_from(self, text: str) -> str | None:
        """Our system's master in `text`, or None (warning once per distinct bad content)."""
        plain: list[tuple[int, str]] = []
        ours: list[tuple[int, str]] = []
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line:
                continue
            name, slash, master = line.partition("/")
            if not slash:
                plain.append((number, line))
            elif name.strip() == self.system:
                ours.append((number, master.strip()))
        chosen = ours or plain
        if not chosen:
            return None
        values = {value for _, value in chosen}
        if len(values) > 1:
            lines = ", ".join(f"line {n}: {v!r}" for n, v in chosen)
            self._warn_once(
                f"master file {self.path} names {len(values)} different masters for system "
                f"{self.system!r} ({lines}); using none until it is fixed",
                text,
            )
            return None
        number, value = chosen[0]
        if not value:
            return None  # "system/": explicitly no master
        try:
            host, port = parse_address(value)
        except ValueError as exc:
            self._warn_once(
                f"master file {self.path} line {number}: {exc}; using no master until it is "
                'fixed (expected "host:port" or "system/host:port" lines)',
                text,
            )
            return None
        self._warned = None
        return format_address(host, port)

    def _warn_once(self, message: str, content: str | None = None) -> None:
        """Log a problem once per distinct bad content, not on every command of every worker."""
        tag = message if content is None else content
        if tag != self._warned:
            self._warned = tag
            log.warning(message)

    # -- writing ---------------------------------------------------------------------------

    def write(self, master: str | None) -> bool:
        """Make the file name `master` for our system (None or "" = no master).

        Atomic and crash-safe (see the module doc). Other systems' lines are kept. Returns
        True if the file changed, False if it already said this (nothing is rewritten, so
        readers everywhere keep their cache). Raises ValueError for a malformed address, and
        OSError if the directory is missing or not writable.
        """
        if master is None or (isinstance(master, str) and not master.strip()):
            value = None
        else:
            try:
                value = format_address(*parse_address(master))
            except ValueError as exc:
                raise ValueError(
                    f"RedisMasterFile.write({master!r}) for {self.path}: {exc}; pass None or "
                    '"" to clear the master'
                ) from None
        with self._locked():
            old = self._read_for_write()
            new = self._render(_parse(old), value)
            if new == old:
                return False
            self._replace(new)
        log.info("master file %s: system %r master is now %s", self.path, self.system, value)
        return True

    def clear(self) -> bool:
        """write(None): from now on no worker on this host sends commands to any server."""
        return self.write(None)

    def _render(self, parsed: _Parsed, value: str | None) -> str:
        """The new content: single-set form when the file has no system lines (and we are
        not told it is shared), otherwise our line replaced and every other line kept."""
        for number, line in parsed.bad_lines:
            log.warning(
                "master file %s line %d: dropping extra plain line %r while writing",
                self.path,
                number,
                line,
            )
        if not parsed.systems and not self.multi_set:
            return f"{value}\n" if value else ""
        systems = dict(parsed.systems)
        if value is not None:
            systems[self.system] = value
        elif parsed.plain is not None:
            systems[self.system] = None  # "system/": overrides the plain line for us only
        else:
            systems.pop(self.system, None)
        lines = [parsed.plain] if parsed.plain is not None else []
        lines += [f"{name}/{master or ''}" for name, master in sorted(systems.items())]
        return "".join(f"{line}\n" for line in lines)

    def _read_for_write(self) -> str:
        try:
            return self.path.read_bytes().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """An exclusive flock on "<file>.lock", beside the file. Not on the file itself: it is
        replaced by rename, and a lock on the old inode would not exclude the next writer."""
        lock_path = self.path.with_name(self.path.name + ".lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the flock

    def _replace(self, content: str) -> None:
        # under _locked(): one writer at a time, so the fixed temporary name is ours alone
        atomic_write(self.path, content.encode("utf-8"), mode=self._mode())
        self._cache = None

    def _mode(self) -> int:
        """Keep the old file's permission bits (readers may be other users); 0644 if new."""
        try:
            return os.stat(self.path).st_mode & 0o7777
        except FileNotFoundError:
            return 0o644


def _key(st: os.stat_result) -> _Key:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
