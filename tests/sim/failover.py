"""Hosting Beetle-style Redis failover (RCS candidates and RCCs) in the simulator.

- `FailoverKind` is the CoreKind: on an RCS node a ConfigurationServerCore (built as a standby:
  the harness's election makes one active), on a worker node a ConfigurationClientCore with
  its own master file on the node's disk (it survives crashes) and a workload that writes to
  the file's master every `write_every` s. Bus effects go to tests/sim/bus.py; Redis effects
  to tests/sim/redis_sim.py, as seen from the node (its own reachability), after a latency (an
  unreachable server costs the shell's Redis timeout). A command sent to Redis is executed
  even if its sender crashes right after (it is on the wire).
- `FailoverRun` models the gossip election: it activates one RCS at a time with strictly
  increasing terms; a crashed active RCS is replaced after an election delay. It can also
  hand over cleanly, or activate a new RCS while the old one still believes it is active
  (`overlap`: the old one learns late, as when it is cut off from its peers).
- `Checker` states the invariants, checked as the run goes (see `check_files`,
  `switch_allowed`) and at the end (`converged`); docs/failover.md explains each.
- `generate(seed, ...)` draws a schedule of faults: master kills, partitions between a host and
  a server, hosts cut off the bus, RCS crashes (also exactly when it publishes invalidate or
  sends Promote), handovers, RCC crashes; then everything heals and the system must converge.

Nothing here reads a clock: a run is a function of its seed.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from failover import messages as m
from failover.client_core import ConfigurationClientCore
from failover.effects import Promote
from failover.messages import NO_TOKEN, Token
from failover.server_core import ConfigurationServerCore
from tests.sim.bus import BusMsg, SimBus
from tests.sim.engine import EffectHandler, NetConfig, Sim, SimNode
from tests.sim.redis_sim import RedisSim

NAME = "failover"
SYSTEM = "sim"
SERVERS = ("r1:6379", "r2:6379", "r3:6379")
RCS_OPTIONS: dict[str, Any] = {
    "master_retries": 3,
    "master_retry_interval": 1.0,
    "client_timeout": 2.0,
    "client_heartbeat_interval": 1.0,
    "reconfigure_interval": 5.0,
    "redis_timeout": 2.0,
}
RCC_OPTIONS: dict[str, Any] = {"heartbeat_interval": 1.0}
WRITE_EVERY = 0.1
SETTLE = 20.0  # after the final heal, the system converges within this


class Host:
    """What the engine hosts on a node: one failover core."""

    def __init__(self, core: Any, connected: bool) -> None:
        self.core = core
        self.connected = connected

    @property
    def is_rcs(self) -> bool:
        return isinstance(self.core, ConfigurationServerCore)

    def start(self, now: float) -> list[Any]:
        out = self.core.start(now)
        if not self.connected:
            out += self.core.bus_down(now)
        return out

    def timer(self, key: str, now: float, data: Any = None) -> list[Any]:
        return self.core.timer(key, now, data)

    def receive(self, sender: str, msg: Any, now: float) -> list[Any]:
        return []  # failover speaks only on the bus


@dataclass
class Event:
    t: float
    node: str
    what: str
    detail: Any = None


class FailoverViolation(AssertionError):
    def __init__(self, invariant: str, message: str, t: float) -> None:
        super().__init__(f"[{invariant}] at t={t:.4f}: {message}")
        self.invariant = invariant


class FailoverKind:
    """A CoreKind for RCS candidates and RCCs; see the module docstring."""

    name = NAME

    def __init__(
        self,
        bus: SimBus,
        redis: RedisSim,
        *,
        rcs_nodes: tuple[str, ...],
        rcc_nodes: tuple[str, ...],
        client_ids: tuple[str, ...] | None = None,
        rcs_options: dict[str, Any] | None = None,
        rcc_options: dict[str, Any] | None = None,
        initial: str = SERVERS[0],
        write_every: float = WRITE_EVERY,
    ) -> None:
        self.bus = bus
        self.redis = redis
        self.rcs_nodes = rcs_nodes
        self.rcc_nodes = rcc_nodes
        self.client_ids = rcc_nodes if client_ids is None else client_ids
        self.rcs_options = {**RCS_OPTIONS, **(rcs_options or {})}
        self.rcc_options = {**RCC_OPTIONS, **(rcc_options or {})}
        self.initial = initial
        self.write_every = write_every
        self.events: list[Event] = []
        # node -> (server, the node's incarnation): the RCS's WatchServer connections
        self.watches: dict[str, tuple[str, int]] = {}
        self._sim: Sim | None = None
        redis.on_kill.append(self._server_killed)
        self.checker: Checker | None = None
        self.trigger: Callable[[str, str], None] | None = None  # (node, what) hook
        bus.register(NAME, self._deliver, self._bus_state)

    # ---- CoreKind --------------------------------------------------------------------------

    def build(self, sim: Sim, node: SimNode) -> Host:
        self._sim = sim
        connected = self.bus.node_booted(node)
        if node.name in self.rcs_nodes:
            core: Any = ConfigurationServerCore(
                SYSTEM,
                list(self.redis.servers),
                list(self.client_ids),
                server_id=node.name,
                master=node.disk.get("rcs_master", self.initial),
                active=False,
                **self.rcs_options,
            )
        else:
            node.disk.setdefault("master_file", self.initial)
            core = ConfigurationClientCore(SYSTEM, node.name, **self.rcc_options)
            sim.post(node, sim.rng.uniform(0.0, self.write_every), self._write, sim, node)
        return Host(core, connected)

    def handlers(self) -> dict[str, EffectHandler]:
        out = dict(self.bus.handlers())
        publish = out["Publish"]

        def on_publish(sim: Sim, node: SimNode, cname: str, eff: Any) -> None:
            body = eff.body
            if self.checker is not None:
                self.checker.published(node.name, body)
            self.events.append(Event(sim.now, node.name, body["type"], m.token_of(body)))
            publish(sim, node, cname, eff)
            if body["type"] in (m.PING, m.INVALIDATE) and self.trigger is not None:
                self.trigger(node.name, body["type"])

        out["Publish"] = on_publish
        out["QueryRedis"] = self._query
        out["WatchServer"] = self._watch_server
        out["Promote"] = self._promote
        out["MakeReplica"] = self._make_replica
        out["SetMaster"] = self._set_master
        out["ReadMasterFile"] = self._read_file
        out["WriteMasterFile"] = self._write_file
        out["Notify"] = self._notify
        return out

    # ---- driving ---------------------------------------------------------------------------

    def host(self, sim: Sim, name: str) -> Host | None:
        node = sim.nodes[name]
        return node.cores.get(NAME) if node.alive else None

    def call(self, sim: Sim, name: str, method: str, *args: Any) -> None:
        """Call `core.method(*args, now)` on `name` now (skipped if the node is down)."""
        node = sim.nodes[name]
        if node.alive:
            sim.post(node, 0.0, self._call, sim, node, method, args)

    def _call(self, sim: Sim, node: SimNode, method: str, args: tuple[Any, ...]) -> None:
        host = node.cores[NAME]
        self.events.append(Event(sim.now, node.name, f"call:{method}", args))
        sim.call(node, NAME, method, args, getattr(host.core, method)(*args, sim.now))

    # ---- bus -------------------------------------------------------------------------------

    def _deliver(self, sim: Sim, node: SimNode, cname: str, msg: BusMsg) -> None:
        host = node.cores[cname]
        effects = host.core.receive(msg.routing_key, msg.body, sim.now)
        sim.call(node, cname, "bus", (msg.sender, msg.routing_key), effects)

    def _bus_state(self, sim: Sim, node: SimNode, cname: str, up: bool) -> None:
        host = node.cores[cname]
        host.connected = up
        effects = host.core.bus_up(sim.now) if up else host.core.bus_down(sim.now)
        sim.call(node, cname, "bus_up" if up else "bus_down", None, effects)

    # ---- Redis -------------------------------------------------------------------------------

    def _query(self, sim: Sim, node: SimNode, cname: str, eff: Any) -> None:
        delay = self.redis.delay(node.name, eff.servers)
        sim.post(node, delay, self._answer, sim, node, eff)

    def _answer(self, sim: Sim, node: SimNode, eff: Any) -> None:
        infos = {s: self.redis.info(node.name, s) for s in eff.servers}
        core = node.cores[NAME].core
        sim.call(
            node,
            NAME,
            "redis_info",
            eff.request_id,
            core.redis_info(eff.request_id, infos, sim.now),
        )

    def _watch_server(self, sim: Sim, node: SimNode, cname: str, eff: Any) -> None:
        if eff.server is None:
            self.watches.pop(node.name, None)
            return
        self.watches[node.name] = (eff.server, node.incarnation)
        if self.redis.refuses(node.name, eff.server):  # the connect itself is refused
            self._close_watch(sim, node.name, eff.server)

    def _server_killed(self, server: str) -> None:
        """A killed server's connections close: every RCS watching it hears so one latency
        later, unless a cut is between them (then the FIN never arrives)."""
        sim = self._sim
        if sim is None:
            return
        for name, (watched, _life) in sorted(self.watches.items()):
            if watched == server and (name, server) not in self.redis.cuts:
                self._close_watch(sim, name, server)

    def _close_watch(self, sim: Sim, name: str, server: str) -> None:
        node = sim.nodes[name]
        watched = self.watches.pop(name, None)
        if watched is None or watched[1] != node.incarnation or not node.alive:
            return
        delay = sim.rng.uniform(*self.redis.latency)
        sim.post(node, delay, self._connection_lost, sim, node, server, node.incarnation)

    def _connection_lost(self, sim: Sim, node: SimNode, server: str, life: int) -> None:
        if node.incarnation != life or NAME not in node.cores:
            return
        core = node.cores[NAME].core
        self.events.append(Event(sim.now, node.name, "connection_lost", server))
        sim.call(node, NAME, "connection_lost", server, core.connection_lost(server, sim.now))

    def _promote(self, sim: Sim, node: SimNode, cname: str, eff: Promote) -> None:
        core = node.cores[NAME].core
        if self.checker is not None:
            self.checker.promoted(node.name, core.master, eff.server, core.token)
        self.events.append(Event(sim.now, node.name, "promote", eff.server))
        self._command(sim, node, eff, lambda: self.redis.promote(eff.server))
        if self.trigger is not None:
            self.trigger(node.name, "promote")

    def _make_replica(self, sim: Sim, node: SimNode, cname: str, eff: Any) -> None:
        self.events.append(Event(sim.now, node.name, "make_replica", (eff.server, eff.master)))
        self._command(sim, node, eff, lambda: self.redis.replicate(eff.server, eff.master))

    def _command(self, sim: Sim, node: SimNode, eff: Any, do: Callable[[], None]) -> None:
        """Send a command: it runs at the server one latency later if the server is reachable
        then (whatever happens to the sender), and the answer comes back one latency later."""
        lo, hi = self.redis.latency
        name = node.name
        life = node.incarnation

        def execute() -> None:
            ok = self.redis.reachable(name, eff.server)
            if ok:
                do()
            if node.incarnation == life:  # the sender is still there to read the reply
                quick = ok or self.redis.refuses(name, eff.server)
                back = sim.rng.uniform(lo, hi) if quick else self.redis.timeout
                sim.post(node, back, self._done, sim, node, eff.request_id, ok)

        if self.redis.reachable(name, eff.server):
            sim.at(sim.now + sim.rng.uniform(lo, hi), execute)
        else:
            refused = self.redis.refuses(name, eff.server)
            wait = sim.rng.uniform(lo, hi) if refused else self.redis.timeout
            sim.post(node, wait, self._done, sim, node, eff.request_id, False)

    def _done(self, sim: Sim, node: SimNode, req: int, ok: bool) -> None:
        core = node.cores[NAME].core
        sim.call(node, NAME, "redis_done", (req, ok), core.redis_done(req, ok, sim.now))

    # ---- files and notifications ------------------------------------------------------------

    def _set_master(self, sim: Sim, node: SimNode, cname: str, eff: Any) -> None:
        node.disk["rcs_master"] = eff.server

    def _read_file(self, sim: Sim, node: SimNode, cname: str, eff: Any) -> None:
        sim.post(node, 0.0005, self._file_read, sim, node)

    def _file_read(self, sim: Sim, node: SimNode) -> None:
        core = node.cores[NAME].core
        content = node.disk.get("master_file")
        sim.call(node, NAME, "file_read", content, core.master_file_read(content, sim.now))

    def _write_file(self, sim: Sim, node: SimNode, cname: str, eff: Any) -> None:
        node.disk["master_file"] = eff.server
        self.events.append(Event(sim.now, node.name, "file", eff.server))
        sim.record(node, "file", eff.server)
        if self.checker is not None:
            self.checker.file_written(node.name, eff.server, node.cores[NAME].core.max_token)
            self.checker.check_files()

    def _notify(self, sim: Sim, node: SimNode, cname: str, eff: Any) -> None:
        self.events.append(Event(sim.now, node.name, "notify", eff.text))
        sim.record(node, "notify", eff.text)

    # ---- workload ------------------------------------------------------------------------------

    def _write(self, sim: Sim, node: SimNode) -> None:
        server = node.disk.get("master_file")
        if server:
            self.redis.write(node.name, server)
        sim.post(node, self.write_every, self._write, sim, node)

    def of(self, what: str) -> list[Event]:
        return [e for e in self.events if e.what == what]


# ==================================================================== invariants


class Checker:
    """The invariants (docs/failover.md, "The simulator"), checked as the run goes:

    1. one_master_in_files: at every moment the non-empty master files of all worker hosts
       (running or crashed: a file outlives its RCC) name at most one server;
    2. files_name_masters: at every moment a server named in a master file has the role
       master (it may be down): the workers' writes never go to a replica;
    4. no_invalidation_while_master_visible: a client publishes client_invalidated only while
       the master being invalidated is not a reachable master from its host (ground truth at
       that instant). With 5, a cut between the RCS and the master, or between some hosts
       and the master, cannot cause a switch while any worker host still uses it;
    5. all_invalidated: a promotion comes after client_invalidated from EVERY configured
       client under the promoting RCS's token; a client that writes another master into its
       file than the newest one a client accepted before does so only after every client
       published client_invalidated with a token above that one. An RCC that cannot be
       reached blocks the switch.
    3. converged (at the end): see `converged`.
    """

    def __init__(self, sim: Sim, redis: RedisSim, kind: FailoverKind) -> None:
        self.sim = sim
        self.redis = redis
        self.kind = kind
        self.best: tuple[Token, str] = (NO_TOKEN, kind.initial)  # newest master accepted
        self.targets: dict[Token, str] = {}  # invalidate token -> the master it names
        self.invalidated: dict[Token, set[str]] = {}
        self.last_invalidated: dict[str, Token] = {}
        self.switches: list[tuple[float, str, str, str, str]] = []  # (t, rcs, how, old, new)
        redis.listeners.append(self.check_files)

    def fail(self, invariant: str, message: str) -> None:
        raise FailoverViolation(invariant, message, self.sim.now)

    def published(self, node: str, body: dict[str, Any]) -> None:
        tok = m.token_of(body)
        kind = body["type"]
        if kind == m.INVALIDATE:
            self.targets[tok] = body["server"]
        elif kind == m.CLIENT_INVALIDATED:
            target = self.targets.get(tok)
            if target is not None and self.redis.visible(node, target):
                self.fail(
                    "no_invalidation_while_master_visible",
                    f"{node} invalidated {target} (token {tok}) while it reaches it as a master",
                )
            self.invalidated.setdefault(tok, set()).add(body["sender"])
            self.last_invalidated[body["sender"]] = max(
                self.last_invalidated.get(body["sender"], NO_TOKEN), tok
            )

    def file_written(self, node: str, server: str | None, tok: Token) -> None:
        """A client wrote its master file after a message with token `tok`."""
        if server is None:
            return
        old = self.best
        if tok > old[0] and server != old[1]:
            late = sorted(
                c for c in self.kind.client_ids if self.last_invalidated.get(c, NO_TOKEN) <= old[0]
            )
            if late:
                self.fail(
                    "all_invalidated",
                    f"{node} takes {server} (token {tok}) instead of {old[1]} (accepted with "
                    f"{old[0]}), but {late} did not invalidate since",
                )
            self.switches.append((self.sim.now, node, "reconfigure", old[1], server))
        if tok > old[0]:
            self.best = (tok, server)

    def promoted(self, rcs: str, old: str | None, new: str, tok: Token) -> None:
        missing = sorted(set(self.kind.client_ids) - self.invalidated.get(tok, set()))
        if missing:
            self.fail(
                "all_invalidated",
                f"{rcs} promotes {new} (old master {old}, token {tok}) without "
                f"client_invalidated from {missing}",
            )
        self.switches.append((self.sim.now, rcs, "promote", str(old), new))

    def files(self) -> dict[str, str]:
        out = {}
        for name in self.kind.rcc_nodes:
            server = self.sim.nodes[name].disk.get("master_file")
            if server:
                out[name] = server
        return out

    def check_files(self) -> None:
        named = self.files()
        if len(set(named.values())) > 1:
            self.fail("one_master_in_files", f"master files name different servers: {named}")
        for name, server in named.items():
            if self.redis.servers[server].role != "master":
                s = self.redis.servers[server]
                self.fail(
                    "files_name_masters",
                    f"{name}'s master file names {server}, a {s.role} of {s.master}",
                )

    def converged(self, active: str | None) -> str | None:
        """Why the system has not converged, or None: every worker host runs and its file
        names the same server S; S is a master reachable from every host; it is the only
        master among the servers, and the others replicate it; the active RCS runs, watches
        S and finds it available."""
        sim, redis = self.sim, self.redis
        files = self.files()
        for name in self.kind.rcc_nodes:
            if not sim.nodes[name].alive:
                return f"{name} is down"
            if name not in files:
                return f"{name}'s master file is empty"
        named = set(files.values())
        if len(named) != 1:
            return f"master files disagree: {files}"
        s = named.pop()
        for name in self.kind.rcc_nodes:
            if not redis.visible(name, s):
                return f"{s} is not a reachable master from {name}"
        masters = redis.masters()
        if masters != [s]:
            return f"the masters are {masters}, not just {s}"
        for name, srv in redis.servers.items():
            if s not in (name, srv.master):
                return f"{name} replicates {srv.master}, not {s}"
        if active is None or not sim.nodes[active].alive:
            return "no active RCS"
        core = sim.nodes[active].cores[NAME].core
        st = core.status()
        if not st["active"] or st["redis_master"] != s or not st["redis_master_available"]:
            return f"the active RCS {active} reports {st['redis_master']!r} (active={st['active']}, available={st['redis_master_available']}, phase={st['phase']})"
        return None


# ==================================================================== runs


@dataclass(frozen=True)
class Op:
    at: float
    action: str
    args: tuple[Any, ...] = ()

    def __str__(self) -> str:
        return f"{self.at:8.3f} {self.action} {' '.join(map(str, self.args))}"


@dataclass
class FailoverSchedule:
    seed: int
    rcs: tuple[str, ...]
    rcc: tuple[str, ...]
    ops: list[Op]
    heal_at: float
    end: float

    def describe(self) -> str:
        head = (
            f"failover seed={self.seed} rcs={len(self.rcs)} rcc={len(self.rcc)} "
            f"heal_at={self.heal_at:.3f} end={self.end:.3f}"
        )
        return "\n".join([head, *(f"  {op}" for op in sorted(self.ops, key=lambda o: o.at))])


def nodes_for(n_rcs: int, n_rcc: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    rcs = tuple(f"rcs{i}@sim" for i in range(1, n_rcs + 1))
    rcc = tuple(f"w{i}@sim" for i in range(1, n_rcc + 1))
    return rcs, rcc


class FailoverRun:
    """One simulation: servers, the bus, RCS candidates, RCCs, the election, the checker."""

    def __init__(
        self,
        seed: int,
        rcs: tuple[str, ...],
        rcc: tuple[str, ...],
        *,
        rcs_options: dict[str, Any] | None = None,
        rcc_options: dict[str, Any] | None = None,
        client_ids: tuple[str, ...] | None = None,
        election_delay: tuple[float, float] = (1.0, 3.0),
        bus_latency: tuple[float, float] = (0.001, 0.010),
        trace_len: int | None = 400,
    ) -> None:
        self.sim = Sim(seed, NetConfig(), trace_len=trace_len)
        self.bus = SimBus(self.sim, latency=bus_latency)
        self.redis = RedisSim(self.sim, SERVERS[0], SERVERS[1:])
        self.kind = FailoverKind(
            self.bus,
            self.redis,
            rcs_nodes=rcs,
            rcc_nodes=rcc,
            client_ids=client_ids,
            rcs_options=rcs_options,
            rcc_options=rcc_options,
        )
        self.sim.add_kind(self.kind)
        for name in (*rcs, *rcc):
            self.sim.add_node(name)
        self.checker = Checker(self.sim, self.redis, self.kind)
        self.kind.checker = self.checker
        self.kind.trigger = self._triggered
        self.rcs, self.rcc = rcs, rcc
        self.election_delay = election_delay
        self.term = 0
        self.active: str | None = None
        self.crash_on: dict[str, str] = {}  # what ("ping", "invalidate", "promote") -> then
        self.healed = False

    # ---- the election --------------------------------------------------------------------------

    def elect(self, name: str | None = None) -> str | None:
        """Make `name` (or the first running candidate) active with a new, higher term."""
        sim = self.sim
        if name is None or not sim.nodes[name].alive:
            alive = [n for n in self.rcs if sim.nodes[n].alive]
            if not alive:
                return None
            name = alive[0] if self.active not in alive else self.active
        self.term += 1
        self.active = name
        sim.record(None, "elect", f"{name} term={self.term}")
        self.kind.call(sim, name, "set_active", True, self.term)
        return name

    def depose(self, name: str) -> None:
        self.sim.record(None, "depose", name)
        self.kind.call(self.sim, name, "set_active", False, self.term)
        if self.active == name:
            self.active = None

    def crash(self, name: str) -> None:
        self.sim.crash(name)
        if name == self.active:
            self.active = None
            delay = self.sim.rng.uniform(*self.election_delay)
            self.sim.at(self.sim.now + delay, self._reelect)

    def _reelect(self) -> None:
        if self.active is None:
            self.elect()

    def handover(self, to: str | None = None, gap: float = 0.0) -> None:
        old = self.active
        if old is not None:
            self.depose(old)
        target = to or next((n for n in self.rcs if n != old and self.sim.nodes[n].alive), None)
        if target is None:
            target = old
        self.sim.at(self.sim.now + gap, self.elect, target)

    def overlap(self, late: float) -> None:
        """Activate another candidate while the old one still believes it is active; the old
        one is told `late` s later."""
        old = self.active
        target = next((n for n in self.rcs if n != old and self.sim.nodes[n].alive), None)
        if target is None:
            return
        self.elect(target)
        if old is not None:
            self.sim.at(self.sim.now + late, self._late_depose, old)

    def _late_depose(self, name: str) -> None:
        if name != self.active:  # unless the election chose it again meanwhile
            self.kind.call(self.sim, name, "set_active", False, self.term)

    def _triggered(self, node: str, what: str) -> None:
        if what in self.crash_on and node == self.active and not self.healed:
            del self.crash_on[what]
            self.sim.at(self.sim.now, self.crash, node)

    # ---- faults --------------------------------------------------------------------------------

    def current_master(self) -> str:
        """The server the workers use (or the first master, or the first server)."""
        for name in self.rcc:
            server = self.sim.nodes[name].disk.get("master_file")
            if server:
                return server
        masters = self.redis.masters()
        return masters[0] if masters else SERVERS[0]

    def apply(self, op: Op) -> None:
        sim, redis, a = self.sim, self.redis, op.args
        act = op.action
        if act == "kill_master":
            redis.kill(self.current_master())
        elif act == "hang_master":  # SIGSTOP: no answer, no connection closed
            redis.hang(self.current_master())
        elif act == "kill":
            redis.kill(a[0])
        elif act == "revive_all":
            for s in redis.servers:
                redis.revive(s)
        elif act == "cut_master":  # a host and the current master
            node = self.active if a[0] == "active" else a[0]
            if node is not None:
                server = self.current_master()
                redis.cut(node, server)
                sim.at(sim.now + a[1], redis.heal, node, server)
        elif act == "reject_master":  # the current master refuses one host's connections
            node = self.active if a[0] == "active" else a[0]
            if node is not None:
                server = self.current_master()
                redis.reject(node, server)
                sim.at(sim.now + a[1], redis.heal, node, server)
        elif act == "cut_server":  # a host and a given server
            node = self.active if a[0] == "active" else a[0]
            if node is not None:
                redis.cut(node, a[1])
                sim.at(sim.now + a[2], redis.heal, node, a[1])
        elif act == "bus_cut":
            node = self.active if a[0] == "active" else a[0]
            if node is not None:
                self.bus.cut(node)
                sim.at(sim.now + a[1], self.bus.restore, node)
        elif act == "crash":
            node = self.active if a[0] == "active" else a[0]
            if node is not None and sim.nodes[node].alive:
                self.crash(node)
                sim.at(sim.now + a[1], self._boot, node)
        elif act == "handover":
            self.handover(gap=a[0])
        elif act == "overlap":
            self.overlap(a[0])
        elif act == "crash_on":
            self.crash_on[a[0]] = "crash"
        sim.record(None, "op", str(op))

    def _boot(self, name: str) -> None:
        if not self.sim.nodes[name].alive and not self.healed:
            self.sim.boot(name)

    def heal(self) -> None:
        sim = self.sim
        self.healed = True
        self.crash_on.clear()
        self.redis.heal_all()
        for name in (*self.rcs, *self.rcc):
            self.bus.restore(name)
            if not sim.nodes[name].alive:
                sim.boot(name)
        for name in self.rcs:
            host = self.kind.host(sim, name)
            if name != self.active and host is not None and host.core.active:
                self.depose(name)
        if self.active is None or not sim.nodes[self.active].alive:
            self.elect()

    # ---- running -------------------------------------------------------------------------------

    def boot(self) -> None:
        self.redis.start(self.rcc)
        self.sim.boot(*self.rcs, *self.rcc)
        self.sim.at(0.01, self.elect, self.rcs[0])

    def report(self, v: Exception, schedule: FailoverSchedule | None = None) -> str:
        lines = [f"FAILED {v}"]
        if schedule is not None:
            lines.append(schedule.describe())
            lines.append(
                f'replay: python -c "from tests.sim.failover import *; '
                f'run_seed({schedule.seed}, {len(schedule.rcs)}, {len(schedule.rcc)}, trace=True)"'
            )
        lines += ["last 80 trace entries:", self.sim.format_trace(80)]
        return "\n".join(lines)


def prepare(s: FailoverSchedule, **options: Any) -> FailoverRun:
    """A booted run with the schedule's operations queued (run it with `sim.run_until`)."""
    run = FailoverRun(s.seed, s.rcs, s.rcc, **options)
    run.boot()
    for op in sorted(s.ops, key=lambda o: o.at):
        run.sim.at(op.at, run.apply, op)
    run.sim.at(s.heal_at, run.heal)
    return run


