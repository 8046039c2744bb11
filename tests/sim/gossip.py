"""Hosting GossipCore (mingle, gossip, elections) in the simulator, over the simulated bus.

- `GossipKind` is the CoreKind: one GossipCore per node, registered as "gossip", with pid =
  the node's creation (a restart is a new member, as a new OS process is). Its Publish and
  Direct effects go to tests/sim/bus.py; the application-facing effects are recorded.
- Each node has a wall clock: EPOCH + virtual time + a per-node skew (up to `skew` s, kept
  across restarts), so the cores see hosts whose clocks disagree, as real ones do.
- `GossipSchedule` / `generate` / `run_schedule` are the randomized runs of
  test_gossip_sim.py: simultaneous starts, crashes and restarts, broker cuts, pauses,
  concurrent elections and revokes, then a stable period; `check` states the invariants.

Nothing here reads a clock: a run is a function of its seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from monitors.gossip import wire
from monitors.gossip.gossip_core import GossipCore
from tests.sim.bus import BusMsg, SimBus
from tests.sim.engine import EffectHandler, NetConfig, Sim, SimNode

EPOCH = 1_700_000_000.0
NAME = "gossip"
APP_EFFECTS = (
    "NodeJoined",
    "NodeLeft",
    "NodeLost",
    "RunElection",
    "ElectionDecided",
    "ElectionFailed",
    "MingleDone",
    "Revoked",
)


class GossipSimNode:
    """What the engine hosts: the core plus the node's wall clock (virtual time + skew)."""

    def __init__(self, core: GossipCore, skew: float) -> None:
        self.core = core
        self.skew = skew

    def wall(self, now: float) -> float:
        return EPOCH + now + self.skew

    def start(self, now: float) -> list[Any]:
        return self.core.start(self.wall(now))

    def timer(self, key: str, now: float, data: Any = None) -> list[Any]:
        return self.core.timer(key, self.wall(now), data)


@dataclass
class Event:
    """An application-facing effect, or a call we made, as it happened."""

    t: float
    node: str
    pid: int
    what: str
    eff: Any = None
    paused: bool = False


