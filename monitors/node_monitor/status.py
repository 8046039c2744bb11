"""ClusterStatus and the two cluster files, as RabbitMQ keeps them in its data dir.

RabbitMQ writes Erlang terms; we write a JSON form of the same content, with a version key:

    cluster_nodes.config         {"version": 1, "all": [...], "disc": [...]}   {AllNodes, DiscNodes}.
    nodes_running_at_shutdown    {"version": 1, "running": [...]}              [RunningNodes].

Each file is written atomically, as rabbit_file:write_term_file does: a `.tmp` file beside it,
fsync, rename over the old one, then fsync of the directory so the rename itself is durable. A
crash at any point leaves either the old file or the new one, never a mix.

Reading is strict about corruption and lenient about history:
- a missing cluster_nodes.config means a fresh node (None: the config's cluster.nodes apply);
- an empty file (all an older non-atomic writer can leave after a crash) counts as missing, and
  is logged;
- a bare JSON list in cluster_nodes.config is RabbitMQ's legacy `[AllNodes].` form: disc nodes are
  then this node alone if it is listed (or the list is empty), else all of them, as
  rabbit_node_monitor's legacy_disc_nodes decides; a bare list in nodes_running_at_shutdown is
  the running list;
- anything else that is not the expected shape raises ClusterFileError naming the file and what
  is wrong with it, so a node never boots on a guess.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from monitors.durable_files import atomic_write

CLUSTER_NODES_FILE = "cluster_nodes.config"
RUNNING_NODES_FILE = "nodes_running_at_shutdown"
FORMAT_VERSION = 1

_log = logging.getLogger(__name__)


class ClusterFileError(Exception):
    """A cluster file that cannot be trusted: not JSON, wrong shape, or from a newer version."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(
            f"{path}: {problem}; restore it from a peer's copy, or remove it to fall back to "
            "cluster.nodes in the node config"
        )
        self.path = path
        self.problem = problem


def _nodes(values: Any) -> tuple[str, ...]:
    return tuple(sorted(set(values)))


@dataclass(frozen=True)
class ClusterStatus:
    """{all, disc, running}: the members, the disc members, and the members running now.

    Lists are kept sorted and without duplicates, so two equal statuses compare equal.
    """

    all: tuple[str, ...]
    disc: tuple[str, ...] = ()
    running: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for key in ("all", "disc", "running"):
            value = getattr(self, key)
            if isinstance(value, str) or not all(isinstance(n, str) for n in value):
                raise TypeError(f"ClusterStatus.{key} must be a list of node names, got {value!r}")
            object.__setattr__(self, key, _nodes(value))

    @classmethod
    def reset(cls, node: str) -> ClusterStatus:
        """A node on its own, as RabbitMQ's reset writes `{[node()],[node()],[node()]}`."""
        return cls(all=(node,), disc=(node,), running=(node,))

    def normalized(self, node: str) -> ClusterStatus:
        """`all` holds every disc and running node and `node` itself."""
        return ClusterStatus(
            all=(*self.all, *self.disc, *self.running, node), disc=self.disc, running=self.running
        )

    def to_json(self) -> dict[str, list[str]]:
        return {"all": list(self.all), "disc": list(self.disc), "running": list(self.running)}


# ------------------------------------------------------------------------------- writing


def _dump(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()


def write_cluster_status(data_dir: str | os.PathLike[str], status: ClusterStatus) -> None:
    """Write both cluster files (each atomically; cluster_nodes.config first, as RabbitMQ)."""
    data_dir = Path(data_dir)
    atomic_write(
        data_dir / CLUSTER_NODES_FILE,
        _dump({"version": FORMAT_VERSION, "all": list(status.all), "disc": list(status.disc)}),
    )
    atomic_write(
        data_dir / RUNNING_NODES_FILE,
        _dump({"version": FORMAT_VERSION, "running": list(status.running)}),
    )


# ------------------------------------------------------------------------------- reading


def _load(path: Path) -> Any:
    """The parsed JSON of `path`; None when it is missing or empty."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise ClusterFileError(path, f"cannot be read ({err.strerror or err})") from err
    if not raw.strip():
        _log.warning("%s is empty; treating it as missing", path)
        return None
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise ClusterFileError(path, "is not UTF-8 text (corrupt)") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        if text.rstrip().endswith("."):
            raise ClusterFileError(
                path, "looks like an Erlang term file (RabbitMQ's own format); rabbitry reads JSON"
            ) from None
        raise ClusterFileError(
            path, f"is not valid JSON ({err.msg} at line {err.lineno} column {err.colno})"
        ) from None


def _node_list(path: Path, value: Any, key: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ClusterFileError(path, f"{key} must be a list of node names, got {value!r}")
    for i, item in enumerate(value):
        if not isinstance(item, str) or "@" not in item:
            raise ClusterFileError(path, f"{key}[{i}] must be a node name name@host, got {item!r}")
    return tuple(value)


def _versioned(path: Path, doc: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    version = doc.get("version")
    if version is None:
        raise ClusterFileError(path, "has no version key")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ClusterFileError(path, f"version must be a positive integer, got {version!r}")
    if version > FORMAT_VERSION:
        raise ClusterFileError(
            path,
            f"was written by a newer rabbitry (format version {version}; this one reads "
            f"{FORMAT_VERSION})",
        )
    missing = [k for k in keys if k not in doc]
    if missing:
        raise ClusterFileError(path, f"lacks the key(s) {', '.join(missing)}")
    return doc


def read_cluster_nodes(path: Path, node: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """(all, disc) from cluster_nodes.config, or None if there is none."""
    doc = _load(path)
    if doc is None:
        return None
    if isinstance(doc, list):  # legacy [AllNodes].
        nodes = _node_list(path, doc, "the legacy node list")
        disc = (node,) if not nodes or node in nodes else nodes
        return nodes, disc
    if not isinstance(doc, dict):
        raise ClusterFileError(path, f"expected a JSON object, got {type(doc).__name__}")
    doc = _versioned(path, doc, ("all", "disc"))
    return _node_list(path, doc["all"], "all"), _node_list(path, doc["disc"], "disc")


def read_running_nodes(path: Path) -> tuple[str, ...] | None:
    """The running list from nodes_running_at_shutdown, or None if there is none."""
    doc = _load(path)
    if doc is None:
        return None
    if isinstance(doc, list):  # legacy [RunningNodes].
        return _node_list(path, doc, "the legacy running list")
    if not isinstance(doc, dict):
        raise ClusterFileError(path, f"expected a JSON object, got {type(doc).__name__}")
    doc = _versioned(path, doc, ("running",))
    return _node_list(path, doc["running"], "running")


def read_cluster_status(data_dir: str | os.PathLike[str], node: str) -> ClusterStatus | None:
    """The persisted status of `node`, normalized; None for a fresh node (no cluster file).

    As RabbitMQ's prepare_cluster_status_files: the running list always holds the node itself,
    and `all` holds everything in the other two lists.
    """
    data_dir = Path(data_dir)
    nodes = read_cluster_nodes(data_dir / CLUSTER_NODES_FILE, node)
    running = read_running_nodes(data_dir / RUNNING_NODES_FILE) or ()
    if nodes is None:
        return None
    all_nodes, disc = nodes
    return ClusterStatus(all=all_nodes, disc=disc, running=(*running, node)).normalized(node)
