"""The `rabbitry` command: `tree check` and `tree run`, run as real subprocesses."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from rabbitry.cli import main
from supervisors import load_tree
from supervisors.durations import parse_duration

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
DEADLINE = 60.0  # seconds; only reached when something hung


def rabbitry(
    *args: str, cwd: Path = ROOT, timeout: float = DEADLINE
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rabbitry", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class Running:
    """`rabbitry ...` running in the background, its stderr collected line by line."""

    def __init__(self, *args: str, cwd: Path = ROOT) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rabbitry", *args],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._lock:
                self.lines.append(line.rstrip("\n"))

    @property
    def log(self) -> str:
        with self._lock:
            return "\n".join(self.lines)

    def wait_for(self, text: str, timeout: float = DEADLINE) -> None:
        """Poll the log until `text` appears; fail (with the log) if the process ends first."""
        deadline = time.monotonic() + timeout
        while text not in self.log:
            if self.proc.poll() is not None:
                self._reader.join(5)
                if text in self.log:
                    return
                raise AssertionError(
                    f"rabbitry exited ({self.proc.returncode}) before {text!r}:\n{self.log}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {text!r}:\n{self.log}")
            time.sleep(0.05)

    def finish(self, timeout: float = DEADLINE) -> int:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"rabbitry did not exit within {timeout} s:\n{self.log}") from None
        self._reader.join(5)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def running() -> Any:
    started: list[Running] = []

    def start(*args: str, cwd: Path = ROOT) -> Running:
        proc = Running(*args, cwd=cwd)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


# --------------------------------------------------------------------------------- check


@pytest.mark.parametrize("name", ["hello-tree.yaml", "hello-tree.toml"])
def test_check_prints_the_tree(name: str) -> None:
    result = rabbitry("tree", "check", f"examples/{name}")
    assert result.returncode == 0, result.stderr
    for child in ("hello: supervisor, one_for_one", "greeter", "pipeline", "flaky", "printer"):
        assert child in result.stdout
    assert "rabbitry.examples_workers:Greeter" in result.stdout
    assert (
        f"examples/{name}: ok (1 root supervisor, 1 nested supervisor, 3 workers)" in result.stdout
    )
    assert result.stderr == ""


def test_check_os_tree() -> None:
    result = rabbitry("tree", "check", "examples/os-tree.yaml")
    assert result.returncode == 0, result.stderr
    assert "$ python3 -m http.server 8765 --bind 127.0.0.1" in result.stdout
    assert f"cwd {EXAMPLES}" in result.stdout


def test_check_bad_file(tmp_path: Path) -> None:
    write(
        tmp_path / "app-tree.yaml",
        """
        supervisor:
          children:
            - id: w
              start: "rabbitry.examples_workers:Greeter"
              restart: sometimes
        """,
    )
    result = rabbitry("tree", "check", "app-tree.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip() == (
        "app-tree.yaml: supervisor.children[0].restart: expected one of permanent, transient, "
        "temporary; got 'sometimes' (line 5)"
    )


def test_check_missing_file(tmp_path: Path) -> None:
    result = rabbitry("tree", "check", "nope.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert "nope.yaml: cannot read the file: No such file or directory" in result.stderr


def test_app_dir_makes_local_modules_importable(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    write(
        tmp_path / "src" / "localworkers.py",
        """
        from supervisors import Process

        class Local(Process):
            pass
        """,
    )
    write(
        tmp_path / "tree.yaml", 'supervisor: {children: [{id: l, start: "localworkers:Local"}]}\n'
    )
    result = rabbitry("tree", "check", "tree.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert "No module named 'localworkers'" in result.stderr
    result = rabbitry("tree", "check", "tree.yaml", "--app-dir", "src", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "localworkers:Local" in result.stdout


# ---------------------------------------------------------------------------------- help


def test_help() -> None:
    result = rabbitry("--help")
    assert result.returncode == 0
    assert "usage: rabbitry" in result.stdout
    assert "tree" in result.stdout
    assert "rabbitry tree run examples/hello-tree.yaml" in result.stdout


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["tree", "--help"], ["check", "run", "docs/tree-files.md"]),
        (["tree", "check", "--help"], ["FILE", "--app-dir", "exit codes"]),
        (["tree", "run", "--help"], ["--log-level", "SIGTERM", "exit codes", "(default: info)"]),
    ],
)
def test_subcommand_help(args: list[str], expected: list[str], capsys: Any) -> None:
    assert main(args) == 0
    out = capsys.readouterr().out
    for text in expected:
        assert text in out


def test_usage_errors_exit_2(capsys: Any) -> None:
    assert main([]) == 2
    assert "usage: rabbitry" in capsys.readouterr().err
    assert main(["tree"]) == 2
    assert "usage: rabbitry tree" in capsys.readouterr().err
    assert main(["bogus"]) == 2
    assert "invalid choice" in capsys.readouterr().err
    assert main(["tree", "run", "x.yaml", "--log-level", "loud"]) == 2


def test_main_in_process(capsys: Any) -> None:
    assert main(["tree", "check", str(EXAMPLES / "hello-tree.yaml")]) == 0
    assert "greeter" in capsys.readouterr().out


def test_version(capsys: Any) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("rabbitry ")


# ----------------------------------------------------------------------------------- run


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_run_until_signal(running: Any, signum: int) -> None:
    tree = running("tree", "run", "examples/hello-tree.yaml")
    tree.wait_for("tree 'hello' started with children greeter, pipeline")
    assert "report: child_started supervisor=hello child=greeter" in tree.log
    tree.proc.send_signal(signum)
    assert tree.finish() == 0, tree.log
    log = tree.log
    assert f"{signal.Signals(signum).name} received: stopping tree 'hello'" in log
    assert "tree 'hello' stopped" in log
    # Children stopped in reverse start order: pipeline (and its children) before greeter.
    stops = [line for line in tree.lines if "report: shutdown supervisor=hello" in line]
    assert [line.split("child=")[1].split()[0] for line in stops] == ["pipeline", "greeter"]


def test_run_shows_crash_and_restart_reports(running: Any) -> None:
    tree = running("tree", "run", "examples/hello-tree.yaml", "--log-level", "info")
    tree.wait_for("report: child_crashed supervisor=pipeline child=flaky")
    tree.wait_for("report: child_restarted supervisor=pipeline child=flaky")
    tree.proc.send_signal(signal.SIGINT)
    assert tree.finish() == 0, tree.log
    # one INFO line per deliberate crash, with the restart count, and no traceback (issue 27)
    [crash] = [line for line in tree.lines if "child_crashed" in line]
    assert " INFO " in crash and "restarts=0 deliberate=True" in crash, crash
    assert "Traceback" not in tree.log and "Unhandled exception" not in tree.log


def test_hello_tree_stays_within_its_restart_intensity() -> None:
    """flaky's crashes never add up to more than pipeline's intensity in any period, so the
    example never gives up (nor trips examples/prometheus/alerts.yml's critical rule)."""
    spec = load_tree(ROOT / "examples" / "hello-tree.yaml")
    [pipeline] = [c for c in spec.children if c.id == "pipeline"]
    flags, children = pipeline.start[1]
    [flaky] = [c for c in children if c.id == "flaky"]
    crash_every = parse_duration(flaky.start[2]["crash_after"])
    most_in_a_period = math.floor(flags.period / crash_every) + 1
    assert most_in_a_period <= flags.intensity, (most_in_a_period, flags)


def test_run_bad_file(tmp_path: Path) -> None:
    write(tmp_path / "t.yaml", "supervisor: {strategy: sideways}\n")
    result = rabbitry("tree", "run", "t.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert "t.yaml: supervisor.strategy: expected one of" in result.stderr


WORKERS = """
from supervisors import Process


class NoStart(Process):
    def on_start(self):
        raise RuntimeError("cannot start today")


class Crasher(Process):
    def on_start(self):
        self.actor_ref.tell("crash")

    def on_receive(self, message):
        raise RuntimeError("crashed on purpose")
"""


def test_run_root_fails_to_start(tmp_path: Path) -> None:
    write(tmp_path / "cliworkers.py", WORKERS)
    write(
        tmp_path / "t.yaml",
        'supervisor: {id: top, children: [{id: bad, start: "cliworkers:NoStart"}]}\n',
    )
    result = rabbitry("tree", "run", "t.yaml", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "the root supervisor 'top' failed to start" in result.stderr
    assert "cannot start today" in result.stderr


def test_run_exits_1_when_the_root_gives_up(tmp_path: Path) -> None:
    write(tmp_path / "cliworkers.py", WORKERS)
    write(
        tmp_path / "t.yaml",
        """
        supervisor:
          id: fragile
          intensity: 0
          children: [{id: crasher, start: "cliworkers:Crasher"}]
        """,
    )
    result = rabbitry("tree", "run", "t.yaml", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "the root supervisor 'fragile' ended" in result.stderr
    assert "reached_max_restart_intensity" in result.stderr


def _signal_another_thread(pid: int, signum: int) -> None:
    """Send `signum` to a thread of `pid` other than its main thread (tgkill): the kernel may
    deliver a process's signal to any of its threads, and the main thread must still act."""
    import ctypes

    tgkill = getattr(ctypes.CDLL(None, use_errno=True), "tgkill", None)
    if tgkill is None:
        pytest.skip("this C library has no tgkill (glibc 2.30 or later has it)")
    others = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)
    assert others, "the tree runs its actors on threads of their own"
    if tgkill(pid, others[0], signum) != 0:
        raise OSError(ctypes.get_errno(), "tgkill failed")


@pytest.mark.parametrize("to", ["process", "another-thread"])
def test_second_signal_does_not_wait(running: Any, tmp_path: Path, to: str) -> None:
    """A child whose stop hangs: the first SIGINT starts the stop, the second exits at once,
    also when the kernel hands it to a thread other than the main one (the main thread
    waited on the stop without a timeout, and the second signal then waited 60 s in CI)."""
    write(
        tmp_path / "hangworkers.py",
        """
        import threading
        from supervisors import Process

        class Stubborn(Process):
            def on_stop(self):
                threading.Event().wait(600)
        """,
    )
    write(
        tmp_path / "t.yaml",
        'supervisor: {children: [{id: stubborn, start: "hangworkers:Stubborn", shutdown: infinity}]}\n',
    )
    tree = running("tree", "run", "t.yaml", cwd=tmp_path)
    tree.wait_for("started with children stubborn")
    tree.proc.send_signal(signal.SIGINT)
    tree.wait_for("SIGINT received: stopping tree")
    if to == "process":
        tree.proc.send_signal(signal.SIGINT)
    else:
        _signal_another_thread(tree.proc.pid, signal.SIGINT)
    assert tree.finish() == 1, tree.log
    assert "SIGINT received again: exiting without waiting" in tree.log


def test_python_m_and_console_script_agree() -> None:
    """`rabbitry` (the console script) is installed and behaves like `python -m rabbitry`."""
    script = Path(sys.executable).with_name("rabbitry")
    if not script.exists():
        pytest.skip("the rabbitry console script is not installed next to this interpreter")
    result = subprocess.run(
        [str(script), "tree", "check", "examples/hello-tree.yaml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
        env={**os.environ},
    )
    assert result.returncode == 0, result.stderr
    assert "greeter" in result.stdout