class GossipKind:
    """A CoreKind hosting GossipCore on every node; see the module docstring."""

    name = NAME

    def __init__(
        self, bus: SimBus, *, skew: float = 0.3, clients: tuple[str, ...] = (), **options: Any
    ) -> None:
        self.bus = bus
        self.skew = skew
        self.clients = frozenset(clients)  # gossip clients (executors): issue 26
        for name in clients:
            bus.patterns[name] = wire.CLIENT_PATTERNS
        self.options = options
        self.events: list[Event] = []
        # (mingler, pid, round) -> {peer: the peer's clock right after it handled the hello}
        self.hello_clocks: dict[tuple[str, int, int], dict[str, int]] = {}
        self.paused_results: list[tuple[float, str, str]] = []  # (t, node, id) announced paused
        self.lives: list[list[Any]] = []  # [node, creation (pid), booted at, crashed at]
        # (node, pid, id) -> the lowest candidate proposal key it has heard of (or made)
        self.heard: dict[tuple[str, int, str], tuple[int, str]] = {}
        self.adopted: set[tuple[str, int, str]] = set()  # (node, pid, id) with a result
        # (t, node, pid, id, winner key, lowest candidate key heard of by then)
        self.decisions: list[tuple[Any, ...]] = []
        # (mingler, pid, round) -> when its hello went out
        self.mingle_starts: dict[tuple[str, int, int], float] = {}
        # (mingler, pid, round) -> peers whose reply (header) it has handled
        self.replies: dict[tuple[str, int, int], set[str]] = {}
        # (election id, hostname, pid, clock) -> (candidate flag, paused when published)
        self.proposals: dict[tuple[str, str, int, int], tuple[bool, bool]] = {}
        bus.register(NAME, self._deliver, self._bus_state)

    # ---- CoreKind ------------------------------------------------------------------------------

    def build(self, sim: Sim, node: SimNode) -> GossipSimNode:
        skew = node.disk.setdefault("skew", sim.rng.uniform(-self.skew, self.skew))
        connected = self.bus.node_booted(node)
        self.end_life(node.name, sim.now)
        self.lives.append([node.name, node.creation, sim.now, float("inf")])
        client = node.name in self.clients
        core = GossipCore(
            node.name, node.creation, connected=connected, client=client, **self.options
        )
        node.state["paused"] = False
        return GossipSimNode(core, skew)

    def handlers(self) -> dict[str, EffectHandler]:
        out = dict(self.bus.handlers())
        publish = out["Publish"]

        def on_publish(sim: Sim, node: SimNode, cname: str, eff: Any) -> None:
            if eff.routing_key == wire.HELLO:
                b = eff.body
                self.mingle_starts[(b["hostname"], b["pid"], b["round"])] = sim.now
            if eff.routing_key == wire.ELECT_RESULT:
                b = eff.body
                if node.state.get("paused"):
                    self.paused_results.append((sim.now, node.name, b["id"]))
                k = (node.name, node.creation, b["id"])
                if k not in self.adopted:  # a decision (a re-announcement follows an adoption)
                    key = (b["winner_clock"], wire.member_id(b["winner"], b["winner_pid"]))
                    self.decisions.append((sim.now, *k, key, self.heard.get(k)))
            if eff.routing_key == wire.ELECT:
                b = eff.body
                self._heard(node, b)
                key = (b["id"], b["hostname"], b["pid"], b["clock"])
                self.proposals.setdefault(key, (b["candidate"], node.state.get("paused", False)))
            publish(sim, node, cname, eff)

        out["Publish"] = on_publish
        for name in APP_EFFECTS:
            out[name] = self._record
        return out

    # ---- driving -------------------------------------------------------------------------------

    def core(self, sim: Sim, name: str) -> GossipCore | None:
        node = sim.nodes[name]
        host = node.cores.get(NAME) if node.alive else None
        return host.core if host is not None else None

    def call(self, sim: Sim, name: str, method: str, *args: Any) -> None:
        """Call `core.method(*args, now)` on node `name` now (held while frozen, skipped if
        the node is down), recording the call."""
        node = sim.nodes[name]
        if not node.alive:
            return
        sim.post(node, 0.0, self._call, sim, node, method, args)

    def _call(self, sim: Sim, node: SimNode, method: str, args: tuple[Any, ...]) -> None:
        host: GossipSimNode = node.cores[NAME]
        if method == "set_paused":
            node.state["paused"] = bool(args[0])
        self.events.append(
            Event(sim.now, node.name, node.creation, "call:" + method, args, self._paused(node))
        )
        effects = getattr(host.core, method)(*args, host.wall(sim.now))
        sim.call(node, NAME, method, args, effects)

    def _paused(self, node: SimNode) -> bool:
        return bool(node.state.get("paused", False))

    def _record(self, sim: Sim, node: SimNode, cname: str, eff: Any) -> None:
        what = type(eff).__name__
        self.events.append(Event(sim.now, node.name, node.creation, what, eff, self._paused(node)))
        sim.record(node, what, eff)
        if what == "ElectionDecided":
            self.adopted.add((node.name, node.creation, eff.election_id))
        if what == "MingleDone":
            host: GossipSimNode = node.cores[NAME]
            rnd = host.core.mingle.finished_round
            replied = set(self.replies.get((node.name, node.creation, rnd), ()))
            node.state.setdefault("mingles", []).append(
                (sim.now, eff, rnd, host.core.clock.value, replied)
            )

    def _deliver(self, sim: Sim, node: SimNode, cname: str, msg: BusMsg) -> None:
        host: GossipSimNode = node.cores[cname]
        rk, body = msg.routing_key, msg.body
        if rk == wire.ELECT:
            self._heard(node, body)
        effects = host.core.receive(rk, body, host.wall(sim.now), sender=msg.sender)
        if rk == wire.HELLO and isinstance(body, dict) and body.get("hostname") != node.name:
            key = (body["hostname"], body["pid"], body["round"])
            self.hello_clocks.setdefault(key, {})[node.name] = host.core.clock.value
        if rk == wire.REPLY and isinstance(body, dict) and "round" in body:
            key = (node.name, node.creation, body["round"])
            self.replies.setdefault(key, set()).add(msg.sender)
        sim.call(node, cname, "bus", (rk, msg.sender), effects)

    def _bus_state(self, sim: Sim, node: SimNode, cname: str, up: bool) -> None:
        host: GossipSimNode = node.cores[cname]
        now = host.wall(sim.now)
        effects = host.core.bus_up(now) if up else host.core.bus_down(now)
        sim.call(node, cname, "bus_up" if up else "bus_down", None, effects)

    def _heard(self, node: SimNode, body: Any) -> None:
        # a client's own proposal is no candidacy (its proxy's proposal is: election_core.py)
        if body.get("client") if isinstance(body, dict) else False:
            return
        if isinstance(body, dict) and body.get("candidate") is True and "id" in body:
            k = (node.name, node.creation, body["id"])
            key = (body["clock"], wire.member_id(body["hostname"], body["pid"]))
            if k not in self.heard or key < self.heard[k]:
                self.heard[k] = key

    def end_life(self, name: str, t: float) -> None:
        for life in self.lives:
            if life[0] == name and life[3] == float("inf"):
                life[3] = t

    def alive_at(self, name: str, pid: int, t: float) -> bool:
        """Whether `name` ran as `pid` at virtual time t."""
        return any(n == name and p == pid and a <= t < b for n, p, a, b in self.lives)

    def of(self, what: str) -> list[Event]:
        return [e for e in self.events if e.what == what]


