"""OsProcess against real commands: exits, signals, shutdown, kill, orphans, supervision."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from pykka import ActorDeadError

from supervisors.messages import Down
from supervisors.osprocess import (
    TOKEN_ENV,
    OsProcess,
    OsProcessExited,
    OsProcessStartError,
    default_name,
)
from supervisors.process import Process, exit, exit_reason
from supervisors.specs import ChildSpec, SupFlags
from supervisors.supervisor import Supervisor

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="OsProcess is POSIX only")

REPO = Path(__file__).resolve().parents[2]
# A command that waits for the file `go` in its cwd, so a test decides when it ends.
WAIT_FOR_GO = "while [ ! -e go ]; do sleep 0.02; done; "


# ------------------------------------------------------------------------------ helpers


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = 10.0) -> Any:
    """Poll until `predicate()` is truthy; the timeout only proves nothing hung."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def gone(pid: int) -> bool:
    """True once `pid` no longer runs (a zombie awaiting its reaper counts as gone)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def reason_of(ref: Any, timeout: float = 10.0) -> Any:
    return wait_for(lambda: exit_reason(ref), "the OsProcess to end", timeout)


def descendants(pid: int) -> list[int]:
    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


class Recorder(Process):
    """Monitors processes and hands their Down messages to the test."""

    def __init__(self, downs: queue.Queue[Down]) -> None:
        super().__init__()
        self._downs = downs

    def watch(self, ref: Any) -> int:
        return self.monitor(ref)

    def on_receive(self, message: Any) -> None:
        if isinstance(message, Down):
            self._downs.put(message)


@pytest.fixture(autouse=True)
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "run"
    monkeypatch.setenv("RABBITRY_RUN_DIR", str(path))
    return path


@pytest.fixture
def cleanup() -> Iterator[list[Any]]:
    """Refs and pids to stop or kill at teardown, so a failing test leaks nothing."""
    things: list[Any] = []
    yield things
    for thing in reversed(things):
        if isinstance(thing, int):
            if not gone(thing):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(thing, signal.SIGKILL)
        else:
            with contextlib.suppress(ActorDeadError):
                thing.stop()


@pytest.fixture
def downs(cleanup: list[Any]) -> Iterator[Callable[[Any], queue.Queue[Down]]]:
    """`watch(ref)` monitors `ref` from a Recorder and returns the queue its Down arrives on."""

    def watch(ref: Any) -> queue.Queue[Down]:
        received: queue.Queue[Down] = queue.Queue()
        recorder = Recorder.start(received)
        cleanup.append(recorder)
        recorder.proxy().watch(ref).get()
        return received

    yield watch


def start(cleanup: list[Any], *args: Any, **kwargs: Any) -> Any:
    ref = OsProcess.start(*args, **kwargs)
    cleanup.append(ref)
    return ref


def pid_of(ref: Any, cleanup: list[Any]) -> int:
    """The command's pid (while the OsProcess runs), also killed at teardown."""
    pid = ref.proxy().pid.get()
    cleanup.append(pid)
    return pid


def start_error(run: Callable[[], Any]) -> OsProcessStartError:
    """What a failed start raised: start() raises what on_start raised."""
    with pytest.raises(OsProcessStartError) as info:
        run()
    return info.value


# ------------------------------------------------------------------- how a command ends


def test_exit_code_zero_ends_the_process_normally(tmp_path: Path, run_dir: Path, cleanup, downs):
    ref = start(cleanup, ["sh", "-c", WAIT_FOR_GO + "exit 0"], cwd=str(tmp_path))
    name = ref.proxy().name.get()
    assert name == default_name(["sh", "-c", WAIT_FOR_GO + "exit 0"])
    pid_file = run_dir / f"{name}.pid"
    assert pid_file.exists()
    received = downs(ref)
    (tmp_path / "go").touch()
    down = received.get(timeout=10)
    assert down.reason == "normal"
    assert exit_reason(ref) == "normal"
    assert not pid_file.exists(), "a clean exit removes the pid file"
    assert (run_dir / f"{name}.log").exists()


def test_nonzero_exit_is_a_crash_carrying_the_code(tmp_path: Path, cleanup, downs):
    ref = start(cleanup, ["sh", "-c", WAIT_FOR_GO + "exit 3"], cwd=str(tmp_path))
    received = downs(ref)
    (tmp_path / "go").touch()
    reason = received.get(timeout=10).reason
    assert isinstance(reason, OsProcessExited)
    assert reason.returncode == 3
    assert reason.signal is None
    assert str(reason) == f"command {['sh', '-c', WAIT_FOR_GO + 'exit 3']!r} exited with code 3"


