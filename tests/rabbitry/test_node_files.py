"""with_run_dir: a node's tree keeps its OS children's default files under the node's run dir."""

from __future__ import annotations

from pathlib import Path

from rabbitry.node_files import with_run_dir
from supervisors import ChildSpec, OsProcess
from supervisors.tree import load_tree

TREE = """\
supervisor:
  children:
    - id: sleeper
      command: [sleep, "100000"]
    - id: pinned
      command: [sleep, "1"]
      pid_file: ./pinned.pid
    - id: inner
      supervisor:
        children:
          - id: deep
            command: [sleep, "2"]
          - id: idle
            start: 'rabbitry.examples_workers:Idle'
"""


class Fixed(OsProcess):
    """A subclass whose __init__ takes no run_dir: left alone."""

    def __init__(self) -> None:
        super().__init__(["true"])


def test_every_os_child_at_any_depth_gets_the_run_dir(tmp_path: Path) -> None:
    (tmp_path / "tree.yaml").write_text(TREE)
    tree = load_tree(tmp_path / "tree.yaml")
    run = tmp_path / "data" / "run"
    sleeper, pinned, inner = with_run_dir(tree.children, run)
    for child in (sleeper, pinned):
        cls, args, kwargs = child.start
        process = cls(*args, **kwargs)
        assert Path(process.log_file).parent == run
        assert kwargs["run_dir"] == str(run)
    assert Path(cls(*pinned.start[1], **pinned.start[2]).pid_file) == tmp_path / "pinned.pid"
    assert Path(cls(*sleeper.start[1], **sleeper.start[2]).pid_file) == run / "root.sleeper.pid"
    deep, idle = inner.start[1][1]
    assert deep.start[2]["run_dir"] == str(run)
    assert idle.start == tree.children[2].start[1][1][1].start  # not an OsProcess: untouched
    assert tree.children[0].start[2].get("run_dir") is None  # the loaded tree is not changed


def test_a_subclass_without_run_dir_and_an_explicit_run_dir_are_left_alone(tmp_path: Path) -> None:
    fixed = ChildSpec("fixed", Fixed)
    mine = ChildSpec("mine", (OsProcess, (["true"],), {"run_dir": "/elsewhere"}))
    out = with_run_dir([fixed, mine], tmp_path)
    assert out[0].start == fixed.start
    assert out[1].start[2]["run_dir"] == "/elsewhere"
