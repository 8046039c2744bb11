"""The node config file (`rabbitry node start --config node.yaml`), checked key by key.

    node: a@127.0.0.1                  # name@host
    listen: 127.0.0.1:7001             # dist listener (port 0: any free port)
    cookie_file: ./cookie              # or `cookie:`; the file must be mode 0600
    data_dir: ./data/a
    net_ticktime: 4s
    cluster:
      nodes: {b@127.0.0.1: 127.0.0.1:7002, c@127.0.0.1: 127.0.0.1:7003}
    partition_handling: pause_minority
    bus: redis://127.0.0.1:6379/0
    control: 127.0.0.1:7101
    metrics: 127.0.0.1:15692           # optional: Prometheus GET /metrics (docs/metrics.md)
    tree: ./app-tree.yaml
    alarms: {memory_high_watermark: 0.4, disk_free_limit: 50MB}
    mnesia: {merge: autoheal, fsync: commit}   # optional: run the replicated store
    tls: {certfile: ./tls/a.pem, keyfile: ./tls/a-key.pem, cafile: ./tls/ca.pem}
    role: core                         # or ephemeral: attach to the core in cluster.nodes

Every mistake raises NodeConfigError naming the file, the key path and what was expected, the
same way tree files do. Relative paths are taken from the config file's directory.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from monitors.bus.urls import redact_url
from monitors.node_monitor.config import PartitionHandling, PartitionHandlingError
from monitors.tls import TlsFileError, TlsFiles, check_tls_files
from supervisors import ConfigChecker, ConfigError, TreeSpec, load_tree, read_config_file
from supervisors.config_check import join, show, typed

NODE_NAME = re.compile(r"^[A-Za-z0-9_.-]+@[A-Za-z0-9_.:-]+$")
BUS_SCHEMES = ("memory", "redis", "amqp", "rediss", "amqps")
_KEYS = (
    "node",
    "listen",
    "cookie_file",
    "cookie",
    "data_dir",
    "net_ticktime",
    "cluster",
    "partition_handling",
    "bus",
    "control",
    "tree",
    "alarms",
    "gossip",
    "mnesia",
    "tls",
    "metrics",
    "role",
)
ROLES = ("core", "ephemeral")
DEFAULT_FORGET_EPHEMERAL_AFTER = 30.0
_TLS_KEYS = ("certfile", "keyfile", "cafile")
# A cookie is the cluster's only secret without TLS; Erlang's auto cookies fall to guessing
# (ecosystem_security.md §3). 16 bytes of a random token is the least we accept.
MIN_COOKIE_BYTES = 16
MAKE_COOKIE = "(umask 077; head -c 32 /dev/urandom | base64 > cookie)"
_MNESIA_KEYS = (
    "merge",
    "fsync",
    "force_load",
    "load_timeout",
    "extra_db_nodes",
    "parallel_commit",
)
MERGE_MODES = ("none", "autoheal", "lww")
_ALARM_KEYS = ("memory_high_watermark", "disk_free_limit")
_GOSSIP_KEYS = (
    "exchange",
    "heartbeat_interval",
    "interval",
    "mingle_timeout",
    "without_mingle",
    "without_gossip",
)
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?\s*$", re.I)
_SIZE_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
DEFAULT_NET_TICKTIME = 4.0
DEFAULT_MEMORY_HIGH_WATERMARK = 0.4  # RabbitMQ's vm_memory_high_watermark default
DEFAULT_DISK_FREE_LIMIT = 50 * 10**6  # RabbitMQ's disk_free_limit default (50 MB)

log = logging.getLogger("rabbitry.node_config")


class NodeConfigError(ConfigError):
    """A mistake in a node config file (see ConfigError for the attributes)."""


@dataclass(frozen=True)
class Address:
    """A "host:port" pair."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Alarms:
    """Resource alarm thresholds: a fraction of RAM, and a minimum of free disk in bytes."""

    memory_high_watermark: float = DEFAULT_MEMORY_HIGH_WATERMARK
    disk_free_limit: int = DEFAULT_DISK_FREE_LIMIT