def make_sim(
    seed: int,
    names: list[str] | tuple[str, ...],
    *,
    trace_len: int | None = 400,
    bus_options: dict[str, Any] | None = None,
    **options: Any,
) -> tuple[Sim, SimBus, GossipKind]:
    """A Sim with a bus and the gossip kind on `names` (not booted yet)."""
    sim = Sim(seed, NetConfig(), trace_len=trace_len)
    bus = SimBus(sim, **(bus_options or {}))
    kind = GossipKind(bus, **options)
    sim.add_kind(kind)
    for name in names:
        sim.add_node(name)
    return sim, bus, kind


# ==================================================================== randomized schedules

HB = 2.0  # heartbeat interval (the default)
MINGLE_TIMEOUT = 1.0  # the default
INTERVAL = 5.0  # lost check interval (the default)
LOST_BOUND = INTERVAL + 2 * HB + 0.1  # crash -> NodeLost on every connected peer
ELECTION_DEADLINE = 15.0  # retry 3 s x 5 attempts (the defaults)
SETTLE = LOST_BOUND + 2.0  # after the heal: dead members detected, cut ones re-mingled
STABLE_DECIDE = 1.0  # an election asked once everything has settled is decided within this
RECOVERY = 1.6  # after a boot or a restore: reconnect (<= 0.5 s) and mingle (<= 1 s)


@dataclass(frozen=True)
class Op:
    at: float
    action: str  # crash | boot | cut | restore | pause | resume | elect | revoke
    args: tuple[Any, ...] = ()

    def __str__(self) -> str:
        return f"{self.at:8.3f} {self.action} {' '.join(map(str, self.args))}"


@dataclass
class GossipSchedule:
    seed: int
    nodes: tuple[str, ...]
    ops: list[Op]
    heal_at: float
    end: float
    stable_elections: list[str] = field(default_factory=list)
    mode: str = "faults"
    latency: tuple[float, float] = (0.001, 0.010)  # bus delivery, per message
    clients: tuple[str, ...] = ()  # of `nodes`, the gossip clients (executors)

    def describe(self) -> str:
        head = (
            f"gossip seed={self.seed} nodes={len(self.nodes)} mode={self.mode} "
            f"clients={len(self.clients)} heal_at={self.heal_at:.3f}"
        )
        return "\n".join([head, *(f"  {op}" for op in sorted(self.ops, key=lambda o: o.at))])


MODES = ("faults", "storm", "clients")