def test_death_by_signal_is_a_crash_carrying_the_signal(cleanup):
    ref = start(cleanup, ["sh", "-c", "kill -KILL $$"])
    reason = reason_of(ref)
    assert isinstance(reason, OsProcessExited)
    assert reason.signal == signal.SIGKILL
    assert reason.returncode == -signal.SIGKILL
    assert "killed by signal 9 (SIGKILL)" in str(reason)


def test_a_process_that_traps_exits_still_dies_with_its_command(tmp_path: Path, cleanup):
    class Trapping(OsProcess):
        trap_exit = True

    ref = Trapping.start(["sh", "-c", WAIT_FOR_GO + "exit 4"], cwd=str(tmp_path))
    cleanup.append(ref)
    (tmp_path / "go").touch()
    reason = reason_of(ref)
    assert isinstance(reason, OsProcessExited)
    assert reason.returncode == 4


def test_background_children_do_not_outlive_a_normal_exit(tmp_path: Path, cleanup):
    ref = start(cleanup, ["sh", "-c", "sleep 60 & echo $! > bg.pid; exit 0"], cwd=str(tmp_path))
    assert reason_of(ref) == "normal"
    background = int((tmp_path / "bg.pid").read_text())
    cleanup.append(background)
    wait_for(lambda: gone(background), "the background sleep to be killed")


# ------------------------------------------------------------------ output, env and cwd


def test_stdout_and_stderr_are_appended_to_the_log_file(tmp_path: Path, cleanup):
    log_file = tmp_path / "logs" / "cmd.log"
    command = ["sh", "-c", "echo to-stdout; echo to-stderr >&2"]
    for _ in range(2):
        ref = start(cleanup, command, log_file=str(log_file))
        assert reason_of(ref) == "normal"
    lines = log_file.read_text().splitlines()
    assert lines.count("to-stdout") == 2, lines
    assert lines.count("to-stderr") == 2, lines


def test_env_is_merged_over_os_environ_and_cwd_is_used(tmp_path: Path, cleanup, monkeypatch):
    monkeypatch.setenv("FROM_PARENT", "inherited")
    workdir = tmp_path / "work"
    workdir.mkdir()
    log_file = tmp_path / "env.log"
    ref = start(
        cleanup,
        ["sh", "-c", 'echo "$FROM_PARENT $GREETING"; pwd -P'],
        env={"GREETING": "hello"},
        cwd=str(workdir),
        log_file=str(log_file),
    )
    assert reason_of(ref) == "normal"
    lines = log_file.read_text().splitlines()
    assert lines == ["inherited hello", os.path.realpath(workdir)]


# ------------------------------------------------------------------------ failed starts


@pytest.mark.parametrize("pdeathsig", [True, False], ids=["shim", "direct"])
def test_missing_executable_fails_the_start_clearly(pdeathsig: bool, run_dir: Path):
    class Variant(OsProcess):
        use_pdeathsig = pdeathsig

    error = start_error(lambda: Variant.start(["no-such-program-rabbitry", "--flag"]))
    assert "cannot start command ['no-such-program-rabbitry', '--flag']" in str(error)
    assert "executable 'no-such-program-rabbitry' not found on PATH" in str(error)
    assert not list(run_dir.glob("*.pid")), "a failed start leaves no pid file"


def test_a_file_that_is_not_executable_fails_the_start_clearly(tmp_path: Path):
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    error = start_error(lambda: OsProcess.start([str(script)]))
    assert f"permission denied running {str(script)!r}" in str(error)


def test_bad_cwd_fails_the_start_clearly(tmp_path: Path):
    missing = str(tmp_path / "missing")
    error = start_error(lambda: OsProcess.start(["true"], cwd=missing))
    assert f"working directory {missing!r} does not exist" in str(error)


def test_bad_arguments_are_rejected_when_built():
    with pytest.raises(TypeError, match=r"\['sh', '-c', line\]"):
        OsProcess.start("sleep 5")
    with pytest.raises(TypeError, match="non-empty list"):
        OsProcess.start([])
    with pytest.raises(ValueError, match="grace"):
        OsProcess.start(["true"], grace=-1)
    with pytest.raises(TypeError, match="env"):
        OsProcess.start(["true"], env={"N": 1})


