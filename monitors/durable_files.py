"""Files that survive a crash whole: write-all, fsync of a directory, and atomic replace.

One implementation for every layer that persists state (the node monitor's cluster files,
mnesia_like's snapshots and schema, a node's learned addresses).
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Sequence
from pathlib import Path


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """os.write until every byte is written (a regular file writes short only when full)."""
    written = os.write(fd, data)
    if written < len(data):
        view = memoryview(data)
        while written < len(data):
            written += os.write(fd, view[written:])


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """fsync a directory, so that a rename or unlink in it survives a crash.

    A directory that cannot be opened, or a filesystem that does not fsync directories
    (EINVAL), is as good as it gets; any other failure is raised."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
    finally:
        os.close(fd)


def atomic_write(
    path: str | os.PathLike[str], chunks: bytes | Sequence[bytes], *, mode: int | None = None
) -> None:
    """Replace `path` with `chunks` so that a crash leaves the old file or the new one, whole.

    Written to `<path>.tmp` (its directory made if missing), fsynced, renamed over `path`, and
    the directory fsynced: without the first fsync a crash could leave a renamed but empty
    file, without the last the rename itself could be lost. The temporary file is removed if
    anything fails. `mode` sets the new file's permission bits exactly, whatever the umask (0600
    for a file that holds a secret); by default it is 0644 less the umask. One writer at a time
    per path: callers that may race hold a lock (the master file does).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    parts = [chunks] if isinstance(chunks, bytes | bytearray | memoryview) else chunks
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644 if mode is None else 0o600)
    try:
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            for part in parts:
                write_all(fd, part)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)
