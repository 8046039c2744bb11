"""OsProcess: a Process that runs an OS command and lives and dies with it.

Erlang supervises external programs through ports; here an OsProcess plays that part. It starts
the command in its own process group (its own session, in fact), appends the command's stdout and
stderr to a log file, and waits for it on a watcher thread. The command's death is the actor's
death: exit code 0 ends the actor with "normal", anything else (a non-zero code, a signal) is a
crash whose reason is an `OsProcessExited` carrying the code or the signal, so a supervisor
restarts it as it would any crashed child.

Stopping sends SIGTERM to the whole process group, waits up to `grace` seconds, then SIGKILLs
the group. A "kill" exit signal (a supervisor's brutal_kill) SIGKILLs the group at once.

Orphans are prevented two ways, because a Python process can be SIGKILLed and then runs no
cleanup at all:

1. A pid file (JSON: pid, pgid, create_time, a per-launch token) is written while the command
   runs and removed on a clean shutdown. It is also locked (flock) for the life of the OsProcess;
   the kernel drops the lock when our process dies. The next OsProcess that takes the same pid file
   finds the record, checks that the processes in that group really are the ones we started (the
   leader's pid and create_time, or the token in their environment) and kills the group first.
2. On Linux, the command is started through a tiny shim that sets PR_SET_PDEATHSIG(SIGKILL)
   and then execs the command, so the kernel SIGKILLs the command when the thread that started
   it dies. That thread is the actor's own thread, which lives exactly as long as the actor.

Neither catches everything: processes that leave the group (setsid, setpgid, daemonizing) are
beyond the group kill, PDEATHSIG covers only the direct child (and is dropped when it execs a
set-user-ID program), and outside Linux only the pid file is left. See docs/osprocess.md.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import psutil
from pykka import ActorDeadError

from supervisors.process import Process
from supervisors.reasons import NORMAL

log = logging.getLogger("supervisors.osprocess")

RUN_DIR_ENV = "RABBITRY_RUN_DIR"
"""Environment variable naming the directory for default log and pid files."""

TOKEN_ENV = "RABBITRY_OSPROCESS_TOKEN"
"""Set in the command's environment to a per-launch token, so that leftovers found through a pid
file can be told apart from unrelated processes that happen to reuse the same ids."""

_KILL_WAIT = 5.0  # how long to wait for SIGKILLed processes to vanish before complaining
_CREATE_TIME_SLACK = 1.0  # Linux create_time derives from btime, which can wobble by ~1 s

# Runs as `python -I -S -c _SHIM <parent pid> <report fd> <command...>` in the new session.
# It asks the kernel to SIGKILL it when the thread that forked it dies, makes sure that thread's
# process did not die already (then there is nobody left to signal it), and execs the command,
# keeping the pid. An exec failure is written to the report fd; a successful exec closes it.
_SHIM = """\
import ctypes, os, sys
ppid, fd, argv = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
try:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(1, 9, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
except Exception as exc:
    sys.stderr.write(
        "rabbitry: prctl(PR_SET_PDEATHSIG) failed (%s); this command will not be killed "
        "when its parent dies\\n" % (exc,))
    sys.stderr.flush()
if os.getppid() != ppid:
    os._exit(1)
os.set_inheritable(fd, False)
try:
    os.execvp(argv[0], argv)
except OSError as exc:
    os.write(fd, ("%d\\0%s" % (exc.errno or 0, exc.strerror or exc)).encode())
    os._exit(127)
"""


class OsProcessExited(Exception):
    """The command ended on its own with a non-zero code or by a signal: the OsProcess's crash
    reason, so a supervisor sees why its child died.

    `returncode` follows subprocess: the exit code, or -N for death by signal N.
    `signal` is N for death by a signal, else None.
    """

    def __init__(self, command: Sequence[str], returncode: int) -> None:
        super().__init__(list(command), returncode)
        self.command = list(command)
        self.returncode = returncode
        self.signal: int | None = -returncode if returncode < 0 else None

    def __str__(self) -> str:
        if self.signal is not None:
            return (
                f"command {self.command!r} killed by signal {self.signal} ({_signame(self.signal)})"
            )
        return f"command {self.command!r} exited with code {self.returncode}"


class OsProcessStartError(Exception):
    """The command could not be started; `start()` raises it (a failed start, as OTP has).

    The message names the command and what to fix; `__cause__` holds the OSError, if any.
    """

    def __init__(self, command: Sequence[str], problem: str) -> None:
        super().__init__(list(command), problem)
        self.command = list(command)
        self.problem = problem

    def __str__(self) -> str:
        return f"cannot start command {self.command!r}: {self.problem}"


class _CommandExited:
    """Told by the watcher thread to the actor when the command has been reaped."""

    __slots__ = ("pid", "returncode")

    def __init__(self, pid: int, returncode: int) -> None:
        self.pid = pid
        self.returncode = returncode


def run_dir() -> str:
    """Where default log and pid files go: $RABBITRY_RUN_DIR, else a per-user temp directory.

    Only the path is computed here; OsProcess creates it when it starts.
    """
    configured = os.environ.get(RUN_DIR_ENV)
    if configured:
        return os.path.abspath(configured)
    return os.path.join(tempfile.gettempdir(), f"rabbitry-{os.getuid()}", "run")


_user_run_dir = run_dir  # OsProcess's `run_dir` argument shadows the function's name


def default_name(command: Sequence[str]) -> str:
    """A short name that is stable for a command line: its program's name plus a hash of the
    whole command, so that restarts of the same command find the same log and pid files."""
    digest = hashlib.sha256(json.dumps(list(command)).encode()).hexdigest()[:10]
    program = re.sub(r"[^A-Za-z0-9_.-]", "_", os.path.basename(command[0]))[:40].lstrip(".")
    return f"{program or 'cmd'}-{digest}"


class OsProcess(Process):
    """Run `command` as a supervised child; see the module docstring for the whole story.

    `env` is merged over os.environ; `cwd` is the working directory. `name` (default: a stable
    hash of the command) names the default `<run_dir>/<name>.log` and `<run_dir>/<name>.pid`.
    `run_dir` (default: `run_dir()`, per user) is where those defaults go; a node passes its own
    `<data_dir>/run`, so that two nodes on one host running the same tree never share a file.
    `grace` is how long a stop waits after SIGTERM before SIGKILL; give the ChildSpec a
    `shutdown` longer than `grace`, or the supervisor's kill cuts the grace short.

    Two OsProcesses must not share a pid file at the same time; the second one fails to start.
    """

    use_pdeathsig: ClassVar[bool] = sys.platform.startswith("linux")
    """Start through the PR_SET_PDEATHSIG shim (Linux only). Set False in a subclass to exec
    the command directly."""

    exec_timeout: ClassVar[float] = 30.0
    """How long the shim may take to exec the command before the start is declared failed."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        name: str | None = None,
        log_file: str | os.PathLike[str] | None = None,
        pid_file: str | os.PathLike[str] | None = None,
        grace: float = 5.0,
        run_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__()
        self._command = _check_command(command)
        self._env = _check_env(env)
        self._cwd = os.fspath(cwd) if cwd is not None else None
        if name is None:
            name = default_name(self._command)
        elif not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
            raise ValueError(f"name must be a non-empty file name without '/'; got {name!r}")
        self._name = name
        if (
            isinstance(grace, bool)
            or not isinstance(grace, int | float)
            or not grace >= 0
            or grace == float("inf")
        ):
            raise ValueError(f"grace must be a finite number of seconds >= 0; got {grace!r}")
        self._grace = float(grace)
        default_dir = None
        if log_file is None or pid_file is None:
            default_dir = os.path.abspath(os.fspath(run_dir)) if run_dir else _user_run_dir()
        # The per-user directory under the shared temp dir must be checked for ownership.
        self._private_base = (
            os.path.dirname(default_dir)
            if default_dir is not None and not run_dir and not os.environ.get(RUN_DIR_ENV)
            else None
        )
        self._log_file = (
            os.path.abspath(os.fspath(log_file))
            if log_file is not None
            else os.path.join(default_dir, f"{name}.log")  # type: ignore[arg-type]
        )
        self._pid_file = (
            os.path.abspath(os.fspath(pid_file))
            if pid_file is not None
            else os.path.join(default_dir, f"{name}.pid")  # type: ignore[arg-type]
        )
        self._lock = threading.Lock()  # guards _popen, _killed and the pid file between threads
        self._popen: subprocess.Popen[bytes] | None = None
        self._killed = False
        self._exited = threading.Event()
        self._returncode: int | None = None
        self._pidfile = _PidFile(self._pid_file)

    def __str__(self) -> str:
        return f"{type(self).__name__} {getattr(self, '_name', '?')} ({self.actor_urn})"

    # --------------------------------------------------------------------- read-only info

    @property
    def command(self) -> list[str]:
        """The command line, as given."""
        return list(self._command)

    @property
    def name(self) -> str:
        """The name used for the default log and pid files."""
        return self._name

    @property
    def log_file(self) -> str:
        """Absolute path of the file the command's stdout and stderr are appended to."""
        return self._log_file

    @property
    def pid_file(self) -> str:
        """Absolute path of the pid file (present while the command runs)."""
        return self._pid_file

    @property
    def grace(self) -> float:
        """Seconds a stop waits after SIGTERM before it SIGKILLs the group."""
        return self._grace

    @property
    def pid(self) -> int | None:
        """The command's pid (also its process group id), or None before it started."""
        popen = self._popen
        return popen.pid if popen is not None else None

    @property
    def returncode(self) -> int | None:
        """None while the command runs; then its exit code, or -N if signal N killed it."""
        return self._returncode

    # ------------------------------------------------------------------------- lifecycle

    def on_start(self) -> None:
        """Clean up leftovers of a previous run, then start the command (in the actor's thread,
        which PR_SET_PDEATHSIG ties the command's life to)."""
        self._make_dirs()
        try:
            previous = self._pidfile.acquire()
        except BlockingIOError as exc:
            raise OsProcessStartError(
                self._command,
                f"pid file {self._pid_file} is locked by another running OsProcess; "
                "give each OsProcess its own name= or pid_file=",
            ) from exc
        except OSError as exc:
            raise OsProcessStartError(
                self._command, f"cannot open pid file {self._pid_file}: {exc.strerror or exc}"
            ) from exc
        try:
            if previous is not None:
                self._reap_leftovers(previous)
            token = uuid.uuid4().hex
            self._launch(token)
            popen = self._popen
            assert popen is not None
            try:
                create_time = psutil.Process(popen.pid).create_time()
            except psutil.Error:
                create_time = None  # already gone; the watcher reports how it ended
            self._pidfile.write(
                {
                    "pid": popen.pid,
                    "pgid": popen.pid,
                    "create_time": create_time,
                    "token": token,
                    "command": self._command,
                    "owner_pid": os.getpid(),
                }
            )
        except BaseException:
            self._abort_start()
            raise
        threading.Thread(
            target=self._watch, args=(popen,), name=f"{self._name}-watcher", daemon=True
        ).start()
        log.info("%s: started %r as pid %d", self, self._command, popen.pid)

    def on_stop(self) -> None:
        """SIGTERM the group, wait up to `grace`, SIGKILL what is left, reap."""
        self._shutdown(self._grace)

    def on_failure(self, *_exc_info: Any) -> None:
        """A crash (the command's own death, or an error in a handler): take the group down."""
        self._shutdown(self._grace)

    def on_kill(self) -> None:
        """brutal_kill: SIGKILL the group at once, from the killer's thread."""
        with self._lock:
            self._killed = True
            popen = self._popen
        if popen is not None:
            # The group too, even if the command itself has ended: it may have left children.
            _signal_group(popen.pid, signal.SIGKILL)
            _signal_leader(popen, self._exited, signal.SIGKILL)
        self._pidfile.release()

    def _handle_receive(self, message: Any) -> Any:
        if type(message) is _CommandExited:
            self._command_exited(message)
            return None
        return super()._handle_receive(message)

    def _command_exited(self, message: _CommandExited) -> None:
        """Turn the command's death into ours: code 0 is "normal", anything else a crash."""
        if message.returncode == 0:
            log.info("%s: command %r exited with code 0", self, self._command)
            self.exit(NORMAL)
        raise OsProcessExited(self._command, message.returncode)

    # -------------------------------------------------------------------------- internals

    def _make_dirs(self) -> None:
        if self._private_base is not None:
            _make_private_tree(self._private_base, self._command)
        for path in (self._log_file, self._pid_file):
            try:
                os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            except OSError as exc:
                raise OsProcessStartError(
                    self._command,
                    f"cannot create directory {os.path.dirname(path)}: {exc.strerror or exc}",
                ) from exc

    def _launch(self, token: str) -> None:
        command = self._command
        cwd = self._cwd
        if cwd is not None and not os.path.isdir(cwd):
            raise OsProcessStartError(
                command, f"working directory {cwd!r} does not exist or is not a directory"
            )
        env = dict(os.environ)
        env.update(self._env)
        env[TOKEN_ENV] = token
        try:
            log_stream = open(self._log_file, "ab")  # noqa: SIM115 - closed below, child keeps it
        except OSError as exc:
            raise OsProcessStartError(
                command, f"cannot open log file {self._log_file}: {exc.strerror or exc}"
            ) from exc
        shim = self.use_pdeathsig and bool(sys.executable)
        report_r = report_w = -1
        try:
            if shim:
                report_r, report_w = os.pipe()
                args = [sys.executable, "-I", "-S", "-c", _SHIM, str(os.getpid()), str(report_w)]
                args += command
            else:
                args = command
            with self._lock:
                if self._killed:
                    raise ActorDeadError(f"{self} was killed while starting")
                try:
                    self._popen = subprocess.Popen(
                        args,
                        stdin=subprocess.DEVNULL,
                        stdout=log_stream,
                        stderr=subprocess.STDOUT,
                        env=env,
                        cwd=cwd,
                        start_new_session=True,
                        close_fds=True,
                        pass_fds=(report_w,) if shim else (),
                    )
                except OSError as exc:
                    raise OsProcessStartError(command, self._explain(exc.errno, exc)) from exc
            if shim:
                os.close(report_w)
                report_w = -1
                failure = self._read_report(report_r)
                if failure is not None:
                    code, _, text = failure.partition("\0")
                    self._popen.wait()
                    raise OsProcessStartError(command, self._explain(int(code or 0), text))
        finally:
            log_stream.close()
            for fd in (report_r, report_w):
                if fd >= 0:
                    os.close(fd)

    def _read_report(self, fd: int) -> str | None:
        """Wait for the shim to exec (the pipe closes: None) or to report why it could not."""
        chunks: list[bytes] = []
        deadline = time.monotonic() + self.exec_timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise OsProcessStartError(
                    self._command,
                    f"the launcher did not exec the command within {self.exec_timeout:g} s",
                )
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks).decode(errors="replace") if chunks else None

    def _explain(self, code: int | None, detail: object) -> str:
        """Say what went wrong with exec in words a user can act on."""
        program = self._command[0]
        cwd = self._cwd
        if isinstance(detail, OSError) and detail.filename is not None and detail.filename == cwd:
            return f"working directory {cwd!r} does not exist or is not a directory"
        path = self._env.get("PATH", os.environ.get("PATH", os.defpath))
        if "/" in program:
            where = os.path.join(cwd or os.getcwd(), program)
            found = os.path.exists(where)
        else:
            found = shutil.which(program, path=path) is not None
        if code == errno.ENOENT:
            if found:
                return f"{program!r} exists but its interpreter (the #! line) was not found"
            if "/" in program:
                return f"no such file {program!r}" + (f" (relative to cwd {cwd!r})" if cwd else "")
            return f"executable {program!r} not found on PATH ({path})"
        if code in (errno.EACCES, errno.EPERM):
            return f"permission denied running {program!r}: is it an executable file (chmod +x)?"
        if code == errno.ENOEXEC:
            return f"{program!r} is not a program this system can run (no #! line or wrong format)"
        text = detail.strerror if isinstance(detail, OSError) else detail
        return f"exec of {program!r} failed: {text} (errno {code})"

    def _abort_start(self) -> None:
        """on_start failed after (perhaps) starting the command: leave nothing behind."""
        popen = self._popen
        if popen is not None and popen.returncode is None:
            _signal_group(popen.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                popen.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(_KILL_WAIT)
            self._exited.set()
        self._pidfile.release()

    def _watch(self, popen: subprocess.Popen[bytes]) -> None:
        """Watcher thread: reap the command and tell the actor how it ended."""
        returncode = popen.wait()
        self._returncode = returncode
        self._exited.set()
        with contextlib.suppress(ActorDeadError):
            self.actor_ref.tell(_CommandExited(popen.pid, returncode))

    def _shutdown(self, grace: float) -> None:
        """SIGTERM the group, give it `grace` seconds, SIGKILL the rest, then drop the pid file.

        Also runs after the command ended by itself: background processes it left in its group
        must not outlive it.
        """
        with self._lock:
            popen = self._popen
        if popen is not None:
            pgid = popen.pid
            deadline = time.monotonic() + grace
            if _signal_group(pgid, signal.SIGTERM) | _signal_leader(
                popen, self._exited, signal.SIGTERM
            ):
                self._exited.wait(grace)
                if not _wait_group_gone(pgid, deadline) or not self._exited.is_set():
                    log.warning(
                        "%s: %r did not end within %g s of SIGTERM; sending SIGKILL",
                        self,
                        self._command,
                        grace,
                    )
                    _signal_group(pgid, signal.SIGKILL)
                    _signal_leader(popen, self._exited, signal.SIGKILL)
                    if not _wait_group_gone(pgid, time.monotonic() + _KILL_WAIT):
                        log.error(
                            "%s: process group %d survived SIGKILL; keeping pid file %s so "
                            "that the next start kills it",
                            self,
                            pgid,
                            self._pid_file,
                        )
                        self._pidfile.keep = True
            if not self._exited.wait(_KILL_WAIT):
                log.error("%s: pid %d was not reaped after SIGKILL", self, pgid)
        self._pidfile.release()

    def _reap_leftovers(self, record: Any) -> None:
        """Kill what a previous run recorded in the pid file and left running (our Python
        process was SIGKILLed, say), after checking that those processes really are it."""
        try:
            pid = int(record["pid"])
            pgid = int(record["pgid"])
            ctime = record.get("create_time")
            ctime = float(ctime) if ctime is not None else None
            token = record.get("token")
        except (TypeError, KeyError, ValueError):
            log.warning("%s: ignoring unreadable pid file %s: %r", self, self._pid_file, record)
            return
        members = _group_members(pgid)
        group_is_ours = any(_is_ours(p, pid, ctime, token) for p in members)
        # The recorded leader itself, if it still runs but left its group.
        leader: psutil.Process | None = None
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            if (
                proc.status() != psutil.STATUS_ZOMBIE
                and not _in_group(pid, pgid)
                and _is_ours(proc, pid, ctime, token)
            ):
                leader = proc
        if not group_is_ours and leader is None:
            if members:
                log.warning(
                    "%s: pid file %s names process group %d, but its processes %s are not the "
                    "ones we started (ids reused); leaving them alone",
                    self,
                    self._pid_file,
                    pgid,
                    sorted(p.pid for p in members),
                )
            return
        pids = sorted({p.pid for p in members} | ({leader.pid} if leader else set()))
        log.warning(
            "%s: killing leftovers of a previous run of %r (pid file %s): pids %s, process "
            "group %d",
            self,
            record.get("command", self._command),
            self._pid_file,
            pids,
            pgid,
        )
        if group_is_ours:
            _signal_group(pgid, signal.SIGTERM)
        else:
            pgid = -1  # not ours (or gone): only the leader is to be killed
        if leader is not None:
            with contextlib.suppress(psutil.Error):
                leader.terminate()
        if _wait_group_gone(pgid, time.monotonic() + self._grace, extra=leader):
            return
        if pgid > 0:
            _signal_group(pgid, signal.SIGKILL)
        if leader is not None:
            with contextlib.suppress(psutil.Error):
                leader.kill()
        if not _wait_group_gone(pgid, time.monotonic() + _KILL_WAIT, extra=leader):
            self._pidfile.keep = True  # the record is still needed to find them next time
            raise OsProcessStartError(
                self._command,
                f"leftover processes {pids} of a previous run (from pid file {self._pid_file}) "
                "survived SIGKILL; kill them by hand",
            )


# ------------------------------------------------------------------------------ helpers


class _PidFile:
    """A pid file that is flock()ed while held, so that a second OsProcess cannot take it, and
    that the kernel unlocks when our process dies, so that the next one can clean up after us."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.keep = False  # release() leaves the file in place (it names live leftovers)
        self._fd = -1
        self._lock = threading.Lock()

    def acquire(self) -> Any:
        """Lock the file (BlockingIOError if another holder has it); return the previous run's
        record, or None if there is none."""
        for _ in range(100):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                # The previous holder may have unlinked the file between our open and our lock;
                # then we locked an orphaned inode and must try again.
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            except BaseException:
                os.close(fd)
                raise
            if same:
                with self._lock:
                    self._fd = fd
                data = os.pread(fd, 1 << 16, 0)
                if not data.strip():
                    return None
                try:
                    return json.loads(data)
                except ValueError:
                    return {"unreadable": data[:200].decode(errors="replace")}
            os.close(fd)
        raise OSError(errno.EAGAIN, f"pid file {self.path} keeps being replaced")

    def write(self, record: dict[str, Any]) -> None:
        data = json.dumps(record).encode()
        with self._lock:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, data, 0)

    def release(self) -> None:
        """Remove the file (if it is still ours) and unlock it. Safe to call twice."""
        with self._lock:
            fd, self._fd = self._fd, -1
        if fd < 0:
            return
        try:
            if not self.keep and os.path.samestat(os.fstat(fd), os.stat(self.path)):
                os.unlink(self.path)
        except OSError:
            pass
        finally:
            os.close(fd)


def _make_private_tree(base: str, command: list[str]) -> None:
    """Create the per-user base under the shared temp dir, refusing one someone else owns."""
    try:
        os.makedirs(base, mode=0o700, exist_ok=True)
        st = os.lstat(base)
    except OSError as exc:
        raise OsProcessStartError(
            command, f"cannot create run directory {base}: {exc.strerror or exc}"
        ) from exc
    if not os.path.isdir(base) or os.path.islink(base) or st.st_uid != os.getuid():
        raise OsProcessStartError(
            command,
            f"run directory {base} is not a directory owned by you; remove it or set "
            f"${RUN_DIR_ENV}",
        )


def _check_command(command: Any) -> list[str]:
    if isinstance(command, str | bytes):
        raise TypeError(
            f"command must be a list of strings such as ['sleep', '5'], not {command!r}; "
            "for a shell line use ['sh', '-c', line]"
        )
    try:
        items = [os.fspath(part) for part in command]
    except TypeError:
        raise TypeError(f"command must be a list of strings; got {command!r}") from None
    if not items or not all(isinstance(part, str) for part in items):
        raise TypeError(f"command must be a non-empty list of strings; got {command!r}")
    if not items[0]:
        raise ValueError(f"command[0] (the program) must not be empty; got {command!r}")
    return items


def _check_env(env: Any) -> dict[str, str]:
    if env is None:
        return {}
    if not isinstance(env, Mapping):
        raise TypeError(f"env must be a mapping of str to str; got {env!r}")
    for key, value in env.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"env must map str to str; env[{key!r}] = {value!r}")
    return dict(env)


def _signame(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return "unknown signal"


def _signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to process group `pgid`. False if the group has no processes left."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        log.warning("no permission to signal process group %d", pgid)
        return True
    return True


def _signal_leader(popen: subprocess.Popen[bytes], exited: threading.Event, sig: int) -> bool:
    """Signal the command itself too, in case it moved to another group. Until the watcher has
    reaped it its pid cannot be reused, so this does not hit a stranger."""
    if exited.is_set():
        return False
    try:
        os.kill(popen.pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _in_group(pid: int, pgid: int) -> bool:
    try:
        return os.getpgid(pid) == pgid
    except OSError:
        return False


def _group_members(pgid: int) -> list[psutil.Process]:
    """The live (not zombie) processes in group `pgid` (none for a pgid <= 0)."""
    if pgid <= 0:
        return []
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    except PermissionError:
        pass
    members = []
    for proc in psutil.process_iter(["status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(proc.pid) == pgid:
                members.append(proc)
        except (OSError, psutil.Error):
            continue
    return members


def _wait_group_gone(pgid: int, deadline: float, extra: psutil.Process | None = None) -> bool:
    """Wait until group `pgid` (and `extra`, if given) has no live process, or the deadline."""
    pause = 0.01
    while True:
        alive = bool(_group_members(pgid))
        if not alive and extra is not None:
            with contextlib.suppress(psutil.Error):
                alive = extra.is_running() and extra.status() != psutil.STATUS_ZOMBIE
        if not alive:
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(pause, left))
        pause = min(pause * 2, 0.1)


def _is_ours(proc: psutil.Process, pid: int, ctime: float | None, token: Any) -> bool:
    """Whether `proc` is the recorded leader (same pid and start time) or a process it started
    (started no earlier, and carrying the launch's token in its environment)."""
    try:
        started = proc.create_time()
        if ctime is not None and proc.pid == pid and abs(started - ctime) <= _CREATE_TIME_SLACK:
            return True
        if not isinstance(token, str) or (
            ctime is not None and started < ctime - _CREATE_TIME_SLACK
        ):
            return False
        return proc.environ().get(TOKEN_ENV) == token
    except psutil.Error:
        return False