def test_default_name_is_short_and_stable():
    assert default_name(["sleep", "5"]) == default_name(["sleep", "5"])
    assert default_name(["sleep", "5"]) != default_name(["sleep", "6"])
    assert default_name(["/usr/bin/sleep", "5"]).startswith("sleep-")
    assert len(default_name(["x" * 500])) < 60


# ---------------------------------------------------------------------------- shutdown


def test_stop_sends_sigterm_to_the_command(tmp_path: Path, cleanup):
    script = "trap 'echo term > got-term; exit 0' TERM; touch ready; while :; do sleep 0.05; done"
    ref = start(cleanup, ["sh", "-c", script], cwd=str(tmp_path), grace=10)
    pid = pid_of(ref, cleanup)
    wait_for((tmp_path / "ready").exists, "the TERM trap to be set")
    began = time.monotonic()
    ref.stop()
    assert time.monotonic() - began < 9, "it ended on SIGTERM, before the grace ran out"
    assert (tmp_path / "got-term").read_text() == "term\n"
    assert gone(pid)
    assert exit_reason(ref) == "normal"


def test_a_command_that_ignores_sigterm_is_killed_after_grace(tmp_path: Path, cleanup, caplog):
    script = "trap '' TERM; touch ready; while :; do sleep 0.05; done"
    ref = start(cleanup, ["sh", "-c", script], cwd=str(tmp_path), grace=0.3)
    pid = pid_of(ref, cleanup)
    wait_for((tmp_path / "ready").exists, "the TERM trap to be set")
    with caplog.at_level(logging.WARNING, logger="supervisors.osprocess"):
        began = time.monotonic()
        ref.stop()
        assert time.monotonic() - began < 20
    assert gone(pid)
    assert any("sending SIGKILL" in record.getMessage() for record in caplog.records)


def test_kill_signal_kills_the_whole_group_at_once(tmp_path: Path, run_dir: Path, cleanup):
    ref = start(cleanup, ["sh", "-c", "sleep 60 & sleep 60"], grace=30)
    pid = pid_of(ref, cleanup)
    pid_file = Path(ref.proxy().pid_file.get())
    children = wait_for(lambda: descendants(pid), "the background sleep to start")
    cleanup.extend(children)
    assert all(os.getpgid(child) == pid for child in children)
    exit(ref, "kill")
    assert exit_reason(ref) == "killed"
    # grace=30 would make a TERM-then-wait shutdown take 30 s; a kill does not wait.
    wait_for(lambda: gone(pid) and all(gone(c) for c in children), "the group to die", 5.0)
    assert not pid_file.exists()


def test_a_crash_in_a_handler_kills_the_command(cleanup):
    class Fragile(OsProcess):
        def on_receive(self, message: Any) -> None:
            raise RuntimeError(f"cannot handle {message!r}")

    ref = Fragile.start(["sleep", "60"], grace=5)
    cleanup.append(ref)
    pid = pid_of(ref, cleanup)
    cleanup.append(pid)
    ref.tell("boom")
    assert isinstance(reason_of(ref), RuntimeError)
    wait_for(lambda: gone(pid), "the command to be killed")


# ---------------------------------------------------------------------------- pid files


def test_pid_file_describes_the_running_command(cleanup):
    ref = start(cleanup, ["sleep", "60"])
    pid = pid_of(ref, cleanup)
    pid_file = Path(ref.proxy().pid_file.get())
    record = json.loads(pid_file.read_text())
    assert record["pid"] == pid
    assert record["pgid"] == pid == os.getpgid(pid)
    assert record["create_time"] == pytest.approx(psutil.Process(pid).create_time())
    assert psutil.Process(pid).environ()[TOKEN_ENV] == record["token"]
    ref.stop()
    assert not pid_file.exists()
    assert gone(pid)


def test_two_osprocesses_cannot_share_a_pid_file(tmp_path: Path, cleanup):
    pid_file = str(tmp_path / "shared.pid")
    first = start(cleanup, ["sleep", "60"], pid_file=pid_file)
    error = start_error(lambda: OsProcess.start(["sleep", "61"], pid_file=pid_file))
    assert "is locked by another running OsProcess" in str(error)
    assert first.is_alive(), "the second start must not touch the first one's command"


def test_a_leftover_leader_named_in_the_pid_file_is_killed_first(tmp_path: Path, cleanup, caplog):
    leftover = subprocess.Popen(["sleep", "60"], start_new_session=True)
    cleanup.append(leftover.pid)
    pid_file = tmp_path / "left.pid"
    record = {
        "pid": leftover.pid,
        "pgid": leftover.pid,
        "create_time": psutil.Process(leftover.pid).create_time(),
    }
    pid_file.write_text(json.dumps(record))
    with caplog.at_level(logging.WARNING, logger="supervisors.osprocess"):
        start(cleanup, ["sleep", "60"], pid_file=str(pid_file))
    assert leftover.wait(timeout=10) == -signal.SIGTERM
    assert any("leftovers of a previous run" in r.getMessage() for r in caplog.records)