def generate(seed: int, n: int, mode: str = "faults") -> GossipSchedule:
    """The schedule named by (seed, n, mode).

    "faults": crashes, simultaneous restarts, broker cuts and pauses in [2, 20); elections and
    revokes throughout; everything healed at heal_at; then SETTLE s; then elections that must
    be decided at once. "storm": no crash or cut, a few pauses, 25 elections each asked by
    most nodes within 5 ms, and a slow, jittery bus (1 to 60 ms): concurrent proposers."""
    if mode == "storm":
        return _storm(seed, n)
    if mode == "clients":
        return _with_clients(seed, n)
    rng = random.Random(f"rabbitry-gossip/{seed}/{n}")
    nodes = tuple(f"n{i}@sim" for i in range(1, n + 1))
    ops: list[Op] = []
    fault_end = 2.0
    for _ in range(rng.randint(1, 5)):
        t0 = round(rng.uniform(2.0, 20.0), 3)
        kind = rng.choice(("crash", "crash", "cut", "cut", "pause", "restart2"))
        dur = round(rng.choice((rng.uniform(0.05, 1.5), rng.uniform(1.5, 12.0))), 3)
        x = rng.choice(nodes)
        if kind == "crash":
            ops += [Op(t0, "crash", (x,)), Op(round(t0 + dur, 3), "boot", (x,))]
        elif kind == "restart2":
            a, b = rng.sample(nodes, 2)
            ops += [Op(t0, "crash", (a,)), Op(t0, "crash", (b,)), Op(t0 + 0.2, "boot", (a, b))]
            dur = 0.2
        elif kind == "cut":
            ops += [Op(t0, "cut", (x,)), Op(round(t0 + dur, 3), "restore", (x,))]
        else:
            ops += [Op(t0, "pause", (x,)), Op(round(t0 + dur, 3), "resume", (x,))]
        fault_end = max(fault_end, t0 + dur)
    heal_at = round(fault_end + 0.5, 3)
    eid = 0
    for _ in range(rng.randint(3, 8)):
        t = round(rng.uniform(1.5, heal_at + 5.0), 3)
        callers = rng.sample(nodes, rng.randint(1, n))
        eid += 1
        for c in callers:
            ops.append(Op(round(t + rng.uniform(0.0, 0.03), 4), "elect", (f"e{eid}", c)))
    stable = []
    for k in range(2):
        t = round(heal_at + SETTLE + 1.0 + 3.0 * k + rng.uniform(0, 1), 3)
        eid += 1
        stable.append(f"e{eid}")
        for c in rng.sample(nodes, rng.randint(1, n)):
            ops.append(Op(round(t + rng.uniform(0.0, 0.03), 4), "elect", (f"e{eid}", c)))
    rid = 0
    for _ in range(rng.randint(4, 12)):
        t = round(rng.uniform(0.5, heal_at + 4.0), 3)
        ids = []
        for _ in range(rng.randint(1, 3)):
            rid += 1
            ids.append(f"t{seed}-{rid}")
        ops.append(Op(t, "revoke", (rng.choice(nodes), *ids)))
    end = round(heal_at + SETTLE + 12.0, 3)
    return GossipSchedule(seed, nodes, ops, heal_at, end, stable)


def _storm(seed: int, n: int) -> GossipSchedule:
    rng = random.Random(f"rabbitry-gossip-storm/{seed}/{n}")
    nodes = tuple(f"n{i}@sim" for i in range(1, n + 1))
    ops: list[Op] = []
    for _ in range(rng.randint(0, 2)):
        t0 = round(rng.uniform(2.0, 25.0), 3)
        x = rng.choice(nodes)
        ops += [Op(t0, "pause", (x,)), Op(round(t0 + rng.uniform(0.1, 6.0), 3), "resume", (x,))]
    for k in range(1, 26):
        t = round(rng.uniform(1.5, 30.0), 3)
        for c in rng.sample(nodes, rng.randint(max(1, n - 1), n)):
            ops.append(Op(round(t + rng.uniform(0.0, 0.005), 4), "elect", (f"e{k}", c)))
    heal_at = 31.0
    return GossipSchedule(seed, nodes, ops, heal_at, heal_at + 16.0, [], "storm", (0.001, 0.060))


