"""Start node OS processes for tests, wait until each is ready, and always tear them down.

A node program prints one ready line on stdout once it listens, e.g.
`READY a@127.0.0.1 127.0.0.1:40123`; the launcher waits for it (or for the process to die,
or a timeout, each a clear LaunchError with the tail of its stderr) and keeps everything the
process prints, so a test can wait for a line ("EVENT nodedown ..."), and read the logs.

Each process runs in its own session (process group): teardown sends SIGCONT (a SIGSTOPped
node cannot act on SIGTERM), SIGTERM, then SIGKILL after a grace time, to the whole group, and
reaps it. `Launcher` is a context manager, and every launcher still open at interpreter exit
is torn down too, so a failing test leaves no process (and so no port) behind.

A launcher that is SIGKILLed runs no teardown at all, so on Linux each process is also tied to
it by the kernel: it starts through a shim that sets PR_SET_PDEATHSIG(SIGKILL) and execs the
program, and it is forked from one thread per launcher that lives until `stop_all` (the
signal fires when the forking *thread* ends, so a short-lived caller thread must not fork).
A SIGKILLed `rabbitry demo` (which starts its nodes here) leaves no node behind.

    with Launcher() as launcher:
        a = launcher.start(NodeSpec("a", lambda: [sys.executable, "node.py", "--name", "a@h"]))
        a.wait_for(r"EVENT nodeup b@h")
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["READY", "LaunchError", "Launcher", "NodeSpec", "OsNode"]

READY = r"^READY (?P<node>\S+) (?P<address>\S+)"
"""The default ready line: `READY <node> <host:port>` (more fields may follow)."""


class LaunchError(RuntimeError):
    """A node did not start: it exited, or printed no ready line in time."""


@dataclass
class NodeSpec:
    """How to start one node process.

    `argv` is a list, or a callable returning one, called at start time (so it can use what
    is known only then: ports of nodes started before, a temp dir). `ready` is a regex for
    the ready line; its `address` group, if any, becomes `OsNode.address`.
    """

    name: str
    argv: Sequence[str] | Callable[[], Sequence[str]]
    ready: str = READY
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    ready_timeout: float = 30.0


class _Stream:
    """The lines of one pipe, read by a thread, waitable."""

    def __init__(self, pipe, name: str) -> None:
        self._cond = threading.Condition()
        self._lines: list[str] = []
        self._closed = False
        self._thread = threading.Thread(target=self._read, args=(pipe,), name=name, daemon=True)
        self._thread.start()

    def _read(self, pipe) -> None:
        with contextlib.suppress(ValueError, OSError):
            for line in pipe:
                with self._cond:
                    self._lines.append(line.rstrip("\n"))
                    self._cond.notify_all()
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def lines(self) -> list[str]:
        with self._cond:
            return list(self._lines)

    def wait_for(self, pattern: str, timeout: float, start: int, alive: Callable[[], bool]):
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._cond:
            index = start
            while True:
                while index < len(self._lines):
                    match = regex.search(self._lines[index])
                    index += 1
                    if match:
                        return match, index
                if self._closed or not alive():
                    return None, index
                left = deadline - time.monotonic()
                if left <= 0:
                    return None, index
                self._cond.wait(min(left, 0.1))

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)


class OsNode:
    """A started node process. Lines are kept; `wait_for` scans from where you say."""

    def __init__(self, spec: NodeSpec, popen: subprocess.Popen) -> None:
        self.spec = spec
        self.name = spec.name
        self.popen = popen
        self.pid = popen.pid
        self.address: str | None = None
        self.ready_line: str | None = None
        self._stdout = _Stream(popen.stdout, f"launcher-out {spec.name}")
        self._stderr = _Stream(popen.stderr, f"launcher-err {spec.name}")
        self._stopped = False
        self._term_sent = False  # ask_to_stop() sent SIGTERM: stop() does not send another

    def __repr__(self) -> str:
        return f"<OsNode {self.name} pid={self.pid} address={self.address}>"

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def stdout(self) -> list[str]:
        return self._stdout.lines()

    def stderr(self) -> list[str]:
        return self._stderr.lines()

    def wait_for(
        self, pattern: str, timeout: float = 10.0, start: int = 0, stream: str = "stdout"
    ) -> re.Match[str]:
        """Wait for a line (from line `start` on) matching `pattern`; AssertionError if none
        comes within `timeout` s or the process ends first."""
        source = self._stdout if stream == "stdout" else self._stderr
        match, _ = source.wait_for(pattern, timeout, start, lambda: True)
        if match is None:
            raise AssertionError(
                f"{self.name}: no {stream} line matching {pattern!r} within {timeout} s "
                f"(alive={self.alive}); {stream} tail:\n" + "\n".join(source.lines()[-20:])
            )
        return match

    def mark(self, stream: str = "stdout") -> int:
        """The number of lines so far: pass it as `start` to wait only for new lines."""
        return len(self.stdout() if stream == "stdout" else self.stderr())

    def send_line(self, text: str) -> None:
        """Write a line to the process's stdin (its command channel, if it has one)."""
        assert self.popen.stdin is not None
        self.popen.stdin.write(text + "\n")
        self.popen.stdin.flush()

    def signal(self, sig: int) -> None:
        """Send `sig` to the process (not its group)."""
        if self.alive:
            os.kill(self.pid, sig)
            if sig == signal.SIGSTOP:
                self._stopped = True
            elif sig == signal.SIGCONT:
                self._stopped = False

    def pause(self) -> None:
        """SIGSTOP: the process freezes, its sockets stay open."""
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def kill(self, timeout: float = 10.0) -> int | None:
        """SIGKILL the whole group and reap it; returns the exit status."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout)
        return self.popen.poll()

    def ask_to_stop(self) -> None:
        """SIGCONT and SIGTERM to the group, without waiting (stop() does the rest)."""
        if self.alive and not self._term_sent:
            self._term_sent = True
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGCONT)
                os.killpg(self.pid, signal.SIGTERM)

    def stop(self, grace: float = 5.0) -> int | None:
        """SIGCONT, SIGTERM, then SIGKILL after `grace` s, to the group; reap; close pipes."""
        if self.alive:
            self.ask_to_stop()
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                self.kill()
        else:
            # The leader is gone; make sure nothing else of its group lingers.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(5)
        for pipe in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        self._stdout.join(2)
        self._stderr.join(2)
        return self.popen.poll()


_OPEN: weakref.WeakSet[Launcher] = weakref.WeakSet()

# `python -I -S -c _PDEATHSIG <launcher pid> <program> <args...>`: ask the kernel to SIGKILL this
# process when the thread that forked it ends, check that the launcher is not gone already
# (then nobody is left to signal it), and exec the program (the pid, and the signal, stay).
_PDEATHSIG = """\
import ctypes, os, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0)
except Exception:
    pass
