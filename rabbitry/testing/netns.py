"""Kernel-made partitions for test clusters: one network namespace per node, on a bridge.

`cluster(n, network="netns")` (rabbitry.testing.cluster) starts each node inside its own
network namespace, attached by a veth pair to a bridge of its own, with a private address on
that bridge only (10.231.<k>.0/24, the host side is .1). Faults are iptables DROP rules in the
namespaces, as Jepsen makes them: packets vanish in the kernel, so a connect attempt made
during a cut hangs on lost SYNs, which a user-space proxy cannot show.

- a cut a -> b drops, in b's namespace, every packet from a's address (INPUT);
- `disconnect=True` answers them with a TCP reset instead (REJECT), both ways;
- a heal flushes the rules.

Nothing leaves the bridge: no route, no NAT, no forwarding is set up, and the addresses are
those of our own namespaces. Everything made is named `rby<pid>-<k>...`; `leftovers()` lists
what is still there, and the cluster fixture fails a test that leaves any.

Needs Linux, root, `ip` (iproute2) and `iptables`. `unavailable()` says why not, in one line.
The test process reaches each node's loopback-only control API through a socket made inside
its namespace (setns on a helper thread; the thread's namespace dies with it).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import shutil
import socket
import subprocess
import threading
from dataclasses import dataclass, field

__all__ = ["NetnsError", "NetnsNet", "leftovers", "netns_socket", "our_prefix", "unavailable"]

_CLONE_NEWNET = 0x40000000
_PREFIX = "rby"
_NETNS_DIR = "/run/netns"


class NetnsError(RuntimeError):
    """A namespace, bridge or rule could not be made or removed."""


def unavailable() -> str | None:
    """Why network="netns" cannot run here (one line), or None if it can."""
    if not os.path.isdir("/proc/self/ns") or not os.path.exists("/proc/self/ns/net"):
        return 'network="netns" needs Linux network namespaces (no /proc/self/ns/net)'
    if os.geteuid() != 0:
        return 'network="netns" needs root (it makes namespaces, a bridge and iptables rules)'
    for tool, package in (("ip", "iproute2"), ("iptables", "iptables")):
        if shutil.which(tool) is None:
            return f'network="netns" needs `{tool}` on PATH (apt-get install -y {package})'
    return None


def _run(*args: str) -> str:
    done = subprocess.run(args, capture_output=True, text=True, check=False, timeout=30)
    if done.returncode != 0:
        raise NetnsError(f"`{' '.join(args)}` failed: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def our_prefix() -> str:
    """The prefix of every name this process makes (other processes' are left alone)."""
    return f"{_PREFIX}{os.getpid() % 100000}x"


def leftovers(prefix: str = _PREFIX) -> list[str]:
    """Namespaces and links whose name starts with `prefix` (ours), still present."""
    found = []
    if os.path.isdir(_NETNS_DIR):
        found += [f"netns {n}" for n in sorted(os.listdir(_NETNS_DIR)) if n.startswith(prefix)]
    if shutil.which("ip"):
        for line in _run("ip", "-o", "link", "show").splitlines():
            name = line.split(":", 2)[1].strip().split("@")[0] if ":" in line else ""
            if name.startswith(prefix):
                found.append(f"link {name}")
    return found


_libc: ctypes.CDLL | None = None


def _setns(fd: int) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def netns_socket(ns: str, address: tuple[str, int], timeout: float) -> socket.socket:
    """A TCP connection to `address` made inside namespace `ns` (on a short-lived thread that
    enters it, so this process's own namespace never changes)."""
    box: dict[str, object] = {}

    def connect() -> None:
        try:
            fd = os.open(os.path.join(_NETNS_DIR, ns), os.O_RDONLY)
            try:
                _setns(fd)
            finally:
                os.close(fd)
            box["sock"] = socket.create_connection(address, timeout=timeout)
        except OSError as exc:
            box["error"] = exc

    thread = threading.Thread(target=connect, name=f"netns-connect {ns}", daemon=True)
    thread.start()
    thread.join(timeout + 5)
    if "sock" in box:
        return box["sock"]  # type: ignore[return-value]
    error = box.get("error")
    if isinstance(error, OSError):
        raise error
    raise TimeoutError(f"connecting inside {ns} to {address} did not finish")


# Spread apart by pid: test processes running at once (pytest-xdist workers, whose pids are
# often consecutive) start far from each other's subnets rather than one step behind.
_next = [os.getpid() * 97 % 200]


def _subnets_in_use() -> set[int]:
    """k of every 10.231.<k>.x address on a host interface (another process's bridge)."""
    try:
        shown = subprocess.run(
            ["ip", "-o", "-4", "addr", "show"],
            check=False,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return set()
    return {int(k) for k in re.findall(r"inet 10\.231\.(\d+)\.", shown)}


def _free_subnet(tag: str) -> int:
    """A subnet number (10.231.<k>.0/24, k in 20..219) whose bridge name is not taken and
    whose addresses no other bridge holds: successive nets of one process never reuse a name
    that is still being torn down, and two processes never route the same subnet."""
    taken = set()
    if os.path.isdir("/sys/class/net"):
        taken = set(os.listdir("/sys/class/net"))
    in_use = _subnets_in_use()
    for _ in range(200):
        _next[0] = (_next[0] + 1) % 200
        k = _next[0] + 20
        if f"{tag}x{k}br"[:15] not in taken and k not in in_use:
            return k
    raise NetnsError("netns: no free subnet of 10.231.20-219.0/24 (bridges left behind?)")


@dataclass
class NetnsNet:
    """A bridge and `n` namespaces on it. `make()` builds them, `remove()` takes them down."""

    n: int
    tag: str = field(default_factory=lambda: our_prefix()[:-1])
    subnet: int = field(default=-1)
    made: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not 1 <= self.n <= 200:
            raise ValueError(f"netns: 1 to 200 nodes, got {self.n}")
        if self.subnet < 0:
            self.subnet = _free_subnet(self.tag)
        self.tag = f"{self.tag}x{self.subnet}"

    @property
    def bridge(self) -> str:
        return f"{self.tag}br"[:15]

    def host_veth(self, k: int) -> str:
        return f"{self.tag}h{k}"[:15]

    def ns(self, k: int) -> str:
        return f"{self.tag}n{k}"

    def ip(self, k: int) -> str:
        return f"10.231.{self.subnet}.{k + 2}"

    def make(self) -> None:
        """Build the bridge and the namespaces (all or nothing)."""
        why = unavailable()
        if why:
            raise NetnsError(why)
        try:
            _run("ip", "link", "add", self.bridge, "type", "bridge")
            self.made.append(f"link:{self.bridge}")
            _run("ip", "addr", "add", f"10.231.{self.subnet}.1/24", "dev", self.bridge)
            _run("ip", "link", "set", self.bridge, "up")
            for k in range(self.n):
                ns, host, peer = self.ns(k), self.host_veth(k), f"{self.tag}p{k}"[:15]
                _run("ip", "netns", "add", ns)
                self.made.append(f"netns:{ns}")
                _run("ip", "link", "add", host, "type", "veth", "peer", "name", peer)
                self.made.append(f"link:{host}")
                _run("ip", "link", "set", peer, "netns", ns)
                _run("ip", "link", "set", host, "master", self.bridge)
                _run("ip", "link", "set", host, "up")
                _run("ip", "-n", ns, "addr", "add", f"{self.ip(k)}/24", "dev", peer)
                _run("ip", "-n", ns, "link", "set", peer, "up")
                _run("ip", "-n", ns, "link", "set", "lo", "up")
        except Exception:
            self.remove()
            raise

    def _iptables(self, k: int, *args: str) -> None:
        _run("ip", "netns", "exec", self.ns(k), "iptables", "-w", *args)

    def drop(self, src: int, dst: int, reject: bool = False) -> None:
        """Drop (or reset) every packet from node `src` arriving at node `dst`."""
        target = ["REJECT", "--reject-with", "tcp-reset"] if reject else ["DROP"]
        proto = ["-p", "tcp"] if reject else []
        self._iptables(dst, "-A", "INPUT", *proto, "-s", self.ip(src), "-j", *target)

    def heal(self) -> None:
        """Remove every rule in every namespace."""
        for k in range(self.n):
            self._iptables(k, "-F", "INPUT")

    def exec_prefix(self, k: int) -> list[str]:
        """The command prefix that runs a program inside node k's namespace."""
        return ["ip", "netns", "exec", self.ns(k)]

    def remove(self) -> None:
        """Delete everything of this net, whatever make() got to (namespaces take their veth
        ends and rules with them); safe to call twice."""
        errors = []
        items = [f"netns:{self.ns(k)}" for k in range(self.n)]
        items += [f"link:{self.host_veth(k)}" for k in range(self.n)] + [f"link:{self.bridge}"]
        for item in items:
            kind, _, name = item.partition(":")
            if kind == "netns" and not os.path.exists(os.path.join(_NETNS_DIR, name)):
                continue
            if kind == "link" and not os.path.exists(os.path.join("/sys/class/net", name)):
                continue
            cmd = ("ip", "netns", "del", name) if kind == "netns" else ("ip", "link", "del", name)
            try:
                _run(*cmd)
            except NetnsError as exc:
                if "Cannot find" not in str(exc) and "No such" not in str(exc):
                    errors.append(str(exc))
        self.made.clear()
        if errors:
            raise NetnsError("; ".join(errors))