def _with_clients(seed: int, n: int) -> GossipSchedule:
    """n core members and 2n to 8n clients (executors, issue 26): the "faults" schedule of
    the core members, the same kinds of faults on a few clients, and elections and revokes
    asked by core members and clients alike."""
    rng = random.Random(f"rabbitry-gossip-clients/{seed}/{n}")
    base = generate(seed, n, "faults")
    clients = tuple(f"x{i}@sim" for i in range(1, rng.randint(2 * n, 8 * n) + 1))
    ops = list(base.ops)
    fault_end = base.heal_at - 0.5
    for _ in range(rng.randint(1, 4)):
        t0 = round(rng.uniform(2.0, 20.0), 3)
        kind = rng.choice(("crash", "cut", "pause"))
        dur = round(rng.uniform(0.05, 8.0), 3)
        x = rng.choice(clients)
        undo = {"crash": "boot", "cut": "restore", "pause": "resume"}[kind]
        ops += [Op(t0, kind, (x,)), Op(round(t0 + dur, 3), undo, (x,))]
        fault_end = max(fault_end, t0 + dur)
    heal_at = round(max(fault_end + 0.5, base.heal_at), 3)
    everyone = (*base.nodes, *clients)
    # elections: the base's ids, now asked by clients too; the stable ones after the heal
    ops = [op for op in ops if op.action != "elect"]
    eid = 0
    for _ in range(rng.randint(3, 8)):
        t = round(rng.uniform(1.5, heal_at + 5.0), 3)
        eid += 1
        for c in rng.sample(everyone, rng.randint(1, min(len(everyone), 2 * n))):
            ops.append(Op(round(t + rng.uniform(0.0, 0.03), 4), "elect", (f"e{eid}", c)))
    stable = []
    for k in range(2):
        t = round(heal_at + SETTLE + 1.0 + 3.0 * k + rng.uniform(0, 1), 3)
        eid += 1
        stable.append(f"e{eid}")
        askers = rng.sample(clients, rng.randint(1, 3))
        if rng.random() < 0.5:
            askers.append(rng.choice(base.nodes))
        for c in askers:
            ops.append(Op(round(t + rng.uniform(0.0, 0.03), 4), "elect", (f"e{eid}", c)))
    for k in range(rng.randint(1, 4)):
        t = round(rng.uniform(0.5, heal_at + 4.0), 3)
        ops.append(Op(t, "revoke", (rng.choice(clients), f"c{seed}-{k}")))
    end = round(heal_at + SETTLE + 12.0, 3)
    return GossipSchedule(
        seed, everyone, ops, heal_at, end, stable, "clients", base.latency, clients
    )


class GossipViolation(AssertionError):
    def __init__(self, invariant: str, message: str) -> None:
        super().__init__(f"[{invariant}] {message}")
        self.invariant = invariant


@dataclass
class GossipRun:
    schedule: GossipSchedule
    sim: Sim
    bus: SimBus
    kind: GossipKind
    crashes: list[tuple[float, str]] = field(default_factory=list)
    faults: list[tuple[float, str]] = field(default_factory=list)  # (t, node) crash/boot/cut/...
    # node -> [start, end] spans in which it was down or cut off (end: recovery + margin)
    unsteady: dict[str, list[list[float]]] = field(default_factory=dict)

    def open_span(self, name: str) -> None:
        spans = self.unsteady.setdefault(name, [])
        if not spans or spans[-1][1] != float("inf"):
            spans.append([self.sim.now, float("inf")])

    def close_span(self, name: str, margin: float = RECOVERY) -> None:
        spans = self.unsteady.get(name)
        if spans and spans[-1][1] == float("inf"):
            spans[-1][1] = self.sim.now + margin

    def report(self, v: Exception) -> str:
        s = self.schedule
        return "\n".join(
            [
                f"FAILED {v}",
                s.describe(),
                "last 60 trace entries:",
                self.sim.format_trace(60),
                f'replay: python -c "from tests.sim.gossip import *; '
                f"run_seed({s.seed}, {len(s.nodes) - len(s.clients)}, {s.mode!r}, "
                f'trace=True)"',
            ]
        )


def _apply(run: GossipRun, op: Op) -> None:
    sim, bus, kind = run.sim, run.bus, run.kind
    a = op.args
    if op.action == "crash":
        if sim.nodes[a[0]].alive:
            run.crashes.append((sim.now, a[0]))
        run.faults.append((sim.now, a[0]))
        run.open_span(a[0])
        kind.end_life(a[0], sim.now)
        sim.crash(a[0])
    elif op.action == "boot":
        names = [x for x in a if not sim.nodes[x].alive]
        for x in names:
            run.faults.append((sim.now, x))
            if x not in bus.cut_nodes:
                run.close_span(x)
        if names:
            sim.boot(*names)
    elif op.action == "cut":
        run.faults.append((sim.now, a[0]))
        run.open_span(a[0])
        bus.cut(a[0])
    elif op.action == "restore":
        run.faults.append((sim.now, a[0]))
        if sim.nodes[a[0]].alive:
            run.close_span(a[0])
        bus.restore(a[0])
    elif op.action in ("pause", "resume"):
        kind.call(sim, a[0], "set_paused", op.action == "pause")
    elif op.action == "elect":
        kind.call(sim, a[1], "election", a[0], "task", {"id": a[0]})
    elif op.action == "revoke":
        kind.call(sim, a[0], "revoke", list(a[1:]))