@dataclass(frozen=True)
class GossipOptions:
    """How the node gossips on its `bus:` (defaults: Celery's 2 s heartbeat, 5 s lost check,
    1 s mingle bound). `exchange` separates clusters sharing one broker."""

    exchange: str = "rabbitry"
    heartbeat_interval: float = 2.0
    interval: float = 5.0
    mingle_timeout: float = 1.0
    without_mingle: bool = False
    without_gossip: bool = False

    def core_options(self) -> dict[str, Any]:
        return {
            "heartbeat_interval": self.heartbeat_interval,
            "interval": self.interval,
            "mingle_timeout": self.mingle_timeout,
            "without_mingle": self.without_mingle,
            "without_gossip": self.without_gossip,
        }


@dataclass(frozen=True)
class MnesiaOptions:
    """The node's mnesia_like store (docs/mnesia_like.md). `merge` None: derived from the
    partition handling (ignore: none; otherwise autoheal, so the side that paused or lost
    reloads from the winner); `extra_db_nodes` None: the configured cluster's other nodes."""

    merge: str | None = None
    fsync: str | float = "commit"
    force_load: bool = False
    load_timeout: float = 30.0
    extra_db_nodes: tuple[str, ...] | None = None
    parallel_commit: bool = True  # one fsync on a commit's path: docs/mnesia_like.md

    def merge_for(self, partition_handling: PartitionHandling) -> str:
        if self.merge is not None:
            return self.merge
        return "none" if partition_handling.mode == "ignore" else "autoheal"


@dataclass(frozen=True)
class NodeConfig:
    """A checked node config. `peers` maps each other node to how THIS node reaches it."""

    node: str
    listen: Address
    cookie: bytes = field(repr=False)
    data_dir: Path
    net_ticktime: float = DEFAULT_NET_TICKTIME
    peers: dict[str, Address] = field(default_factory=dict)
    partition_handling: PartitionHandling = field(default_factory=PartitionHandling)
    bus: str | None = None
    control: Address | None = None
    tree: TreeSpec | None = None
    alarms: Alarms = field(default_factory=Alarms)
    gossip: GossipOptions = field(default_factory=GossipOptions)
    mnesia: MnesiaOptions | None = None  # None: the node runs no store
    tls: TlsFiles | None = None  # None: plain TCP dist, plain HTTP on loopback only
    metrics: Address | None = None  # None: no metrics listener
    file: Path | None = field(default=None, compare=False)
    role: str = "core"  # or "ephemeral": peers are then the core members it attaches to
    forget_ephemeral_after: float = DEFAULT_FORGET_EPHEMERAL_AFTER  # core nodes only

    @property
    def cluster_nodes(self) -> list[str]:
        """Every node of the configured cluster, this one included, sorted."""
        return sorted({self.node, *self.peers})


def load_node_config(path: str | os.PathLike[str]) -> NodeConfig:
    """Read and check a node config file (.yaml/.yml/.toml)."""
    path = Path(path)
    data = read_config_file(path, str(path), NodeConfigError)
    return node_config_from_mapping(data, file=str(path), base_dir=path.resolve().parent)


def node_config_from_mapping(
    data: Any, *, file: str = "<node config>", base_dir: str | os.PathLike[str] | None = None
) -> NodeConfig:
    """Check an already parsed node config mapping."""
    check = _NodeChecker(file, Path(base_dir) if base_dir is not None else Path.cwd())
    return check.config(data)