def run_schedule(s: FailoverSchedule, **options: Any) -> FailoverRun:
    run = prepare(s, **options)
    run.sim.run_until(s.end)
    return run


def check(run: FailoverRun) -> None:
    why = run.checker.converged(run.active)
    if why is not None:
        raise FailoverViolation("converged", why, run.sim.now)


# ==================================================================== schedules

KINDS = (
    "kill_master",
    "kill_master",
    "kill_replica",
    "rcs_cut_master",
    "rcc_cut_master",
    "rcc_bus_cut",
    "rcs_bus_cut",
    "rcs_crash",
    "handover",
    "overlap",
    "crash_mid_switch",
    "rcc_crash",
    "rcs_isolated",
    "overlap_outage",
)
# Kinds added later (issue 20.1): drawn only when asked, so that the seeds above keep naming
# the schedules they always named (the mutation tests below rely on particular seeds).
LATER_KINDS = ("hang_master", "rcs_reject_master")


def generate(
    seed: int, n_rcs: int = 2, n_rcc: int = 3, kinds: tuple[str, ...] = KINDS
) -> FailoverSchedule:
    """The schedule named by (seed, n_rcs, n_rcc): 1 to 4 faults starting in [3, 20) s, each
    0.2 to 8 s long; everything heals 0.5 s after the last one ends; then SETTLE s."""
    rng = random.Random(f"rabbitry-failover/{seed}/{n_rcs}/{n_rcc}")
    rcs, rcc = nodes_for(n_rcs, n_rcc)
    ops: list[Op] = []
    fault_end = 3.0
    for _ in range(rng.randint(1, 4)):
        t0 = round(rng.uniform(3.0, 20.0), 3)
        dur = round(rng.choice((rng.uniform(0.2, 2.0), rng.uniform(2.0, 8.0))), 3)
        kind = rng.choice(kinds)
        if kind in ("kill_master", "hang_master"):
            ops += [Op(t0, kind), Op(round(t0 + dur, 3), "revive_all")]
        elif kind == "kill_replica":
            ops += [
                Op(t0, "kill", (rng.choice(SERVERS[1:]),)),
                Op(round(t0 + dur, 3), "revive_all"),
            ]
        elif kind == "rcs_cut_master":
            ops.append(Op(t0, "cut_master", ("active", dur)))
        elif kind == "rcs_reject_master":
            ops.append(Op(t0, "reject_master", ("active", dur)))
        elif kind == "rcc_cut_master":
            ops.append(Op(t0, "cut_master", (rng.choice(rcc), dur)))
        elif kind == "rcc_bus_cut":
            ops.append(Op(t0, "bus_cut", (rng.choice(rcc), dur)))
        elif kind == "rcs_bus_cut":
            ops.append(Op(t0, "bus_cut", ("active", dur)))
        elif kind == "rcs_crash":
            ops.append(Op(t0, "crash", ("active", dur)))
        elif kind == "handover":
            ops.append(Op(t0, "handover", (round(rng.uniform(0.0, 0.5), 3),)))
            dur = 0.5
        elif kind == "overlap":
            ops.append(Op(t0, "overlap", (round(rng.uniform(0.1, 2.0), 3),)))
        elif kind == "crash_mid_switch":
            what = rng.choice(("ping", "invalidate", "promote"))
            ops += [Op(t0, "crash_on", (what,)), Op(round(t0 + 0.001, 3), "kill_master")]
            ops.append(Op(round(t0 + dur + 6.0, 3), "revive_all"))
            dur += 6.0
        elif kind == "rcs_isolated":
            # the active RCS loses the broker; gossip (on the same broker) elects another one
            # at once, and the old one hears of it only when its bus comes back; meanwhile the
            # master dies and returns (the deposed RCS still reaches Redis)
            dur = round(rng.uniform(6.0, 12.0), 3)
            ops += [
                Op(t0, "bus_cut", ("active", dur)),
                Op(round(t0 + 0.001, 3), "overlap", (dur,)),
                Op(round(t0 + 0.5, 3), "kill_master"),
                Op(round(t0 + rng.uniform(5.0, dur - 0.5), 3), "revive_all"),
            ]
        elif kind == "overlap_outage":
            # a new RCS is elected while the master is down and the old one still believes it
            # is active (for up to 3 s): both may run rounds; the old one cannot reach one
            # replica, so left alone it would choose another than the new one
            ops += [
                Op(t0, "cut_server", ("active", rng.choice(SERVERS[1:]), dur + 4.0)),
                Op(t0, "kill_master"),
                Op(
                    round(t0 + rng.uniform(1.0, 4.0), 3),
                    "overlap",
                    (round(rng.uniform(0.5, 3.0), 3),),
                ),
                Op(round(t0 + dur + 4.0, 3), "revive_all"),
            ]
            dur += 4.0
        else:  # rcc_crash
            ops.append(Op(t0, "crash", (rng.choice(rcc), dur)))
        fault_end = max(fault_end, t0 + dur)
    heal_at = round(fault_end + 0.5, 3)
    return FailoverSchedule(seed, rcs, rcc, ops, heal_at, round(heal_at + SETTLE, 3))


