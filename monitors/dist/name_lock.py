"""One live process per node name on one host: an flock()ed file per name, taken before the
node listens (epmd's rule; DESIGN "Names and roles are verified, not believed").

The kernel drops an flock when its process dies, however it dies, so a node restarted after a
crash or a kill -9 takes its name again at once; a frozen (SIGSTOPped) one still holds it, as
it still holds its sockets. The file says where the holder listens, so that the refused
process can say where the running node is.

The files live in `RABBITRY_LOCK_DIR` if set (tests give each worker its own, so that two
test clusters that use the same names can run side by side), else in the per-user
`$XDG_RUNTIME_DIR/rabbitry-names`, else in `<tmp>/rabbitry-<uid>/names`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import tempfile
from pathlib import Path

__all__ = ["LOCK_DIR_ENV", "NameInUse", "NameLock", "lock_dir"]

LOCK_DIR_ENV = "RABBITRY_LOCK_DIR"
_SAFE = re.compile(r"[^A-Za-z0-9@._-]")


class NameInUse(Exception):
    """Another live process holds the node name `node`; `at` says where it listens."""

    def __init__(self, node: str, at: str) -> None:
        super().__init__(f"node {node}: the name is in use by a running node at {at}")
        self.node = node
        self.at = at


def lock_dir() -> Path:
    """Where the name locks of this user live (see the module docstring)."""
    explicit = os.environ.get(LOCK_DIR_ENV)
    if explicit:
        return Path(explicit)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime) and os.access(runtime, os.W_OK):
        return Path(runtime) / "rabbitry-names"
    return Path(tempfile.gettempdir()) / f"rabbitry-{os.getuid()}" / "names"


def _file_name(node: str) -> str:
    """A file name per node name: readable, and a hash so that two names that differ only in
    characters we replace still get two files."""
    digest = hashlib.sha256(node.encode()).hexdigest()[:12]
    return f"{_SAFE.sub('_', node)[:200]}.{digest}.lock"


class NameLock:
    """The lock of one node name. `acquire()` raises NameInUse while another process (or
    another node of this process) holds it; `release()` (or the process's death) frees it."""

    def __init__(self, node: str, directory: Path | None = None) -> None:
        self.node = node
        self.path = (directory or lock_dir()) / _file_name(node)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read(fd)
            os.close(fd)
            raise NameInUse(self.node, holder) from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._write(f"pid {os.getpid()}, starting")

    def set_address(self, address: str) -> None:
        """Say where this node listens, for a second process's refusal."""
        if self._fd is not None:
            self._write(address)

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)  # closing drops the flock

    def _write(self, text: str) -> None:
        assert self._fd is not None
        data = text.encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)


def _read(fd: int) -> str:
    try:
        text = os.pread(fd, 512, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    return text or "an unknown address (it is starting)"