class _NodeChecker(ConfigChecker):
    error = NodeConfigError

    def config(self, data: Any) -> NodeConfig:
        if not isinstance(data, dict) or not data:
            self.fail("", "a mapping with at least node, listen and a cookie", typed(data))
        self.check_keys(data, "", _KEYS)
        node = self.node_name(data, "", "node")
        listen = self.address(self.require(data, "", "listen", '"host:port"'), "listen", data)
        cookie = self.cookie(data)
        data_dir = self.path_value(self.with_default(data, "data_dir"), "", "data_dir")
        net_ticktime = (
            self.duration(data, "", "net_ticktime", allow_zero=False)
            if "net_ticktime" in data
            else DEFAULT_NET_TICKTIME
        )
        tls = self.tls(data, node)
        peers = self.peers(data, node)
        role, forget_after = self.membership(data, node)
        return NodeConfig(
            node=node,
            listen=listen,
            cookie=cookie,
            data_dir=Path(data_dir or self.base_dir / "data" / node),
            net_ticktime=net_ticktime,
            role=role,
            forget_ephemeral_after=forget_after,
            peers=peers,
            partition_handling=self.partition_handling(data),
            bus=self.bus(data),
            control=self.control(data, tls is not None),
            tree=self.tree(data),
            alarms=self.alarms(data),
            gossip=self.gossip(data),
            mnesia=self.mnesia(data),
            tls=tls,
            metrics=self.metrics(data, tls is not None),
            file=Path(self.file),
        )

    @staticmethod
    def with_default(data: dict, key: str) -> dict:
        return data if key in data else {}

    def node_name(self, mapping: dict, path: str, key: str) -> str:
        value = self.string(mapping, path, key) if key in mapping else None
        if value is None:
            self.require(mapping, path, key, "a node name such as a@127.0.0.1")
        if not NODE_NAME.match(value or ""):
            self.fail(
                join(path, key),
                "a node name name@host, such as a@127.0.0.1",
                show(value),
                at=(mapping, key),
            )
        return value  # type: ignore[return-value]

    def address(self, value: Any, path: str, at_mapping: dict, key: str | None = None) -> Address:
        at = (at_mapping, key if key is not None else path.rsplit(".", 1)[-1])
        expected = '"host:port", such as 127.0.0.1:7001'
        if not isinstance(value, str):
            self.fail(path, expected, typed(value), at=at)
        host, sep, port_text = value.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
            self.fail(path, expected, show(value), at=at)
        return Address(host, int(port_text))

    def cookie(self, data: dict) -> bytes:
        has_file, has_inline = "cookie_file" in data, "cookie" in data
        if has_file == has_inline:
            self.fail(
                "cookie_file",
                "exactly one of cookie_file (a file of mode 0600) or cookie",
                problem="expected exactly one of cookie_file (a file of mode 0600) or cookie; "
                + ("got both" if has_file else "got neither"),
                at=data,
            )
        if has_inline:
            value = data["cookie"]
            if not isinstance(value, str) or not value.strip():
                self.fail(  # never show the value: it is the cluster's secret
                    "cookie",
                    "a non-empty string (or, better, cookie_file)",
                    problem="`cookie:` must be a non-empty string (its value is not shown)",
                    at=(data, "cookie"),
                )
            self._private_config_file()
            return self._long_enough(value.strip().encode(), data)
        path = Path(self.path_value(data, "", "cookie_file") or "")
        try:
            info = path.stat()
            text = path.read_text().strip()
        except OSError as exc:
            self.fail(
                "cookie_file",
                "a readable cookie file",
                problem=f"cannot read {path}: {exc.strerror or exc}",
                at=(data, "cookie_file"),
            )
        if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            self.fail(
                "cookie_file",
                "a file readable by its owner only (mode 0600)",
                problem=f"{path} has mode {stat.S_IMODE(info.st_mode):04o}; anyone who can read "
                f"the cookie can join the cluster: run `chmod 600 {path}`",
                at=(data, "cookie_file"),
            )
        if not text:
            self.fail("cookie_file", "a non-empty cookie", problem=f"{path} is empty")
        return self._long_enough(text.encode(), data, path)

    def _private_config_file(self) -> None:
        """An inline `cookie:` is as secret as a cookie file, so the config file holding it
        should be readable by its owner only. A warning, not a refusal: configs written
        before this check must still start (a cookie_file of another mode is refused)."""
        path = Path(self.file)
        try:
            info = path.stat()
        except OSError:
            return  # a mapping that did not come from a file (Spark's template, a test)
        if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            log.warning(
                "%s holds the cookie inline and has mode %04o: anyone who can read it can "
                "join the cluster; run `chmod 600 %s`, or move the cookie to a `cookie_file:`",
                path,
                stat.S_IMODE(info.st_mode),
                path,
            )

    def _long_enough(self, cookie: bytes, data: dict, path: Path | None = None) -> bytes:
        """Refuse a guessable cookie, saying how to make a good one (never showing it)."""
        if len(cookie) < MIN_COOKIE_BYTES:
            key = "cookie_file" if path is not None else "cookie"
            where = f"{path} holds" if path is not None else "`cookie:` is"
            self.fail(
                key,
                f"a cookie of at least {MIN_COOKIE_BYTES} bytes",
                problem=f"{where} {len(cookie)} bytes; a cookie needs at least {MIN_COOKIE_BYTES} bytes: a short one can be guessed, and "
                f"whoever guesses it controls the cluster: make a random one with "
                f"`{MAKE_COOKIE}` and use it as `cookie_file: ./cookie` on every node",
                at=(data, key),
            )
        return cookie

    def tls(self, data: dict, node: str) -> TlsFiles | None:
        section = data.get("tls")
        if section is None:
            return None
        if not isinstance(section, dict):
            self.fail("tls", "a mapping with certfile, keyfile and cafile", typed(section))
        self.check_keys(section, "tls", (*_TLS_KEYS, "crlfile"))
        paths = {}
        for key in _TLS_KEYS:
            self.require(
                section, "tls", key, "a path to a PEM file (`rabbitry tls gen` makes them)"
            )
            paths[key] = Path(self.path_value(section, "tls", key) or "")
        if "crlfile" in section:  # optional: certificates revoked by `rabbitry tls revoke`
            paths["crlfile"] = Path(self.path_value(section, "tls", "crlfile") or "")
        files = TlsFiles(**paths)
        try:
            check_tls_files(files, node)
        except TlsFileError as exc:
            self.fail(
                f"tls.{exc.key}",
                "a usable certificate, key and CA file",
                problem=exc.problem,
                at=(section, exc.key),
            )
        return files

    def peers(self, data: dict, node: str) -> dict[str, Address]:
        cluster = data.get("cluster")
        if cluster is None:
            return {}
        if not isinstance(cluster, dict):
            self.fail("cluster", "a mapping with `nodes`", typed(cluster), at=(data, "cluster"))
        self.check_keys(cluster, "cluster", ("nodes", "forget_ephemeral_after"))
        nodes = cluster.get("nodes", {})
        if not isinstance(nodes, dict):
            self.fail(
                "cluster.nodes",
                'a mapping of node name to "host:port", such as {b@127.0.0.1: 127.0.0.1:7002}',
                typed(nodes),
                at=(cluster, "nodes"),
            )
        peers = {}
        for name in nodes:
            key_path = join("cluster.nodes", name)
            if not isinstance(name, str) or not NODE_NAME.match(name):
                self.fail(key_path, "a node name name@host", show(name), at=(nodes, name))
            address = self.address(nodes[name], key_path, nodes, name)
            if name != node:  # listing yourself is allowed, so one list can serve every node
                peers[name] = address
        return peers

    def membership(self, data: dict, node: str) -> tuple[str, float]:
        """`role` and `cluster.forget_ephemeral_after`, and what an ephemeral node needs: core
        seeds in cluster.nodes, itself not among them, the listed nodes of pause_if_all_down
        among them, and no store of its own (docs/membership.md)."""
        role = data.get("role", "core")
        if role not in ROLES:
            self.fail("role", "core (the default) or ephemeral", show(role), at=(data, "role"))
        given = data.get("cluster")
        cluster: dict[str, Any] = given if isinstance(given, dict) else {}
        listed = cluster.get("nodes")
        nodes: dict[str, Any] = listed if isinstance(listed, dict) else {}
        forget = DEFAULT_FORGET_EPHEMERAL_AFTER
        if "forget_ephemeral_after" in cluster:
            if role == "ephemeral":
                self.fail(
                    "cluster.forget_ephemeral_after",
                    "no forget_ephemeral_after on an ephemeral node: the core nodes forget "
                    "ephemeral members, so set it in their configs",
                    show(cluster["forget_ephemeral_after"]),
                    at=(cluster, "forget_ephemeral_after"),
                )
            forget = self.duration(cluster, "cluster", "forget_ephemeral_after", allow_zero=False)
        if role != "ephemeral":
            return role, forget
        if node in nodes:
            self.fail(
                join("cluster.nodes", node),
                "only core members in an ephemeral node's cluster.nodes; this node is "
                "role: ephemeral, so it cannot also be listed as a core member",
                show(node),
                at=(nodes, node),
            )
        if not nodes:
            self.fail(
                "cluster.nodes",
                "at least one core member for this ephemeral node to attach to, such as "
                "{a@core1: core1:7001}",
                typed(nodes) if nodes != {} else "no core member",
                at=(data, "cluster") if "cluster" in data else data,
            )
        ph = data.get("partition_handling")
        if isinstance(ph, dict) and isinstance(ph.get("pause_if_all_down"), dict):
            listed = ph["pause_if_all_down"].get("nodes") or []
            for i, name in enumerate(listed if isinstance(listed, list) else []):
                if isinstance(name, str) and name not in nodes:
                    self.fail(
                        f"partition_handling.pause_if_all_down.nodes[{i}]",
                        "a core member listed in cluster.nodes (an ephemeral node follows "
                        "the core, and only core members count)",
                        show(name),
                    )
        if "mnesia" in data:
            self.fail(
                "mnesia",
                "no mnesia on an ephemeral node: it holds no disc copies (it is forgotten "
                "when it goes); run the store on core members and reach it through their "
                "control API",
                "a mnesia section",
                at=(data, "mnesia"),
            )
        return role, forget

    def partition_handling(self, data: dict) -> PartitionHandling:
        if "partition_handling" not in data:
            return PartitionHandling()
        try:
            return PartitionHandling.parse(data["partition_handling"])
        except PartitionHandlingError as exc:
            self.fail(
                exc.where,
                "ignore, pause_minority, autoheal or "
                "{pause_if_all_down: {nodes: [...], recover: ignore|autoheal}}",
                problem=exc.problem,
                at=(data, "partition_handling"),
            )

    def bus(self, data: dict) -> str | None:
        if "bus" not in data:
            return None
        url = self.string(data, "", "bus")
        scheme = url.split("://", 1)[0] if "://" in url else ""
        if scheme not in BUS_SCHEMES:
            self.fail(
                "bus",
                "a bus URL: memory://, redis://host:port/db or amqp://user:pass@host:port/vhost "
                "(rediss:// and amqps:// for TLS)",
                show(redact_url(url)),
                at=(data, "bus"),
            )
        return url

    def control(self, data: dict, tls: bool = False) -> Address | None:
        if "control" not in data:
            return None
        address = self.address(data["control"], "control", data)
        if not tls and not _is_loopback(address.host):
            self.fail(
                "control",
                "a loopback address (127.0.0.1, ::1 or localhost): without `tls:` the control "
                "API is plain HTTP and local-only; add a `tls:` section (certfile, keyfile, "
                "cafile; `rabbitry tls gen` makes them) to serve it over HTTPS on any address",
                show(data["control"]),
                at=(data, "control"),
            )
        return address

    def metrics(self, data: dict, tls: bool = False) -> Address | None:
        """Loopback without `tls:`, any address with it (issue 16): the endpoint is read-only
        and carries no secret, but what it says about the cluster is for operators only, so
        it leaves the host only as HTTPS."""
        if "metrics" not in data:
            return None
        address = self.address(data["metrics"], "metrics", data)
        if not tls and not _is_loopback(address.host):
            self.fail(
                "metrics",
                "a loopback address (127.0.0.1, ::1 or localhost): without `tls:` metrics are "
                "plain HTTP and local-only; add a `tls:` section (certfile, keyfile, cafile; "
                "`rabbitry tls gen` makes them) to serve them over HTTPS on any address",
                show(data["metrics"]),
                at=(data, "metrics"),
            )
        return address

    def tree(self, data: dict) -> TreeSpec | None:
        tree_path = self.path_value(data, "", "tree")
        if tree_path and not Path(tree_path).is_file():  # name the key, not just the file
            self.fail(
                "tree",
                "a tree file (docs/tree-files.md)",
                problem=f"{tree_path} does not exist; expected a tree file (relative paths are "
                "taken from this config file's directory)",
                at=(data, "tree"),
            )
        return load_tree(tree_path) if tree_path else None

    def gossip(self, data: dict) -> GossipOptions:
        section = data.get("gossip")
        if section is None:
            return GossipOptions()
        if not isinstance(section, dict):
            self.fail("gossip", "a mapping", typed(section), at=(data, "gossip"))
        if "bus" not in data:
            self.fail(
                "gossip",
                "a `bus:` to gossip on (gossip runs only with a bus)",
                "no bus",
                at=(data, "gossip"),
            )
        self.check_keys(section, "gossip", _GOSSIP_KEYS)
        values: dict[str, Any] = {}
        if "exchange" in section:
            values["exchange"] = self.string(section, "gossip", "exchange")
        for key in ("heartbeat_interval", "interval", "mingle_timeout"):
            if key in section:
                values[key] = self.duration(section, "gossip", key, allow_zero=False)
        for key in ("without_mingle", "without_gossip"):
            if key in section:
                value = section[key]
                if not isinstance(value, bool):
                    self.fail(f"gossip.{key}", "true or false", show(value), at=(section, key))
                values[key] = value
        return GossipOptions(**values)

    def mnesia(self, data: dict) -> MnesiaOptions | None:
        if "mnesia" not in data:
            return None
        section = data["mnesia"]
        if section is None:
            section = {}
        if not isinstance(section, dict):
            self.fail("mnesia", "a mapping (`mnesia: {}` for the defaults)", typed(section))
        self.check_keys(section, "mnesia", _MNESIA_KEYS)
        values: dict[str, Any] = {}
        if "merge" in section:
            merge = section["merge"]
            if merge not in MERGE_MODES:
                self.fail("mnesia.merge", f"one of {', '.join(MERGE_MODES)}", show(merge))
            values["merge"] = merge
        if "fsync" in section:
            fsync = section["fsync"]
            if fsync in ("commit", "none"):
                values["fsync"] = fsync
            else:
                try:
                    values["fsync"] = self.duration(section, "mnesia", "fsync", allow_zero=False)
                except ConfigError:
                    self.fail(
                        "mnesia.fsync", 'commit, none, or an interval such as "1s"', show(fsync)
                    )
        if "force_load" in section:
            if not isinstance(section["force_load"], bool):
                self.fail("mnesia.force_load", "true or false", show(section["force_load"]))
            values["force_load"] = section["force_load"]
        if "parallel_commit" in section:
            if not isinstance(section["parallel_commit"], bool):
                self.fail(
                    "mnesia.parallel_commit", "true or false", show(section["parallel_commit"])
                )
            values["parallel_commit"] = section["parallel_commit"]
        if "load_timeout" in section:
            values["load_timeout"] = self.duration(
                section, "mnesia", "load_timeout", allow_zero=False
            )
        if "extra_db_nodes" in section:
            nodes = section["extra_db_nodes"]
            if not isinstance(nodes, list) or not all(
                isinstance(n, str) and NODE_NAME.match(n) for n in nodes
            ):
                self.fail("mnesia.extra_db_nodes", "a list of node names name@host", show(nodes))
            values["extra_db_nodes"] = tuple(nodes)
        return MnesiaOptions(**values)

    def alarms(self, data: dict) -> Alarms:
        alarms = data.get("alarms")
        if alarms is None:
            return Alarms()
        if not isinstance(alarms, dict):
            self.fail("alarms", "a mapping", typed(alarms), at=(data, "alarms"))
        self.check_keys(alarms, "alarms", _ALARM_KEYS)
        watermark = alarms.get("memory_high_watermark", DEFAULT_MEMORY_HIGH_WATERMARK)
        if (
            isinstance(watermark, bool)
            or not isinstance(watermark, int | float)
            or not 0 < watermark <= 1
        ):
            self.fail(
                "alarms.memory_high_watermark",
                "a fraction of RAM in (0, 1], such as 0.4",
                show(watermark),
                at=(alarms, "memory_high_watermark"),
            )
        limit = alarms.get("disk_free_limit", DEFAULT_DISK_FREE_LIMIT)
        size = _parse_size(limit)
        if size is None:
            self.fail(
                "alarms.disk_free_limit",
                "a size in bytes, or a string such as '50MB' or '1GiB'",
                show(limit),
                at=(alarms, "disk_free_limit"),
            )
        return Alarms(float(watermark), size)


def _parse_size(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str):
        match = _SIZE.match(value)
        if match:
            return int(float(match.group(1)) * _SIZE_UNITS[(match.group(2) or "b").lower()])
    return None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