if os.getppid() != int(sys.argv[1]):
    os._exit(1)
os.execvp(sys.argv[2], sys.argv[2:])
"""


class _Forker:
    """One daemon thread that runs every Popen of a launcher: PR_SET_PDEATHSIG fires when
    the forking thread ends, and this one ends only at `close()` (or with the process)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], object], queue.SimpleQueue] | None]
        self._jobs = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="launcher-forker", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, reply = job
            try:
                reply.put((True, fn()))
            except BaseException as exc:  # handed to the caller, raised there
                reply.put((False, exc))

    def call(self, fn: Callable[[], object]) -> object:
        reply: queue.SimpleQueue = queue.SimpleQueue()
        self._jobs.put((fn, reply))
        ok, value = reply.get()
        if not ok:
            raise value
        return value

    def close(self) -> None:
        self._jobs.put(None)


@atexit.register
def _stop_open_launchers() -> None:
    for launcher in list(_OPEN):
        launcher.stop_all()


class Launcher:
    """Starts NodeSpecs, tracks every process it started, and stops them all."""

    def __init__(self, grace: float = 5.0) -> None:
        self.grace = grace
        self.nodes: list[OsNode] = []
        self._lock = threading.Lock()
        self._forker: _Forker | None = None
        _OPEN.add(self)

    def __enter__(self) -> Launcher:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop_all()

    def start(self, *specs: NodeSpec) -> list[OsNode]:
        """Start every spec, then wait until each is ready (they boot in parallel).

        Raises LaunchError, after stopping what it started in this call, if one is not.
        """
        started = [self._spawn(spec) for spec in specs]
        try:
            for node in started:
                self._wait_ready(node)
        except BaseException:
            for node in started:
                node.stop(self.grace)
            raise
        return started

    def start_one(self, spec: NodeSpec) -> OsNode:
        return self.start(spec)[0]

    def _spawn(self, spec: NodeSpec) -> OsNode:
        argv = list(spec.argv() if callable(spec.argv) else spec.argv)
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        if spec.env:
            env.update(spec.env)
        if sys.platform.startswith("linux"):  # tied to this launcher: see the module docstring
            argv = [sys.executable, "-I", "-S", "-c", _PDEATHSIG, str(os.getpid()), *argv]
            with self._lock:
                if self._forker is None:
                    self._forker = _Forker()
                forker = self._forker
        else:
            forker = None

        def spawn() -> subprocess.Popen:
            return subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                bufsize=1,
                env=env,
                cwd=spec.cwd,
                start_new_session=True,  # its own group: teardown reaches its children too
            )

        popen: subprocess.Popen = forker.call(spawn) if forker else spawn()  # type: ignore[assignment]
        node = OsNode(spec, popen)
        with self._lock:
            self.nodes.append(node)
        return node

    def _wait_ready(self, node: OsNode) -> None:
        match, _ = node._stdout.wait_for(
            node.spec.ready, node.spec.ready_timeout, 0, lambda: node.alive
        )
        if match is None:
            # Its stdout closed or the time is up: let it finish dying, and read all of its
            # stderr, so that the error says why.
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.popen.wait(2)
            exited = not node.alive
            node.stop(self.grace)
            why = "exited" if exited else f"printed no ready line in {node.spec.ready_timeout} s"
            tail = "\n".join(node.stderr()[-20:])
            raise LaunchError(
                f"node {node.name} (pid {node.pid}) {why}; "
                f"expected a line matching {node.spec.ready!r}; stderr tail:\n{tail}"
            )
        node.ready_line = match.group(0)
        node.address = match.groupdict().get("address")

    def stop_all(self) -> None:
        """Stop every node this launcher started (last first). Safe to call twice."""
        with self._lock:
            nodes, self.nodes = self.nodes, []
        # All at once, then each within the grace time: n nodes stop in one grace time, not n
        # (a Ctrl-C'd demo on a loaded machine waited for its three nodes one after another).
        for node in reversed(nodes):
            node.ask_to_stop()
        deadline = time.monotonic() + self.grace
        for node in reversed(nodes):
            node.stop(max(0.0, deadline - time.monotonic()))
        forker = None
        with self._lock:
            if not self.nodes:
                forker, self._forker = self._forker, None
        if forker is not None:  # every node it forked is stopped: its thread may end
            forker.close()
