"""Real node clusters for tests, with a fault proxy on every directed link.

`ClusterFactory(root)(n)` starts n `rabbitry node start` processes (a@127.0.0.1, b@127.0.0.1,
...) in `root`, and returns a `Cluster` handle. Every directed link a->b goes through its own
Toxiproxy proxy named "a->b": node a's config lists peer b at that proxy's address, and the
proxy's upstream is b's real dist listener. The proxies live in a Toxiproxy-compatible server:
the one at `$TOXIPROXY_URL` if set, else `python -m rabbitry faultproxy` started for the
factory. It is driven through its HTTP API only (stdlib http.client).

Cuts. Both nodes of a pair may open the TCP connection: a's own connection to b goes through
proxy "a->b" (a's bytes flow upstream, b's downstream), and b's connection to a goes through
"b->a" (b's bytes upstream, a's downstream). So "stop every byte from a to b" is a `timeout`
toxic with timeout 0 (drop all data, never close) on the upstream stream of "a->b" and the
downstream stream of "b->a"; b->a bytes still flow. A both-ways cut is the one-way cut in each
direction, all four streams. The drop is silent, like a lost network: nodes notice only when
ticks stop (net_ticktime), as in RabbitMQ's partitions_SUITE. `cut(..., disconnect=True)`
instead disables both proxies, which closes every connection at once and refuses new ones.
`heal()` removes every toxic (which closes the connections they held) and re-enables every
proxy, so the nodes reconnect.

`network="netns"` puts each node in its own network namespace on a bridge instead, and makes
the same cuts with iptables rules in the kernel (rabbitry/testing/netns.py); the handle's API
is the same. It needs root, `ip` and `iptables`, and says why in one line when it cannot run.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import http.client
import itertools
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from monitors.dist.name_lock import LOCK_DIR_ENV
from rabbitry.control import ControlClient, ControlError
from rabbitry.testing.launcher import Launcher, NodeSpec, OsNode
from rabbitry.testing.netns import NetnsError, NetnsNet, netns_socket, unavailable

__all__ = [
    "FAULTPROXY_READY",
    "Cluster",
    "ClusterFactory",
    "Fault",
    "ToxiproxyAPI",
    "ToxiproxyError",
    "faultproxy_available",
    "free_ports",
    "node_name",
    "reserved_ports",
]

HOST = "127.0.0.1"
# Unique to this process: clusters of two test processes at once (pytest-xdist workers) reuse
# node names, and a node must never join a cluster of the other process through a reused port.
COOKIE = b"rabbitry-testing-cluster-cookie-" + secrets.token_hex(8).encode()
FAULTPROXY_READY = r"^READY (?P<address>[^\s@]+:\d+)\s*$"
DEFAULT_TREE = (
    "supervisor:\n  children:\n    - id: idle\n      start: 'rabbitry.examples_workers:Idle'\n"
)
_CUT = {"type": "timeout", "attributes": {"timeout": 0}, "toxicity": 1.0}
NETWORKS = ("proxy", "netns")
NETNS_DIST_PORT = 7000  # each node has its own namespace, so every node can use the same ports
NETNS_CONTROL_PORT = 7100


class _NetnsControlClient(ControlClient):
    """A control client whose connections are made inside a node's network namespace, where
    its control API listens on loopback."""

    def __init__(self, ns: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ns = ns

    def _connection(self) -> http.client.HTTPConnection:
        connection = super()._connection()
        ns, address, timeout = self.ns, (self.host, self.port), self.timeout

        def connect() -> None:
            connection.sock = netns_socket(ns, address, timeout)

        connection.connect = connect  # type: ignore[method-assign]
        return connection


@dataclass(frozen=True)
class Fault:
    """One step of the fault schedule: when it began, what it was, and then each node's side
    (the nodes it could exchange bytes with both ways, itself included; [] when down)."""

    t: float
    what: str
    sides: dict[str, list[str]]

    def __str__(self) -> str:
        short = {
            n.partition("@")[0]: "".join(m.partition("@")[0] for m in s)
            for n, s in self.sides.items()
        }
        parts = " ".join(f"{n}:{s or '-'}" for n, s in short.items())
        return f"{self.t:.3f} {self.what}  [sides {parts}]"


def node_name(index: int) -> str:
    """The name of the index-th node: a@127.0.0.1, b@127.0.0.1, ..."""
    if not 0 <= index < 26:
        raise ValueError(f"a cluster has 1 to 26 nodes (a..z); index {index}")
    return f"{chr(ord('a') + index)}@{HOST}"


# Test ports come from below Linux's ephemeral range (ip_local_port_range, 32768-60999 by
# default): a port that bind(0) handed out and the test released before its node listened
# could be taken meanwhile by any outgoing connection on the machine (a dist link, a Redis
# client) or by another pytest worker's bind(0), and the node then failed with "address in
# use". Here, every process hands out ports from one counter kept under a file lock, so two
# workers never get the same port, and the kernel never gives these to a connection.
PORT_RANGE = (20000, 32000)
_PORT_STATE = Path(os.environ.get("RABBITRY_TEST_PORTS", "/tmp/rabbitry-test-ports"))


def _bindable(sock: socket.socket, port: int) -> bool:
    try:
        sock.bind((HOST, port))
    except OSError:
        return False
    return True


@contextlib.contextmanager
def reserved_ports(n: int) -> Iterator[list[int]]:
    """n distinct free ports on 127.0.0.1, held (bound, not listening) inside the block, so
    that nothing else binding meanwhile (a proxy) can take one; free after it. Taken in turn
    from PORT_RANGE under a lock shared by every process on the machine (see above)."""
    low, high = PORT_RANGE
    sockets: list[socket.socket] = []
    try:
        with open(_PORT_STATE.with_suffix(".lock"), "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                text = _PORT_STATE.read_text().strip() if _PORT_STATE.exists() else ""
                port = int(text) if text.isdigit() and low <= int(text) < high else low
                ports: list[int] = []
                for _ in range(high - low):
                    if len(ports) == n:
                        break
                    sock = socket.socket()
                    if _bindable(sock, port):
                        sockets.append(sock)
                        ports.append(port)
                    else:
                        sock.close()
                    port = low if port + 1 >= high else port + 1
                _PORT_STATE.write_text(f"{port}\n")
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        if len(ports) < n:
            raise RuntimeError(f"only {len(ports)} of {n} ports free in {low}-{high} on {HOST}")
        yield ports
    finally:
        for sock in sockets:
            sock.close()


def free_ports(n: int) -> list[int]:
    """n distinct ports that were free on 127.0.0.1 a moment ago."""
    with reserved_ports(n) as ports:
        return ports


@functools.cache
def faultproxy_available() -> bool:
    """True if `$TOXIPROXY_URL` is set or `python -m rabbitry faultproxy --help` works."""
    if os.environ.get("TOXIPROXY_URL"):
        return True
    try:
        done = subprocess.run(
            [sys.executable, "-m", "rabbitry", "faultproxy", "--help"],
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


class ToxiproxyError(RuntimeError):
    """The Toxiproxy API answered with an unexpected status."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ToxiproxyAPI:
    """A minimal client of Toxiproxy's HTTP API (python_peers.md §4)."""

    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.host, self.port, self.timeout = host, port, timeout

    @classmethod
    def from_url(cls, url: str) -> ToxiproxyAPI:
        parts = urllib.parse.urlsplit(url if "//" in url else f"http://{url}")
        return cls(parts.hostname or "localhost", parts.port or 8474)

    def __repr__(self) -> str:
        return f"<ToxiproxyAPI {self.host}:{self.port}>"

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """Send one request; return the decoded JSON (None for 204); raise on a non-2xx."""
        connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        data = json.dumps(body).encode() if body is not None else None
        headers = {"User-Agent": "rabbitry-testing", "Content-Type": "application/json"}
        try:
            connection.request(method, path, body=data, headers=headers)
            response = connection.getresponse()
            payload = response.read()
        except OSError as exc:
            raise ToxiproxyError(f"{method} {path}: cannot reach {self}: {exc}") from None
        finally:
            connection.close()
        if not 200 <= response.status < 300:
            text = payload.decode(errors="replace").strip()
            raise ToxiproxyError(f"{method} {path}: {response.status} {text}", response.status)
        return json.loads(payload) if payload else None

    @staticmethod
    def _p(name: str) -> str:
        return "/proxies/" + urllib.parse.quote(name, safe="")

    def version(self) -> Any:
        return self.request("GET", "/version")

    def create_proxy(self, name: str, listen: str, upstream: str) -> dict[str, Any]:
        body = {"name": name, "listen": listen, "upstream": upstream, "enabled": True}
        return self.request("POST", "/proxies", body)

    def set_enabled(self, name: str, enabled: bool) -> dict[str, Any]:
        return self.request("POST", self._p(name), {"enabled": enabled})

    def delete_proxy(self, name: str) -> None:
        self.request("DELETE", self._p(name))

    def toxics(self, name: str) -> list[dict[str, Any]]:
        return self.request("GET", self._p(name) + "/toxics") or []

    def add_toxic(self, name: str, toxic: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", self._p(name) + "/toxics", toxic)

    def delete_toxic(self, name: str, toxic: str) -> None:
        self.request("DELETE", self._p(name) + "/toxics/" + urllib.parse.quote(toxic, safe=""))


class Cluster:
    """A handle on n running node processes and the proxies between them.

    Node arguments take the full name ("a@127.0.0.1") or the short one ("a").
    """

    def __init__(
        self,
        launcher: Launcher,
        api: ToxiproxyAPI | None,
        root: Path,
        n: int,
        *,
        partition_handling: str | dict[str, Any] = "pause_minority",
        net_ticktime: float = 1.0,
        tree: str | os.PathLike[str] | None = None,
        proxy_prefix: str = "",
        config: dict[str, Any] | None = None,
        tls: bool = False,
        network: str = "proxy",
    ) -> None:
        if n < 1:
            raise ValueError(f"a cluster needs at least 1 node, got {n}")
        if network not in NETWORKS:
            raise ValueError(f"network: expected one of {NETWORKS}, got {network!r}")
        self.network = network
        self.netns: NetnsNet | None = None
        if network == "netns":
            if tls:
                raise ValueError('network="netns" does not take tls=True yet')
            self.netns = NetnsNet(n)
        self.launcher = launcher
        self.api = api
        self.root = root
        self.net_ticktime = net_ticktime
        # The same names in both modes (the config's cluster.nodes says where each peer is),
        # so that a test runs unchanged in either.
        self.nodes: list[str] = [node_name(i) for i in range(n)]
        self.proxy_prefix = proxy_prefix
        self.procs: dict[str, OsNode] = {}
        self.proxies: dict[tuple[str, str], str] = {}  # (a, b) -> listen address of "a->b"
        self._created: list[str] = []
        self._clients: dict[str, ControlClient] = {}
        self._quick: dict[str, ControlClient] = {}
        self._specs: dict[str, NodeSpec] = {}
        self.faults: list[Fault] = []  # the fault schedule, in order
        self._cuts: set[tuple[str, str]] = set()  # directed links a -> b whose bytes are dropped
        self._down: set[str] = set()  # nodes killed or SIGSTOPped
        self._extra = dict(config or {})
        # With `tls`, `rabbitry tls gen`'s certificates in root/tls, and HTTPS control clients.
        self.cafile: Path | None = root / "tls" / "ca.pem" if tls else None
        self.ephemeral: list[str] = []  # ephemeral nodes added by add_ephemeral
        self._partition_handling = partition_handling
        self._configure(partition_handling, tree)

    def lock_env(self, node: str) -> dict[str, str]:
        """The environment that gives a node process its host's name locks (name_lock.py):
        one lock dir per cluster, so that two test clusters with the same names can run at
        once; under netns, one per node, as each node there is a host of its own."""
        where = self.root / "locks"
        if self.netns is not None:
            where = where / node.partition("@")[0]
        return {LOCK_DIR_ENV: str(where)}

    # -- set-up --------------------------------------------------------------------------

    def _configure(self, partition_handling: str | dict[str, Any], tree: Any) -> None:
        root = self.root
        root.mkdir(parents=True, exist_ok=True)
        cookie = root / "cookie"
        cookie.write_bytes(COOKIE)
        os.chmod(cookie, 0o600)
        tree_path = self._tree_path = self._tree_file(tree)
        tls_files = {}
        if self.cafile is not None:
            from rabbitry.tls_gen import generate

            tls_files = {f.node: f for f in generate(self.cafile.parent, self.nodes)[1]}
        if self.netns is not None:
            try:
                self._configure_netns(partition_handling, tree_path)
            except BaseException:
                self.netns.remove()  # nobody else will: the handle never reached its owner
                raise
            return
        with reserved_ports(2 * len(self.nodes)) as ports:
            dist = dict(zip(self.nodes, ports[: len(self.nodes)], strict=True))
            control = dict(zip(self.nodes, ports[len(self.nodes) :], strict=True))
            self.dist_ports = dist
            for a in self.nodes:
                for b in self.nodes:
                    if a != b:
                        name = self.proxy_name(a, b)
                        made = self._toxi.create_proxy(name, f"{HOST}:0", f"{HOST}:{dist[b]}")
                        self._created.append(name)
                        self.proxies[(a, b)] = made["listen"]
        for a in self.nodes:
            short = a.partition("@")[0]
            config = {
                "node": a,
                "listen": f"{HOST}:{dist[a]}",
                "cookie_file": "./cookie",
                "data_dir": f"./data/{short}",
                "net_ticktime": self.net_ticktime,
                "partition_handling": partition_handling,
                "control": f"{HOST}:{control[a]}",
                "tree": str(tree_path),
            }
            peers = {b: self.proxies[(a, b)] for b in self.nodes if b != a}
            extra = dict(self._extra)
            cluster = {"nodes": peers} if peers else {}
            cluster.update(extra.pop("cluster", None) or {})  # forget_ephemeral_after, say
            if cluster:
                config["cluster"] = cluster
            if a in tls_files:
                files = tls_files[a]
                config["tls"] = {
                    "certfile": str(files.certfile),
                    "keyfile": str(files.keyfile),
                    "cafile": str(files.cafile),
                }
            config.update(extra)
            path = root / f"{short}.yaml"
            path.write_text(json.dumps(config, indent=2) + "\n")  # JSON is YAML
            self._clients[a] = ControlClient(
                HOST, control[a], COOKIE, timeout=5, cafile=self.cafile
            )
            self._quick[a] = ControlClient(HOST, control[a], COOKIE, timeout=1, cafile=self.cafile)
            self._specs[a] = NodeSpec(
                short,
                [sys.executable, "-m", "rabbitry", "node", "start", "--config", str(path)],
                cwd=str(root),
                env=self.lock_env(a),
            )

    def add_ephemeral(
        self, n: int, config: dict[str, Any] | None = None, *, prefix: str = "x"
    ) -> list[str]:
        """Start `n` more node processes with `role: ephemeral`, attached to every core node
        directly (no proxies), and wait for their READY lines. `config` adds keys to theirs.
        Names go on from the ones already added: x0@127.0.0.1, x1@127.0.0.1, ..."""
        if self.cafile is not None:
            raise NotImplementedError("add_ephemeral makes no TLS certificates yet")
        if self.netns is not None:
            raise NotImplementedError('add_ephemeral does not work with network="netns" yet')
        first = len(self.ephemeral)
        names = [f"{prefix}{first + i}@{HOST}" for i in range(n)]
        core = {b: f"{HOST}:{port}" for b, port in self.dist_ports.items()}
        specs = []
        with reserved_ports(2 * n) as ports:
            for i, name in enumerate(names):
                short = name.partition("@")[0]
                data = {
                    "node": name,
                    "role": "ephemeral",
                    "listen": f"{HOST}:{ports[i]}",
                    "cookie_file": "./cookie",
                    "data_dir": f"./data/{short}",
                    "net_ticktime": self.net_ticktime,
                    "partition_handling": self._partition_handling,
                    "control": f"{HOST}:{ports[n + i]}",
                    "tree": str(self._tree_path),
                    "cluster": {"nodes": core},
                    **(config or {}),
                }
                path = self.root / f"{short}.yaml"
                path.write_text(json.dumps(data, indent=2) + "\n")
                self._clients[name] = ControlClient(HOST, ports[n + i], COOKIE, timeout=5)
                self._quick[name] = ControlClient(HOST, ports[n + i], COOKIE, timeout=1)
                self._specs[name] = NodeSpec(
                    short,
                    [sys.executable, "-m", "rabbitry", "node", "start", "--config", str(path)],
                    cwd=str(self.root),
                    env=self.lock_env(name),
                    ready_timeout=120.0,  # dozens booting at once on a small machine
                )
                specs.append(self._specs[name])
        self.ephemeral += names
        self.procs.update(zip(names, self.launcher.start(*specs), strict=True))
        return names

    def _configure_netns(self, partition_handling: str | dict[str, Any], tree_path: Path) -> None:
        """One namespace per node: dist on its bridge address, control on its loopback."""
        assert self.netns is not None
        self.netns.make()
        for k, a in enumerate(self.nodes):
            short = a.partition("@")[0]
            config = {
                "node": a,
                "listen": f"{self.netns.ip(k)}:{NETNS_DIST_PORT}",
                "cookie_file": "./cookie",
                "data_dir": f"./data/{short}",
                "net_ticktime": self.net_ticktime,
                "partition_handling": partition_handling,
                "control": f"{HOST}:{NETNS_CONTROL_PORT}",
                "tree": str(tree_path),
            }
            peers = {
                b: f"{self.netns.ip(j)}:{NETNS_DIST_PORT}"
                for j, b in enumerate(self.nodes)
                if b != a
            }
            if peers:
                config["cluster"] = {"nodes": peers}
            config.update(self._extra)
            path = self.root / f"{short}.yaml"
            path.write_text(json.dumps(config, indent=2) + "\n")  # JSON is YAML
            ns = self.netns.ns(k)
            self._clients[a] = _NetnsControlClient(ns, HOST, NETNS_CONTROL_PORT, COOKIE, timeout=5)
            self._quick[a] = _NetnsControlClient(ns, HOST, NETNS_CONTROL_PORT, COOKIE, timeout=1)
            self._specs[a] = NodeSpec(
                short,
                [
                    *self.netns.exec_prefix(k),
                    sys.executable,
                    "-m",
                    "rabbitry",
                    "node",
                    "start",
                    "--config",
                    str(path),
                ],
                cwd=str(self.root),
                env=self.lock_env(a),
            )

    def _tree_file(self, tree: Any) -> Path:
        if tree is None or (isinstance(tree, str) and "\n" in tree):
            path = self.root / "app.yaml"
            path.write_text(DEFAULT_TREE if tree is None else tree)
            return path
        source = Path(tree).resolve()
        if not source.is_file():
            raise FileNotFoundError(f"tree file {source} does not exist")
        return source

    @property
    def _toxi(self) -> ToxiproxyAPI:
        """The fault proxies' API (proxy mode; a netns cluster cuts with iptables instead)."""
        if self.api is None:
            raise RuntimeError("this cluster runs in network namespaces: it has no fault proxies")
        return self.api

    def proxy_name(self, a: str, b: str) -> str:
        """The name of the proxy carrying a's connections to b: "a->b"."""
        return f"{self.proxy_prefix}{a.partition('@')[0]}->{b.partition('@')[0]}"

    def start(self) -> None:
        """Start every node (they boot in parallel) and wait for their READY lines."""
        started = self.launcher.start(*(self._specs[name] for name in self.nodes))
        self.procs.update(zip(self.nodes, started, strict=True))

    def close(self) -> None:
        """Stop every node, then delete the proxies. Safe to call twice."""
        names = [*reversed(self.ephemeral), *reversed(self.nodes)]
        procs = [self.procs.pop(name) for name in names if name in self.procs]
        for proc in procs:  # SIGTERM all first, so that they stop in parallel
            if proc.alive:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGCONT)
                    os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            proc.stop(self.launcher.grace)
        if self.netns is not None:
            self.netns.remove()
        created, self._created = self._created, []
        for proxy in created:
            with contextlib.suppress(ToxiproxyError):
                self._toxi.delete_proxy(proxy)

    # -- faults --------------------------------------------------------------------------

    def resolve(self, node: str) -> str:
        """The full name of `node` ("a" or "a@127.0.0.1")."""
        full = node if "@" in node else f"{node}@{HOST}"
        if full not in self.nodes and full not in self.ephemeral:
            raise KeyError(f"no node {node!r} in this cluster; nodes: {self.nodes}")
        return full

    @contextlib.contextmanager
    def _faulting(self, what: str) -> Iterator[None]:
        """Record a fault: when it began, and each node's side once it is in place."""
        began = time.time()
        yield
        self.faults.append(Fault(began, what, {n: self.side(n) for n in self.nodes}))

    def note_fault(self, what: str) -> None:
        """Add a fault made by hand (a toxic added through `api`) to the schedule. Such a
        fault does not change `side()`: only cuts, kills and stops do."""
        with self._faulting(what):
            pass

    def side(self, node: str) -> list[str]:
        """The nodes `node` can exchange bytes with both ways (itself included), from the
        faults this handle made; [] if `node` is killed or stopped."""
        node = self.resolve(node)
        if node in self._down:
            return []
        return sorted(
            m
            for m in self.nodes
            if m == node
            or (m not in self._down and (node, m) not in self._cuts and (m, node) not in self._cuts)
        )

    def cut(self, a: str, b: str, oneway: bool = False, disconnect: bool = False) -> None:
        """Stop the bytes from a to b (and from b to a unless `oneway`).

        Bytes are dropped silently (timeout toxics); with `disconnect` (both ways only), the
        two proxies are disabled instead: connections close at once and new ones are refused.
        """
        arrow = "->" if oneway else ("-x-" if disconnect else "<->")
        with self._faulting(f"cut {self.resolve(a)} {arrow} {self.resolve(b)}"):
            self._cut(a, b, oneway, disconnect)

    def _cut(self, a: str, b: str, oneway: bool, disconnect: bool) -> None:
        a, b = self.resolve(a), self.resolve(b)
        if a == b:
            raise ValueError(f"cannot cut {a} from itself")
        if self.netns is not None:
            if disconnect and oneway:
                raise ValueError("disconnect=True closes both directions; it cannot be oneway")
            i, j = self.nodes.index(a), self.nodes.index(b)
            for src, dst in ((i, j),) if oneway else ((i, j), (j, i)):
                if (self.nodes[src], self.nodes[dst]) not in self._cuts:
                    self.netns.drop(src, dst, reject=disconnect)
                    self._cuts.add((self.nodes[src], self.nodes[dst]))
            return
        if disconnect:
            if oneway:
                raise ValueError("disconnect=True closes both directions; it cannot be oneway")
            self._toxi.set_enabled(self.proxy_name(a, b), False)
            self._toxi.set_enabled(self.proxy_name(b, a), False)
            self._cuts |= {(a, b), (b, a)}
            return
        self._drop(a, b)
        if not oneway:
            self._drop(b, a)

    def _drop(self, a: str, b: str) -> None:
        """Drop every byte a sends to b: upstream of "a->b", downstream of "b->a"."""
        self._cuts.add((a, b))
        for proxy, stream in (
            (self.proxy_name(a, b), "upstream"),
            (self.proxy_name(b, a), "downstream"),
        ):
            toxic = dict(_CUT, name=f"cut_{stream}", stream=stream)
            try:
                self._toxi.add_toxic(proxy, toxic)
            except ToxiproxyError as exc:
                if exc.status != 409:  # already cut that way
                    raise

    def partition(self, *groups: Iterable[str]) -> None:
        """Cut every link (both ways) between nodes of different groups.

        A node in no group keeps all its links, which makes a partial partition.
        """
        sets = [[self.resolve(node) for node in group] for group in groups]
        seen = [node for group in sets for node in group]
        if len(seen) != len(set(seen)):
            raise ValueError(f"a node is in two groups: {sets}")
        with self._faulting("partition " + " | ".join(" ".join(group) for group in sets)):
            for i, j in itertools.combinations(range(len(sets)), 2):
                for a in sets[i]:
                    for b in sets[j]:
                        self._cut(a, b, False, False)

    def heal(self) -> None:
        """Remove every toxic and re-enable every proxy of this cluster."""
        with self._faulting("heal"):
            if self.netns is not None:
                self.netns.heal()
            for proxy in self._created:
                for toxic in self._toxi.toxics(proxy):
                    with contextlib.suppress(ToxiproxyError):
                        self._toxi.delete_toxic(proxy, toxic["name"])
                self._toxi.set_enabled(proxy, True)
            self._cuts.clear()

    # -- processes -----------------------------------------------------------------------

    def proc(self, node: str) -> OsNode:
        """The OsNode of `node` (its pid, stdout and stderr lines)."""
        return self.procs[self.resolve(node)]

    def kill(self, node: str) -> None:
        """SIGKILL the node's process group."""
        with self._faulting(f"kill {self.resolve(node)}"):
            self.proc(node).kill()
            self._down.add(self.resolve(node))

    def stop(self, node: str) -> None:
        """SIGSTOP the node: it freezes with its sockets open."""
        with self._faulting(f"SIGSTOP {self.resolve(node)}"):
            self.proc(node).pause()
            self._down.add(self.resolve(node))

    def cont(self, node: str) -> None:
        """SIGCONT a node stopped with `stop`."""
        with self._faulting(f"SIGCONT {self.resolve(node)}"):
            self.proc(node).resume()
            self._down.discard(self.resolve(node))

    def restart(self, node: str) -> None:
        """Start the node again, same config and data dir (SIGTERM first if it still runs)."""
        name = self.resolve(node)
        with self._faulting(f"restart {name}"):
            old = self.procs.get(name)
            if old is not None and old.alive:
                old.stop(self.launcher.grace)
            self._down.add(name)  # down while it boots
            self.procs[name] = self.launcher.start_one(self._specs[name])
            self._down.discard(name)

    def config_file(self, node: str) -> Path:
        return self.root / f"{self.resolve(node).partition('@')[0]}.yaml"

    def data_dir(self, node: str) -> Path:
        return self.root / "data" / self.resolve(node).partition("@")[0]

    # -- observing -----------------------------------------------------------------------

    def client(self, node: str, timeout: float | None = None) -> ControlClient:
        """The node's control API client (status, gossip, mnesia, ...); with `timeout`, a
        new one with that timeout."""
        client = self._clients[self.resolve(node)]
        if timeout is None:
            return client
        if isinstance(client, _NetnsControlClient):
            return _NetnsControlClient(client.ns, client.host, client.port, COOKIE, timeout=timeout)
        return ControlClient(client.host, client.port, COOKIE, timeout=timeout, cafile=self.cafile)

    def status(self, node: str) -> dict[str, Any]:
        """The node's cluster status from its control API (raises ControlError if down)."""
        return self._clients[self.resolve(node)].status()

    def statuses(self) -> dict[str, Any]:
        """Every node's status, or why there is none (never raises, never hangs long)."""
        out: dict[str, Any] = {}
        for name in self.nodes:
            proc = self.procs.get(name)
            if proc is None:
                out[name] = "not started"
            elif not proc.alive:
                out[name] = f"dead (exit {proc.popen.poll()})"
            elif proc._stopped:
                out[name] = "SIGSTOPped"
            else:
                try:
                    out[name] = self._quick[name].status()
                except ControlError as exc:
                    out[name] = f"no status: {exc}"
        return out

    def describe(self) -> str:
        """Every node's status and every active fault, one per line."""
        lines = [
            f"  {name}: {json.dumps(st) if isinstance(st, dict) else st}"
            for name, st in self.statuses().items()
        ]
        faults = []
        for proxy in self._created:
            with contextlib.suppress(ToxiproxyError):
                info = self._toxi.request("GET", ToxiproxyAPI._p(proxy))
                toxics = [f"{t['name']}({t['type']})" for t in info.get("toxics") or []]
                if not info.get("enabled", True):
                    toxics.insert(0, "disabled")
                if toxics:
                    faults.append(f"  {proxy}: {', '.join(toxics)}")
        schedule = [f"  {fault}" for fault in self.faults] or ["  none"]
        return "\n".join(
            ["statuses:", *lines, "faults:", *(faults or ["  none"]), "fault schedule:", *schedule]
        )

    def wait_for(
        self, predicate: Callable[[], Any], timeout: float = 20.0, what: str | None = None
    ) -> Any:
        """Poll `predicate()` until it returns something true; return that.

        A ControlError (a node not answering yet), an AssertionError and the like count as false. On timeout, AssertionError
        with `what`, the last exception, and every node's status and active faults.
        """
        __tracebackhide__ = True
        deadline = time.monotonic() + timeout
        last: BaseException | None = None
        while True:
            try:
                result = predicate()
                if result:
                    return result
            except (
                AssertionError,
                ControlError,
                LookupError,
                TypeError,
                ValueError,
                OSError,
            ) as exc:
                last = exc
            if time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        label = what or getattr(predicate, "__name__", repr(predicate))
        error = f"; last error: {last!r}" if last is not None else ""
        raise AssertionError(
            f"timed out after {timeout} s waiting for {label}{error}\n" + self.describe()
        )

    # -- common predicates ---------------------------------------------------------------

    def running(self, node: str) -> list[str]:
        """The nodes `node` sees running."""
        return self.status(node)["running"]

    def paused(self, node: str) -> bool:
        return bool(self.status(node)["paused"])

    def wait_until_formed(self, timeout: float = 20.0) -> None:
        """Wait until every node sees every node running and none is paused."""

        def formed() -> bool:
            return all(self.running(n) == self.nodes and not self.paused(n) for n in self.nodes)

        self.wait_for(formed, timeout, "every node to see all running and none paused")