def run_schedule(s: GossipSchedule, **options: Any) -> GossipRun:
    options.setdefault("bus_options", {"latency": s.latency})
    options.setdefault("clients", s.clients)
    sim, bus, kind = make_sim(s.seed, s.nodes, **options)
    run = GossipRun(s, sim, bus, kind)
    sim.boot(*s.nodes)
    for op in sorted(s.ops, key=lambda o: o.at):
        sim.at(op.at, _apply, run, op)
    heal = s.heal_at

    def heal_all() -> None:
        for name in s.nodes:
            if name in bus.cut_nodes or not sim.nodes[name].alive:
                run.faults.append((sim.now, name))
                run.close_span(name)
            bus.restore(name)
            if not sim.nodes[name].alive:
                sim.boot(name)
            kind.call(sim, name, "set_paused", False)

    sim.at(heal, heal_all)
    sim.run_until(s.end)
    return run


def check(run: GossipRun) -> None:
    """Every invariant of the gossip sim (raises GossipViolation)."""
    s, sim, kind = run.schedule, run.sim, run.kind
    ev = kind.events

    # 1. one winner per election everywhere, and one run, for as long as the result is
    #    remembered: a decision for another winner is an error while any node that learnt the
    #    earlier one still lives. (Results live in memory: once every node that knew one has
    #    restarted, an asker that never heard of it decides afresh; docs/gossip.md, Gaps.)
    #    A paused node never runs one.
    learnt: dict[str, dict[str, set[tuple[str, int]]]] = {}  # id -> winner -> holders
    mine: dict[tuple[str, int, str], str] = {}  # (node, pid, id) -> the winner it adopted
    runs: dict[str, list[Event]] = {}
    for e in ev:
        if e.what == "ElectionDecided":
            eid, w = e.eff.election_id, e.eff.winner
            results = learnt.setdefault(eid, {})
            for other, holders in results.items():
                if other != w and any(kind.alive_at(n, p, e.t) for n, p in holders):
                    raise GossipViolation(
                        "agreement",
                        f"election {eid}: {e.node} decided {w} at {e.t:.3f}, "
                        f"{sorted(holders)} hold {other}",
                    )
            results.setdefault(w, set()).add((e.node, e.pid))
            mine[(e.node, e.pid, eid)] = w
        elif e.what == "RunElection":
            eid = e.eff.election_id
            if e.paused:
                raise GossipViolation("paused_never_wins", f"{e.node} ran {e.eff} while paused")
            if mine.get((e.node, e.pid, eid)) != e.node:
                raise GossipViolation("agreement", f"{e.node} ran {e.eff} but is not the winner")
            for prev in runs.get(eid, []):
                holders = learnt[eid].get(prev.node, set())
                if any(kind.alive_at(n, p, e.t) for n, p in holders):
                    raise GossipViolation("once", f"election {eid} ran by {prev} and {e}")
            runs.setdefault(eid, []).append(e)
    winners = {eid: set(results) for eid, results in learnt.items()}
    # 1b. a decider picks the lowest candidate it has heard of (a candidacy stands, even for
    #     a node since lost: dropping it let a late decider run the action a second time)
    for t, name, _pid, eid, key, low in kind.decisions:
        if low is not None and key > low:
            raise GossipViolation(
                "decides_lowest", f"{name} decided {eid} for {key} at {t:.3f}; it heard {low}"
            )
    for key, (candidate, paused) in kind.proposals.items():
        if candidate and paused:
            raise GossipViolation("paused_never_wins", f"paused node stood: {key}")
    for t, name, eid in kind.paused_results:
        raise GossipViolation("paused_never_decides", f"{name} announced {eid} at {t:.3f}")

    # 2. every election asked completes by its deadline (decided or failed, on the asker if
    #    it lived on); the ones asked after everything settled are decided within 1 s
    outcomes: dict[tuple[str, int, str], float] = {}
    decided_at: dict[tuple[str, int, str], float] = {}
    for e in ev:
        if e.what in ("ElectionDecided", "ElectionFailed"):
            key = (e.node, e.pid, e.eff.election_id)
            outcomes.setdefault(key, e.t)
            if e.what == "ElectionDecided":
                decided_at.setdefault(key, e.t)
    for e in ev:
        if e.what != "call:election":
            continue
        eid = e.eff[0]
        node = sim.nodes[e.node]
        if not (node.alive and node.creation == e.pid):
            continue  # the asker died: nobody waits any more
        done = outcomes.get((e.node, e.pid, eid))
        if eid in s.stable_elections:
            at = decided_at.get((e.node, e.pid, eid))
            if at is None or at - e.t > STABLE_DECIDE:
                raise GossipViolation(
                    "stable_election", f"{eid} asked by {e.node} at {e.t:.3f}: decided at {at}"
                )
        elif done is None or done - e.t > ELECTION_DEADLINE + 0.1:
            raise GossipViolation(
                "completion", f"{eid} asked by {e.node} at {e.t:.3f}: outcome at {done}"
            )
    # 2b. an unpaused asker that kept its bus and life decides (a dead or cut participant is
    #     noticed lost and no longer waited for): decided by its deadline, never failed
    core_nodes = [n for n in s.nodes if n not in s.clients]
    for e in ev:
        if e.what != "call:election" or e.t < 1.5:
            continue
        t1 = e.t + ELECTION_DEADLINE
        if t1 > s.end or not _steady(run, e.node, e.t, t1) or _paused_during(kind, e.node, e.t, t1):
            continue
        if e.node in s.clients and not all(
            _steady(run, c, e.t - RECOVERY, t1) and not _paused_during(kind, c, e.t, t1)
            for c in core_nodes
        ):
            continue  # a client's election is decided by the core: it needs it steady
        at = decided_at.get((e.node, e.pid, e.eff[0]))
        if at is None or at > t1:
            raise GossipViolation(
                "steady_decides", f"{e.eff[0]} asked by {e.node} at {e.t:.3f}: decided at {at}"
            )
    for eid in s.stable_elections:
        if eid not in winners:
            raise GossipViolation("stable_election", f"{eid} was never decided")
        askers = {e.node for e in ev if e.what == "call:election" and e.eff[0] == eid}
        # clients hear results they asked for (a storm's deciders may not broadcast one)
        live = [n for n in s.nodes if sim.nodes[n].alive and (n not in s.clients or n in askers)]
        got = {e.node for e in ev if e.what == "ElectionDecided" and e.eff.election_id == eid}
        if set(live) - got:
            raise GossipViolation("everyone_learns", f"{eid}: no result on {set(live) - got}")
        if len(runs.get(eid, [])) != 1:
            raise GossipViolation("once", f"{eid}: ran {len(runs.get(eid, []))} times")

    # 3. simultaneous start: the first mingle of every node names all the others
    first: dict[str, Any] = {}
    for e in ev:
        if e.what == "MingleDone" and e.t < 1.5:
            first.setdefault(e.node, e.eff)
    early = min((op.at for op in s.ops if op.action in ("crash", "cut")), default=99.0)
    if early > 1.5:
        for name in s.nodes:
            want = tuple(sorted(set(core_nodes) - {name}))
            got = first.get(name)
            if name in s.clients:  # synced with exactly one core member (or every one)
                if got is None or not got.synced_with or not set(got.synced_with) <= set(want):
                    raise GossipViolation("client_start", f"{name}: {got}, wanted one of {want}")
                continue
            if got is None or got.synced_with != want:
                raise GossipViolation("simultaneous_start", f"{name}: {got}, wanted {want}")

    # 4. mingle: the clock after a mingle is above every replier's clock at our hello, and a
    #    mingle that ended before its timeout heard a reply from every node it synced with
    for name in s.nodes:
        node = sim.nodes[name]
        for t, eff, rnd, clock, replied in node.state.get("mingles", []):
            started = kind.mingle_starts.get((name, node.creation, rnd), t)
            if t - started < MINGLE_TIMEOUT - 1e-6 and not set(eff.synced_with) <= replied:
                raise GossipViolation(
                    "mingle_early", f"{name} round {rnd} ended early without replies: {eff}"
                )
            seen = kind.hello_clocks.get((name, node.creation, rnd), {})
            for peer in sorted(replied & set(eff.synced_with)):
                if peer in seen and not clock > seen[peer]:
                    raise GossipViolation(
                        "mingle_clock",
                        f"{name} round {rnd}: clock {clock} <= {peer}'s {seen[peer]}",
                    )

    # 5. lost detection within interval + heartbeat window, on every peer connected meanwhile
    for tc, x in run.crashes:
        for y in core_nodes:  # clients hear no heartbeats
            if y == x or not _steady(run, y, tc - 2 * HB, tc + LOST_BOUND):
                continue
            lost = [
                e
                for e in ev
                if e.node == y
                and e.what == "NodeLost"
                and e.eff.node == x
                and tc <= e.t <= tc + LOST_BOUND
            ]
            if not lost and _knew(kind, y, x, tc):
                raise GossipViolation("lost_detection", f"{y} did not lose {x} (crashed {tc:.3f})")

    # 6. no false alarm: NodeLost(x) only after a fault of x (crash, restart, cut) lately
    for e in ev:
        if e.what == "NodeLost":
            x = e.eff.node
            # a restart of x that happened while the observer was cut off is noticed when x
            # speaks again after the observer's reconnect: clients do not answer the hello
            # of a core member's re-mingle, so only their next heartbeat tells
            since = min(
                [e.t - 12.0]
                + [a - 12.0 for a, b in run.unsteady.get(e.node, []) if b >= e.t - 12.0]
            )
            if not any(n == x and since <= t <= e.t for t, n in run.faults):
                raise GossipViolation("false_lost", f"{e.node} lost {x} at {e.t:.3f}")

    # 7. at the end, views, clocks' order and revoked sets agree
    live = [n for n in s.nodes if sim.nodes[n].alive]
    cores = {n: kind.core(sim, n) for n in live}
    for n, c in cores.items():
        assert c is not None
        want = [] if n in s.clients else sorted(set(live) - {n})
        if c.alive_workers() != want:
            raise GossipViolation("views", f"{n} believes {c.alive_workers()} alive, not {want}")
    sets = {n: set(c.revoked.as_dict()) for n, c in cores.items() if c is not None}
    union = set().union(*sets.values()) if sets else set()
    for n, ids in sets.items():
        if ids != union:
            raise GossipViolation("revoked", f"{n} lacks {sorted(union - ids)[:5]}")
    stable_ids = {
        i for op in s.ops if op.action == "revoke" and op.at >= s.heal_at + 0.5 for i in op.args[1:]
    }
    if stable_ids - union:
        raise GossipViolation("revoked", f"lost revokes {sorted(stable_ids - union)[:5]}")


