"""A SIGKILLed parent leaves no node behind (issue 27): `rabbitry tree run` with an OS child,
and the Launcher that `rabbitry demo` starts its core nodes with. The kernel's parent-death
signal does it, so it is Linux only."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from tests.waiting import wait_until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG")

# A stand-in for a node: prints its pid in a ready line, then lives until killed.
NODE = "import os, time; print(f'READY n {os.getpid()}', flush=True); time.sleep(600)"


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _sigkill_and_check(parent: subprocess.Popen, child_pid: int) -> None:
    assert not _gone(child_pid)
    parent.send_signal(signal.SIGKILL)
    parent.wait(10)
    wait_until(lambda: _gone(child_pid), f"the child {child_pid} to die with its parent", 10)


def test_a_sigkilled_launcher_takes_its_nodes_along(tmp_path: Path) -> None:
    script = tmp_path / "launch.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys, threading, time
            from rabbitry.testing.launcher import Launcher, NodeSpec
            launcher = Launcher()
            started = []
            # started from a thread that ends at once: the node must outlive that thread
            t = threading.Thread(target=lambda: started.extend(launcher.start(
                NodeSpec("n", [sys.executable, "-c", {NODE!r}]))))
            t.start(); t.join()
            time.sleep(0.5)
            print("CHILD", started[0].pid, started[0].alive, flush=True)
            time.sleep(600)
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    parent = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline().split()
        assert line[:1] == ["CHILD"] and line[2] == "True", line  # alive after its thread ended
        _sigkill_and_check(parent, int(line[1]))
    finally:
        parent.kill()
        parent.wait()


def test_a_sigkilled_tree_run_takes_its_os_children_along(tmp_path: Path) -> None:
    tree = tmp_path / "tree.yaml"
    tree.write_text(
        "supervisor:\n  children:\n"
        f"    - id: node\n      command: [{sys.executable}, -c, {NODE!r}]\n"
        "      log_file: ./node.log\n"
    )
    env = {**os.environ, "RABBITRY_RUN_DIR": str(tmp_path / "run")}
    parent = subprocess.Popen(
        [sys.executable, "-m", "rabbitry", "tree", "run", str(tree)],
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        log = tmp_path / "node.log"
        wait_until(lambda: log.exists() and "READY" in log.read_text(), "the child's line", 30)
        child_pid = int(log.read_text().split()[2])
        _sigkill_and_check(parent, child_pid)
    finally:
        parent.kill()
        parent.wait()
