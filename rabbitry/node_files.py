"""Where a node's own files go: everything under its `data_dir`, never a per-user default.

A lone `rabbitry tree run` puts an OsProcess's default pid and log files in the per-user run dir
(`supervisors.osprocess.run_dir()`). A node must not: several nodes on one host often run the
same tree file (README's cluster guide, a partition test, a host with several Spark executors),
and the per-user files of one command child would then be the same file for every node, so the
second node's child could never take the pid file's lock. A node therefore gives each OsProcess
of its tree `<data_dir>/run` as its run dir, unless the tree names the files itself.

Application code that starts OsProcesses of its own should pass `run_dir=current_node().run_dir`.

The dist addresses a node learnt (`rabbitry cluster join`) are kept in `<data_dir>/
dist_addresses.json`, read at the next start (`read_addresses`, `save_addresses`).
"""

from __future__ import annotations

import inspect
import json
import logging
from dataclasses import replace
from pathlib import Path

from monitors.durable_files import atomic_write
from supervisors import ChildSpec, OsProcess, Supervisor

log = logging.getLogger("rabbitry.node")

RUN_SUBDIR = "run"
ADDRESSES_FILE = "dist_addresses.json"


def read_addresses(data_dir: Path) -> dict[str, str]:
    """{node: "host:port"} learnt by earlier joins ({} if none, or unreadable: logged)."""
    path = Path(data_dir) / ADDRESSES_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("ignoring %s: %s", path, exc)
        return {}
    addresses = data.get("addresses") if isinstance(data, dict) else None
    return {str(k): str(v) for k, v in (addresses or {}).items()}


def save_addresses(data_dir: Path, addresses: dict[str, str]) -> None:
    """Keep `addresses` for the next start (atomically: a crash leaves the old or the new)."""
    data = json.dumps({"version": 1, "addresses": addresses}, indent=2).encode()
    atomic_write(Path(data_dir) / ADDRESSES_FILE, data)


def node_run_dir(data_dir: Path) -> Path:
    """The run dir of the node whose data_dir this is."""
    return Path(data_dir) / RUN_SUBDIR


def with_run_dir(children: list[ChildSpec], run_dir: Path) -> list[ChildSpec]:
    """The same children, with every OsProcess child (at any depth, through nested
    supervisors given as `(Supervisor, (flags, children), kwargs)`) told to keep its default
    files in `run_dir`. A `run_dir` the spec already sets wins; start callables are opaque and
    left alone."""
    return [_child_with_run_dir(child, run_dir) for child in children]


def _child_with_run_dir(child: ChildSpec, run_dir: Path) -> ChildSpec:
    start = child.start
    if not isinstance(start, tuple):
        return child
    cls, args, kwargs = start
    if issubclass(cls, Supervisor) and len(args) == 2 and isinstance(args[1], list):
        flags, children = args
        return replace(child, start=(cls, (flags, with_run_dir(children, run_dir)), kwargs))
    if issubclass(cls, OsProcess) and "run_dir" not in kwargs and _takes_run_dir(cls):
        return replace(child, start=(cls, args, {**kwargs, "run_dir": str(run_dir)}))
    return child


def _takes_run_dir(cls: type) -> bool:
    """An OsProcess subclass with an __init__ of its own may not accept run_dir."""
    try:
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "run_dir" or p.kind is p.VAR_KEYWORD for p in params)


def describe(error: BaseException) -> str:
    """One line for a start failure. A supervisor's StartChildError already names the child
    chain down to the real problem ("failed to start child 'app': failed to start child
    'sleeper': ..."), so the message is kept whole, only squeezed onto one line."""
    return " ".join(f"{type(error).__name__}: {error}".split())