def _steady(run: GossipRun, name: str, t0: float, t1: float) -> bool:
    """`name` lived and had the bus throughout [t0, t1] (no crash or cut of its own overlaps
    it, counting a recovery margin after each)."""
    return not any(a <= t1 and t0 <= b for a, b in run.unsteady.get(name, []))


def _paused_during(kind: GossipKind, name: str, t0: float, t1: float) -> bool:
    paused = False
    for e in kind.events:
        if e.t > t1:
            break
        if e.node == name and e.what == "call:set_paused":
            if e.t >= t0 and e.eff[0]:
                return True
            paused = bool(e.eff[0])
        elif e.t >= t0 and paused:
            return True
    return paused


def _knew(kind: GossipKind, y: str, x: str, tc: float) -> bool:
    """Whether y (its incarnation at tc) had x in its alive view at tc."""
    state, pid = False, None
    for e in kind.events:
        if e.t > tc:
            break
        if e.node != y:
            continue
        if e.pid != pid:  # another life of y: it starts knowing nobody
            state, pid = False, e.pid
        if e.what in ("NodeJoined", "NodeLost", "NodeLeft") and e.eff.node == x:
            state = e.what == "NodeJoined"
    return state


def run_seed(seed: int, n: int, mode: str = "faults", *, trace: bool = False) -> GossipRun:
    run = run_schedule(generate(seed, n, mode))
    try:
        check(run)
    except GossipViolation as v:
        if trace:
            print(run.report(v))
        raise
    return run