def run_seed(seed: int, n_rcs: int = 2, n_rcc: int = 3, *, trace: bool = False) -> FailoverRun:
    s = generate(seed, n_rcs, n_rcc)
    run = prepare(s)
    try:
        run.sim.run_until(s.end)
        check(run)
    except FailoverViolation as v:
        if trace:
            print(run.report(v, s))
        raise
    return run


@dataclass
class Scene:
    """A hand-written run for the scene tests: boot, then drive `run` directly."""

    run: FailoverRun
    marks: dict[str, float] = field(default_factory=dict)

    @staticmethod
    def make(seed: int = 1, n_rcs: int = 2, n_rcc: int = 3, **options: Any) -> Scene:
        rcs, rcc = nodes_for(n_rcs, n_rcc)
        run = FailoverRun(seed, rcs, rcc, **options)
        run.boot()
        return Scene(run)

    def until(self, t: float) -> Scene:
        self.run.sim.run_until(t)
        return self

    def files(self) -> dict[str, str | None]:
        return {n: self.run.sim.nodes[n].disk.get("master_file") for n in self.run.rcc}

    def rcs(self, name: str | None = None) -> ConfigurationServerCore:
        host = self.run.kind.host(self.run.sim, name or self.run.active or "")
        assert host is not None
        return host.core