def test_a_pid_file_naming_someone_elses_process_is_ignored(tmp_path: Path, cleanup):
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)
    cleanup.append(stranger.pid)
    pid_file = tmp_path / "stale.pid"
    created = psutil.Process(stranger.pid).create_time()
    # Same pid, but it started at another time: the pid was reused, it is not ours.
    record = {"pid": stranger.pid, "pgid": stranger.pid, "create_time": created - 1000}
    pid_file.write_text(json.dumps(record))
    ref = start(cleanup, ["sleep", "60"], pid_file=str(pid_file))
    assert stranger.poll() is None
    ref.stop()
    stranger.kill()
    stranger.wait()


ORPHAN_SCRIPT = """
import json, sys, time
import psutil
from supervisors.osprocess import OsProcess

ref = OsProcess.start(["sh", "-c", "sleep 60 & sleep 60"], pid_file=sys.argv[1], grace=1)
pid = ref.proxy().pid.get()
deadline = time.monotonic() + 10
while not psutil.Process(pid).children() and time.monotonic() < deadline:
    time.sleep(0.01)
kids = [c.pid for c in psutil.Process(pid).children(recursive=True)]
print(json.dumps({"pid": pid, "kids": kids}), flush=True)
time.sleep(120)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
def test_no_orphans_after_the_python_process_is_sigkilled(tmp_path: Path, cleanup, caplog):
    pid_file = tmp_path / "orphans.pid"
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", ORPHAN_SCRIPT, str(pid_file)],
        stdout=subprocess.PIPE,
        env=env,
        cwd=tmp_path,
    )
    try:
        ready, _, _ = select.select([owner.stdout], [], [], 30)
        assert ready, "the script did not report its pids"
        line = owner.stdout.readline()
        assert line, f"the script died: exit code {owner.wait()}"
        report = json.loads(line)
        leader, kids = report["pid"], report["kids"]
        cleanup.extend([leader, *kids])
        assert kids, "the command should have a background child"
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=10)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        owner.stdout.close()

    # (2) PR_SET_PDEATHSIG: the direct child died with the thread that started it.
    wait_for(lambda: gone(leader), "the command to die with its parent")
    # Its background child is in the same group but outside PDEATHSIG's reach...
    assert not any(gone(kid) for kid in kids)
    assert json.loads(pid_file.read_text())["pgid"] == leader

    # (1) ...so the pid file is how the next start finds and kills it.
    with caplog.at_level(logging.WARNING, logger="supervisors.osprocess"):
        ref = start(cleanup, ["sleep", "60"], pid_file=str(pid_file))
    wait_for(lambda: all(gone(kid) for kid in kids), "the leftover group to be killed", 5.0)
    assert any("leftovers of a previous run" in r.getMessage() for r in caplog.records)
    assert json.loads(pid_file.read_text())["pid"] == ref.proxy().pid.get()


# ------------------------------------------------------------------------- supervision


def test_a_supervisor_restarts_a_crashing_osprocess(tmp_path: Path, cleanup):
    # Crashes on its first run, then stays up.
    script = (
        "n=$(cat runs 2>/dev/null || echo 0); echo $((n + 1)) > runs; "
        '[ "$n" -ge 1 ] && exec sleep 60; exit 7'
    )
    kwargs = {"cwd": str(tmp_path), "pid_file": str(tmp_path / "child.pid"), "grace": 2}
    spec = ChildSpec("cmd", (OsProcess, (["sh", "-c", script],), kwargs), shutdown=10)
    sup = Supervisor.start(SupFlags(intensity=3, period=10), [spec])
    cleanup.append(sup)

    def second_run() -> Any:
        [info] = sup.proxy().which_children().get()
        runs = (tmp_path / "runs").read_text().strip() if (tmp_path / "runs").exists() else ""
        return info.ref if runs == "2" and info.ref not in (None, "restarting") else None

    ref = wait_for(second_run, "the child to be restarted")
    pid = pid_of(ref, cleanup)
    cleanup.append(pid)
    assert psutil.Process(pid).name() == "sleep"
    sup.stop()
    assert gone(pid)
    assert not (tmp_path / "child.pid").exists()
