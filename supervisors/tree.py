"""Supervision-tree config files: read YAML or TOML into specs, check every key, start the root.

The schema (see docs/tree-files.md)::

    supervisor:                 # the root; `id` is optional here
      id: root
      strategy: one_for_one     # one_for_one | one_for_all | rest_for_one | simple_one_for_one
      intensity: 3
      period: 5s
      auto_shutdown: never
      children:
        - id: worker            # a Process subclass
          start: "mypkg.workers:Worker"
          args: [1, 2]
          kwargs: {queue: jobs}
        - id: redis             # an OS process
          command: [redis-server, --port, "6390"]
          env: {LANG: C}
          cwd: /srv/redis
        - id: inner             # a nested supervisor
          supervisor: {strategy: rest_for_one, children: [...]}

Every mistake raises TreeConfigError naming the file, the key path (written as
`supervisor.children[2].restart`) and what was expected. `start:` targets are imported while the
file is loaded, so a missing module or class is reported before anything starts.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from supervisors.config_check import typed
from supervisors.config_read import read_config_file
from supervisors.supervisor import Supervisor
from supervisors.tree_errors import TreeConfigError
from supervisors.tree_format import format_tree
from supervisors.tree_schema import _TOP_KEYS, TreeSpec, _Ctx

__all__ = [
    "TreeConfigError",
    "TreeSpec",
    "format_tree",
    "load_tree",
    "start_tree",
    "tree_from_mapping",
]

# ---------------------------------------------------------------------------------- public


def load_tree(path: str | os.PathLike[str], *, check_files: bool = False) -> TreeSpec:
    """Read a YAML (.yaml/.yml) or TOML (.toml) tree file into a TreeSpec.

    Raises TreeConfigError for any mistake, including a `start:` target that cannot be imported
    and args/kwargs that do not fit its __init__. Relative `cwd`, `log_file` and `pid_file`
    values are taken relative to the file's directory. `check_files` (what `rabbitry tree check`
    passes) also checks what only this host can say: that each command is on PATH and each cwd
    exists.
    """
    path = Path(path)
    file = str(path)
    data = read_config_file(path, file, TreeConfigError)
    return tree_from_mapping(
        data, file=file, base_dir=path.resolve().parent, check_files=check_files
    )


def tree_from_mapping(
    data: Any,
    *,
    file: str = "<tree>",
    base_dir: str | os.PathLike[str] | None = None,
    check_files: bool = False,
) -> TreeSpec:
    """Check an already parsed tree (the mapping with the `supervisor` key) into a TreeSpec.

    `file` only names the source in errors; `base_dir` (default: the current directory) is what
    relative paths are resolved against.
    """
    ctx = _Ctx(file, Path(base_dir) if base_dir is not None else Path.cwd())
    ctx.check_files = check_files
    if data is None:
        ctx.fail("", "a mapping with the root key 'supervisor'", "an empty file")
    if isinstance(data, dict) and not data:
        ctx.fail("", "a mapping with the root key 'supervisor'", "an empty mapping")
    if not isinstance(data, dict):
        ctx.fail("", "a mapping with the root key 'supervisor'", typed(data))
    ctx.check_keys(data, "", _TOP_KEYS)
    if "supervisor" not in data:
        ctx.fail(
            "supervisor",
            "the root supervisor (a mapping with strategy, children, ...)",
            problem="missing: expected the root supervisor (a mapping with strategy, "
            "children, ...)",
            at=data,
        )
    root_id, flags, children = ctx.supervisor(
        data["supervisor"], "supervisor", (data, "supervisor"), names=()
    )
    return TreeSpec(flags=flags, children=children, id=root_id, file=Path(file))


def start_tree(path_or_spec: str | os.PathLike[str] | TreeSpec) -> Any:
    """Start the root supervisor of a tree file (or a loaded TreeSpec) and return its ActorRef.

    Returns once every child has started, as `Supervisor.start` does, and raises as it does if
    one fails. Raises TreeConfigError if the file is wrong.
    """
    if isinstance(path_or_spec, TreeSpec):
        spec = path_or_spec
    elif isinstance(path_or_spec, str | os.PathLike):
        spec = load_tree(path_or_spec)
    else:
        raise TypeError(f"start_tree takes a path or a TreeSpec; got {path_or_spec!r}")
    return Supervisor.start(spec.flags, spec.children, name=str(spec.id))
