"""Simulated Redis servers for the failover simulator (tests/sim/failover.py).

What it models, and why:

- A server has a role ("master" or "slave"), the master it follows, and a replication offset.
  A master's offset grows with every write it accepts (the workers' writes, in the harness).
  A replica copies its master's offset every `sync_every` seconds (its own period, so two
  replicas lag differently and the RCS's "largest offset" choice matters), if both are up.
- `kill` / `revive`: a killed server answers nothing; it comes back with the role, master and
  offset it had (a server cannot be reconfigured while it is down), as a Redis with a
  persisted config does. A killed server's host *refuses* connections at once (REFUSED, after
  one latency), and the connections open to it close (`on_kill` listeners: the RCS's watch);
  `hang` (SIGSTOP) makes a server give *no answer* (None, after the timeout) and closes
  nothing; so does a cut. Replication between servers is never cut (the failover protocol
  does not look at it).
- Reachability is per (node, server): `cut(node, server)` makes the server unreachable from
  one node only, so a partition between the RCS's host and the master, or between one worker
  host and the master, can be modelled while everyone else still sees it.
- `promote` (REPLICAOF NO ONE) keeps the offset, as PSYNC2 does; `replicate` (REPLICAOF) makes
  a full resync at the next sync: the replica's offset becomes its new master's.

For the invariants it keeps, per (node, server), since when the server has been continuously
*visible* from the node (reachable and a master): "did this host see the master down at some
moment of the last W seconds" is then one lookup. Nothing here reads a clock; time is the
Sim's, and the only randomness is the Sim's RNG.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from failover.effects import REFUSED, ServerInfo, Unreachable
from tests.sim.engine import Sim


@dataclass
class SimServer:
    name: str
    role: str = "master"
    master: str | None = None
    offset: int = 0
    alive: bool = True
    hung: bool = False  # SIGSTOPped: down, but its host does not refuse connections
    sync_every: float = 0.1
    fresh: bool = False  # REPLICAOF given: the next sync is a full resync

    def info(self, masters_alive: bool) -> ServerInfo:
        return ServerInfo(self.role, self.master, self.offset, masters_alive)


class RedisSim:
    """The Redis servers of one simulation. See the module docstring."""

    def __init__(
        self,
        sim: Sim,
        master: str,
        replicas: Iterable[str],
        *,
        latency: tuple[float, float] = (0.0005, 0.003),
        timeout: float = 0.25,
        sync_every: tuple[float, float] = (0.05, 0.3),
    ) -> None:
        self.sim = sim
        self.latency = latency
        self.timeout = timeout  # the shell's Redis timeout: an unreachable server costs this
        self.servers: dict[str, SimServer] = {master: SimServer(master)}
        for r in replicas:
            every = round(sim.rng.uniform(*sync_every), 3)
            self.servers[r] = SimServer(r, "slave", master, 0, True, every)
        self.servers[master].sync_every = sync_every[0]
        self.cuts: set[tuple[str, str]] = set()  # (node, server)
        self.rejects: set[tuple[str, str]] = set()  # (node, server): a firewall's REJECT
        self.watched: list[str] = []  # nodes whose visibility the invariants ask about
        self.visible_since: dict[tuple[str, str], float | None] = {}
        self.listeners: list[Callable[[], None]] = []
        self.on_kill: list[Callable[[str], None]] = []  # server killed: its connections close
        self.stats = {"writes": 0, "refused": 0, "unreachable": 0, "promotions": 0}

    # ---- set-up ----------------------------------------------------------------------------

    def start(self, watched: Iterable[str]) -> None:
        """Begin replicating; track visibility from `watched` nodes."""
        self.watched = list(watched)
        for s in self.servers.values():
            self.sim.at(self.sim.now + s.sync_every, self._sync, s.name)
        self._changed()

    # ---- ground truth ------------------------------------------------------------------------

    def reachable(self, node: str, server: str) -> bool:
        s = self.servers[server]
        return s.alive and (node, server) not in self.cuts and (node, server) not in self.rejects

    def visible(self, node: str, server: str) -> bool:
        return self.reachable(node, server) and self.servers[server].role == "master"

    def refuses(self, node: str, server: str) -> bool:
        """Whether `node` gets a refused connection from `server`: the process is dead (not
        hung) and nothing cuts the path between them."""
        if (node, server) in self.cuts:
            return False
        s = self.servers[server]
        return (node, server) in self.rejects or (not s.alive and not s.hung)

    def info(self, node: str, server: str) -> ServerInfo | Unreachable | None:
        """What INFO replication answers to `node`: REFUSED from a dead server's host, None
        (no answer) from a hung or cut-off one."""
        if self.refuses(node, server):
            return REFUSED
        if not self.reachable(node, server):
            return None
        s = self.servers[server]
        up = s.master is not None and self.servers[s.master].alive
        return s.info(up or s.role == "master")

    def masters(self) -> list[str]:
        return [n for n, s in self.servers.items() if s.role == "master"]

    def saw_down_since(self, node: str, server: str, t0: float) -> bool:
        """Whether `server` was not visible from `node` (down, cut off, or not a master) at
        some moment in [t0, now]."""
        since = self.visible_since.get((node, server))
        return since is None or since >= t0

    def delay(self, node: str, servers: Iterable[str]) -> float:
        """How long the shell on `node` takes to ask every server (concurrently)."""
        lo, hi = self.latency
        out = 0.0
        for s in servers:
            quick = self.reachable(node, s) or self.refuses(node, s)
            out = max(out, self.sim.rng.uniform(lo, hi) if quick else self.timeout)
        return out

    # ---- what clients do -------------------------------------------------------------------------

    def write(self, node: str, server: str) -> bool:
        """A worker on `node` writes to `server`: accepted by a reachable master only."""
        if not self.reachable(node, server):
            self.stats["unreachable"] += 1
            return False
        s = self.servers[server]
        if s.role != "master":
            self.stats["refused"] += 1  # READONLY
            return False
        s.offset += 1
        self.stats["writes"] += 1
        return True

    def promote(self, server: str) -> None:
        s = self.servers[server]
        s.role, s.master, s.fresh = "master", None, False
        self.stats["promotions"] += 1
        self._changed()

    def replicate(self, server: str, master: str) -> None:
        s = self.servers[server]
        s.role, s.master, s.fresh = "slave", master, True
        self._changed()

    # ---- faults ---------------------------------------------------------------------------------

    def kill(self, server: str) -> None:
        if self.servers[server].alive:
            self.servers[server].alive = False
            self.sim.record(None, "redis_kill", server)
            self._changed()
            for fn in self.on_kill:
                fn(server)

    def hang(self, server: str) -> None:
        """SIGSTOP: the server stops answering; its host accepts connections, closes none."""
        s = self.servers[server]
        if s.alive:
            s.alive, s.hung = False, True
            self.sim.record(None, "redis_hang", server)
            self._changed()

    def revive(self, server: str) -> None:
        if not self.servers[server].alive:
            self.servers[server].alive = True
            self.servers[server].hung = False
            self.sim.record(None, "redis_revive", server)
            self._changed()

    def cut(self, node: str, server: str) -> None:
        if (node, server) not in self.cuts:
            self.cuts.add((node, server))
            self.sim.record(None, "redis_cut", f"{node} x {server}")
            self._changed()

    def reject(self, node: str, server: str) -> None:
        """A live server refuses `node`'s connections (a firewall's REJECT, a proxy that is
        down): to that node it looks dead; the others still use it."""
        if (node, server) not in self.rejects:
            self.rejects.add((node, server))
            self.sim.record(None, "redis_reject", f"{node} x {server}")
            self._changed()

    def heal(self, node: str, server: str) -> None:
        if (node, server) in self.rejects:
            self.rejects.discard((node, server))
            self.sim.record(None, "redis_heal", f"{node} x {server}")
            self._changed()
        if (node, server) in self.cuts:
            self.cuts.discard((node, server))
            self.sim.record(None, "redis_heal", f"{node} x {server}")
            self._changed()

    def heal_all(self) -> None:
        for node, server in sorted(self.cuts | self.rejects):
            self.heal(node, server)
        for name in self.servers:
            self.revive(name)

    # ---- internals ---------------------------------------------------------------------------------

    def _sync(self, name: str) -> None:
        s = self.servers[name]
        if s.alive and s.role == "slave" and s.master is not None:
            m = self.servers[s.master]
            if m.alive:
                s.offset = m.offset if (s.fresh or m.offset >= s.offset) else s.offset
                s.fresh = False
        self.sim.at(self.sim.now + s.sync_every, self._sync, name)

    def _changed(self) -> None:
        now = self.sim.now
        for node in self.watched:
            for server in self.servers:
                key = (node, server)
                if self.visible(node, server):
                    if self.visible_since.get(key) is None:
                        self.visible_since[key] = now
                else:
                    self.visible_since[key] = None
        for fn in self.listeners:
            fn()