class ClusterFactory:
    """Makes Clusters in `root`; `close()` tears down all of them and the proxy server."""

    def __init__(self, root: Path, launcher: Launcher | None = None) -> None:
        self.root = Path(root)
        self.launcher = launcher or Launcher()
        self._own_launcher = launcher is None
        self.clusters: list[Cluster] = []
        self._api: ToxiproxyAPI | None = None
        self._server: OsNode | None = None
        self._external = bool(os.environ.get("TOXIPROXY_URL"))

    @property
    def api(self) -> ToxiproxyAPI:
        """The Toxiproxy API: $TOXIPROXY_URL, else a `rabbitry faultproxy` started now."""
        if self._api is None:
            url = os.environ.get("TOXIPROXY_URL")
            if url:
                self._api = ToxiproxyAPI.from_url(url)
            else:
                if not faultproxy_available():
                    raise RuntimeError("rabbitry faultproxy not available and no TOXIPROXY_URL")
                spec = NodeSpec(
                    "faultproxy",
                    [sys.executable, "-m", "rabbitry", "faultproxy", "--listen", f"{HOST}:0"],
                    ready=FAULTPROXY_READY,
                    ready_timeout=30.0,
                )
                self._server = self.launcher.start_one(spec)
                host, _, port = (self._server.address or "").rpartition(":")
                self._api = ToxiproxyAPI(host or HOST, int(port))
        return self._api

    def __call__(
        self,
        n: int = 3,
        partition_handling: str | dict[str, Any] = "pause_minority",
        net_ticktime: float = 1.0,
        tree: str | os.PathLike[str] | None = None,
        *,
        wait: bool = True,
        config: dict[str, Any] | None = None,
        tls: bool = False,
        network: str = "proxy",
    ) -> Cluster:
        """Start an n-node cluster and (with `wait`) wait until it has formed. `config` adds
        keys to every node's config (`bus:`, `gossip:`, `alarms:`, ...); `tls` runs it over
        TLS with certificates from `rabbitry tls gen` (in the cluster's root, tls/).
        `network="netns"`: each node in its own network namespace, cuts by iptables rules
        (rabbitry/testing/netns.py); raises NetnsError, one line saying why, where it cannot
        run (not root, no `ip` or `iptables`)."""
        if network not in NETWORKS:
            raise ValueError(f"network: expected one of {NETWORKS}, got {network!r}")
        if network == "netns":
            why = unavailable()
            if why:
                raise NetnsError(why)
        index = len(self.clusters)
        prefix = (
            f"rabbitry-{os.getpid()}-{id(self):x}-{index}:"
            if self._external
            else (f"{index}:" if index else "")
        )
        cluster = Cluster(
            self.launcher,
            self.api if network != "netns" else None,
            self.root / f"cluster{index}",
            n,
            partition_handling=partition_handling,
            net_ticktime=net_ticktime,
            tree=tree,
            proxy_prefix=prefix,
            config=config,
            tls=tls,
            network=network,
        )
        self.clusters.append(cluster)
        cluster.start()
        if wait:
            cluster.wait_until_formed()
        return cluster

    def close(self) -> None:
        """Stop every node, delete every proxy, stop the proxy server we started."""
        try:
            for cluster in reversed(self.clusters):
                cluster.close()
        finally:
            server, self._server = self._server, None
            if server is not None:
                server.stop(self.launcher.grace)
            if self._own_launcher:
                self.launcher.stop_all()
