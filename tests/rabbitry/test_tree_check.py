"""`rabbitry tree check` does everything `tree run` does short of starting children (issue 27):
args and kwargs against each class's __init__ ("did you mean every"), commands on PATH, and
existing cwds. `tree run` says where OS children's output goes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rabbitry.cli import main
from supervisors import TreeConfigError, load_tree

GREETER = "rabbitry.examples_workers:Greeter"


def _tree(tmp_path: Path, children: str, strategy: str = "one_for_one") -> Path:
    path = tmp_path / "tree.yaml"
    path.write_text(f"supervisor:\n  strategy: {strategy}\n  children:\n{children}")
    return path


@pytest.mark.parametrize("command", ["check", "run"])
def test_a_misspelt_kwarg_exits_2_with_did_you_mean(tmp_path: Path, command: str, capsys) -> None:
    path = _tree(tmp_path, f"    - id: g\n      start: '{GREETER}'\n      kwargs: {{evry: 1s}}\n")
    assert main(["tree", command, str(path)]) == 2
    err = capsys.readouterr().err
    assert "supervisor.children[0].kwargs.evry" in err
    assert "did you mean 'every'?" in err and "(line 6)" in err


def test_too_many_positional_args_exit_2(tmp_path: Path, capsys) -> None:
    path = _tree(tmp_path, f"    - id: g\n      start: '{GREETER}'\n      args: [a, 1, hi, 4]\n")
    assert main(["tree", "check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "supervisor.children[0].args" in err and "too many positional" in err


def test_a_simple_one_for_one_template_may_leave_args_to_start_child(tmp_path: Path) -> None:
    path = _tree(
        tmp_path,
        "    - id: t\n      start: 'rabbitry.examples_workers:Flaky'\n      args: [x]\n",
        strategy="simple_one_for_one",
    )
    load_tree(path)
    bad = _tree(
        tmp_path,
        "    - id: t\n      start: 'rabbitry.examples_workers:Flaky'\n      kwargs: {crash: 1}\n",
        strategy="simple_one_for_one",
    )
    with pytest.raises(TreeConfigError, match="crash_after"):
        load_tree(bad)


def test_a_command_not_on_path_and_a_missing_cwd(tmp_path: Path, capsys) -> None:
    path = _tree(tmp_path, "    - id: c\n      command: [no-such-program-27, x]\n")
    load_tree(path)  # a node's tree is checked where it runs; only `tree check` asks the host
    assert main(["tree", "check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "supervisor.children[0].command[0]" in err and "not found on PATH" in err
    path = _tree(tmp_path, "    - id: c\n      command: [sleep, '1']\n      cwd: ./gone\n")
    assert main(["tree", "check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "supervisor.children[0].cwd" in err and "is not a directory" in err and "(line 6)" in err
    path = _tree(tmp_path, "    - id: c\n      command: [./not-here.sh]\n")
    assert main(["tree", "check", str(path)]) == 2
    assert "not-here.sh is not an executable file" in capsys.readouterr().err


def test_the_examples_pass_check(capsys) -> None:
    root = Path(__file__).resolve().parents[2] / "examples"
    for name in ("hello-tree.yaml", "hello-tree.toml", "os-tree.yaml"):
        assert main(["tree", "check", str(root / name)]) == 0, capsys.readouterr().err


def test_tree_run_says_where_os_children_write(tmp_path: Path) -> None:
    path = _tree(tmp_path, "    - id: sleeper\n      command: [sleep, '60']\n")
    env = {**os.environ, "RABBITRY_RUN_DIR": str(tmp_path / "run")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rabbitry", "tree", "run", str(path)],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stderr is not None
        expected = f"sleeper: its output (stdout and stderr) goes to {tmp_path}/run/"
        for line in proc.stderr:
            if expected in line:
                break
        else:
            pytest.fail("tree run never said where the child's output goes")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
