"""Hosting MnesiaCore in the simulator: a CoreKind with a crash-surviving simulated disc, a
transaction workload per node, seeded fault schedules and the store's invariants.

- `MnesiaKind` builds a `TracedCore` (MnesiaCore plus hooks that report decisions to the
  checker) from the node's disk: `node.disk["mnesia_schema"]` (PersistSchema) and
  `node.disk["mnesia_tables"]` (what DiscCommit / ReplaceTable wrote: nothing else survives a
  crash). Every node starts with the same schema (tables `d`: disc copies everywhere; `m`: ram
  copies, one disc copy on the first node).
- The workload: each node runs transactions one after another (read two keys, write both),
  some dirty writes, restarting a transaction on Restart as `Schema.transaction` does, until
  the final heal.
- `generate(seed, nodes, merge)` draws 1 to 4 faults (tests/sim/schedules.make_fault): with
  merge "none" only crashes (a partition would leave the store split, as Mnesia's), with
  autoheal and lww every kind. Then everything heals and the store must settle.

Invariants (`MnesiaChecker`; docs/mnesia_like.md):
1. atomicity, as it happens: no transaction is applied on one replica and aborted on another
   after that one voted yes (an autoheal reload is not an abort decision);
2. no trace of aborts: a stamp the coordinator gave a transaction it then aborted is in no
   replica at the end;
3. durability (merge none and lww): every write of an acknowledged commit that a disc copy
   took part in is, at the end, in every replica of its table or overwritten by a newer one;
   the disc keeps it across crashes (autoheal discards the losing side's writes by design);
4. convergence and liveness: at the end every node runs with all others, every replica is
   loaded, and all replicas of a table hold the same records.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mnesia_like.coordinator import Coordinator
from mnesia_like.core import MnesiaCore
from mnesia_like.errors import Restart
from mnesia_like.participant import Participant
from mnesia_like.records import key_json
from mnesia_like.shell import LAZY_SYNC
from tests.mnesia_like.harness import settle_lazy
from tests.sim.cli import sizes
from tests.sim.engine import EffectHandler, NetConfig, Sim, SimNode
from tests.sim.faults import apply_fault, heal_all
from tests.sim.schedules import FIRST_FAULT, Fault, make_fault

NAME = MnesiaCore.NAME
SETTLE = 12.0  # after the final heal the store must be whole and converged within this
KEYS = 6
MERGES = ("none", "autoheal", "lww")
CORE_OPTIONS: dict[str, Any] = {
    "startup_timeout": 0.5,
    "load_timeout": 5.0,
    "outcome_retry": 0.5,
    "outcome_timeout": 60.0,  # longer than any partition: in-doubt transactions block
    "config_timeout": 2.0,
    "check_interval": 2.0,
    # the classic commit unless a run asks for the parallel one (the core's default): the
    # default plans keep the classic path checked, PARALLEL_PLAN the parallel one
    "parallel_commit": False,
}


class Violation(AssertionError):
    """An invariant of the store does not hold."""


@dataclass
class Record:
    """What the checker learns from the cores as the run goes."""

    applied: dict[str, set[str]] = field(default_factory=dict)  # tid -> nodes
    aborted_prepared: dict[str, set[str]] = field(default_factory=dict)
    aborted_stamps: set[tuple[int, str]] = field(default_factory=set)
    acked: list[tuple[str, tuple[int, str], list[tuple[str, str]]]] = field(default_factory=list)
    participants: dict[tuple[int, str], dict[str, set[str]]] = field(default_factory=dict)
    committed: int = 0
    restarts: int = 0
    gave_up: int = 0
    dirty: int = 0
    reloads: int = 0
    violation: str | None = None

    def fail(self, text: str) -> None:
        if self.violation is None:
            self.violation = text
        raise Violation(text)


class TracedParticipant(Participant):
    """The participant with hooks for the checker (the protocol is untouched)."""

    record: Record
    reloading = False  # the node is dropping every transaction (an autoheal reload)

    def apply_commit(self, tid: str, part: Any) -> list[Any]:
        nodes = self.record.applied.setdefault(tid, set())
        nodes.add(self.s.node)
        if self.record.aborted_prepared.get(tid):
            self.record.fail(
                f"atomicity: {tid} applied on {self.s.node} but aborted after a yes vote on "
                f"{sorted(self.record.aborted_prepared[tid])}"
            )
        return super().apply_commit(tid, part)

    def release(self, tid: str, outcome: str | None) -> list[Any]:
        part = self.txs.get(tid)
        if outcome == "aborted" and part is not None and part.prepared and not self.reloading:
            self.record.aborted_prepared.setdefault(tid, set()).add(self.s.node)
            if self.record.applied.get(tid):
                self.record.fail(
                    f"atomicity: {tid} aborted on {self.s.node} after a yes vote but applied on "
                    f"{sorted(self.record.applied[tid])}"
                )
        return super().release(tid, outcome)


class TracedCoordinator(Coordinator):
    """The coordinator with hooks for the checker (the protocol is untouched)."""

    record: Record

    def on_vote(self, sender: str, m: dict[str, Any], now: float) -> list[Any]:
        out = super().on_vote(sender, m, now)
        tx = self.txs.get(m["tid"])
        if tx is not None and tx.phase == "committing" and tx.stamp is not None:
            stamp = (tx.stamp[0], tx.stamp[1])
            self.record.participants[stamp] = {t: set(ns) for t, ns in tx.write_nodes.items()}
        return out

    def decided(self, tx: Any) -> None:
        """A parallel commit (the transaction ends here, with no phase to look at later)."""
        stamp = (tx.stamp[0], tx.stamp[1])
        self.record.participants[stamp] = {t: set(ns) for t, ns in tx.write_nodes.items()}

    def end_tx(self, tx: Any, restart: str | None) -> list[Any]:
        if tx.stamp is not None:
            self.record.aborted_stamps.add((tx.stamp[0], tx.stamp[1]))
        return super().end_tx(tx, restart)


class TracedCore(MnesiaCore):
    """MnesiaCore with hooks for the checker in its transaction parts."""

    coordinator_class = TracedCoordinator
    participant_class = TracedParticipant
    participant: TracedParticipant
    coordinator: TracedCoordinator

    @property
    def record(self) -> Record:
        return self.participant.record

    @record.setter
    def record(self, record: Record) -> None:
        self.participant.record = record
        self.coordinator.record = record

    def drop_transactions(self) -> list[Any]:
        self.participant.reloading = True
        self.record.reloads += 1
        try:
            return super().drop_transactions()
        finally:
            self.participant.reloading = False


def initial_schema(members: list[str]) -> dict[str, Any]:
    def table(ram: list[str], disc: list[str]) -> dict[str, Any]:
        return {
            "attributes": ["k", "v"],
            "key": "k",
            "ram": ram,
            "disc": disc,
            "cookie": [0, members[0]],
            "version": 1,
        }

    return {
        "db_nodes": list(members),
        "tables": {"d": table([], list(members)), "m": table(list(members[1:]), members[:1])},
        "active": {"d": list(members), "m": members[:1]},
        "marks": [],
        "clock": 0,
    }


class MnesiaKind:
    """A CoreKind: one TracedCore per node, plus that node's client."""

    name = NAME

    def __init__(self, members: list[str], merge: str, record: Record, stop_at: float) -> None:
        self.members = list(members)
        self.merge = merge
        self.record = record
        self.stop_at = stop_at
        self.options: dict[str, Any] = dict(CORE_OPTIONS)
        self.wread = False  # reads take the write lock (Mnesia's wread): no lock round to write
        self._req = 0

    def build(self, sim: Sim, node: SimNode) -> Any:
        saved = node.disk.get("mnesia_schema") or initial_schema(self.members)
        tables = node.disk.setdefault("mnesia_tables", {})
        tids = node.disk.setdefault("mnesia_tids", {})
        core = TracedCore(
            node.name,
            node.creation,
            saved=saved,
            disc={t: dict(e) for t, e in tables.items()},
            disc_tids=dict(tids),
            extra_db_nodes=[m for m in self.members if m != node.name],
            merge=self.merge,
            **self.options,
        )
        core.record = self.record
        node.state["pending"] = None
        node.state["age"] = None
        node.state["retries"] = 0
        sim.post(node, 0.3 + sim.rng.uniform(0, 0.1), self._next, sim, node)
        return core

    def handlers(self) -> dict[str, EffectHandler]:
        return {
            "Reply": self._reply,
            "DiscCommit": self._disc_commit,
            "ReplaceTable": self._replace,
            "DropTable": self._drop,
            "PersistSchema": self._persist,
            "MnesiaEvent": self._event,
        }

    # ---- the disc

    def _disc_commit(self, sim: Sim, node: SimNode, cname: str, eff: Any) -> None:
        # A lazy append (a parallel commit's table write) or an `after` one (its committed
        # marker, appended once the writes before it are synced, but not synced itself) is
        # on disc only once a later synced append's fsync covers it (settle_lazy: the same
        # log, or any once LAZY_SYNC old): until then a crash loses it (node.state goes
        # with the crash), as the shell's group commit may.
        if eff.lazy or eff.after:
            if not node.state.get("lazy"):
                node.state["lazy_since"] = sim.now
            node.state.setdefault("lazy", []).append(eff)
            return
        aged = sim.now - node.state.get("lazy_since", sim.now) >= LAZY_SYNC
        synced, node.state["lazy"] = settle_lazy(node.state.get("lazy", []), eff.table, aged)
        for pending in synced:
            self._write(node, pending)
        self._write(node, eff)

    def _flush_lazy(self, node: SimNode) -> None:
        for eff in node.state.pop("lazy", []):
            self._write(node, eff)

    def _write(self, node: SimNode, eff: Any) -> None:
        tids = node.disk["mnesia_tids"]
        if eff.tid == 0:  # numbered as it reaches the log (the _prepared log: see DiscCommit)
            eff = type(eff)(eff.table, tids.get(eff.table, 0) + 1, eff.ops)
        if eff.tid <= tids.get(eff.table, 0):
            raise Violation(f"{node.name}: disc commit tid {eff.tid} not increasing")
        content = node.disk["mnesia_tables"].setdefault(eff.table, {})
        for kind, key, entry in eff.ops:
            if kind == "put":
                content[key_json(key)] = entry
            else:
                content.pop(key_json(key), None)
        tids[eff.table] = eff.tid

    def _replace(self, sim: Sim, node: SimNode, cname: str, eff: Any) -> None:
        self._flush_lazy(node)
        node.disk["mnesia_tables"][eff.table] = dict(eff.entries)
        node.disk["mnesia_tids"][eff.table] = eff.tid

    def _drop(self, sim: Sim, node: SimNode, cname: str, eff: Any) -> None:
        self._flush_lazy(node)
        node.disk["mnesia_tables"].pop(eff.table, None)

    def _persist(self, sim: Sim, node: SimNode, cname: str, eff: Any) -> None:
        node.disk["mnesia_schema"] = eff.state

    def _event(self, sim: Sim, node: SimNode, cname: str, eff: Any) -> None:
        sim.record(node, "mnesia_event", f"{eff.kind} {eff.node} {eff.detail or ''}")

    # ---- the workload

    def _request(self, sim: Sim, node: SimNode, op: str, **args: Any) -> None:
        self._req += 1
        node.state["pending"] = (self._req, op)
        core = node.cores[NAME]
        sim.call(node, NAME, "request", (op, args), core.request(self._req, op, args, sim.now))

    def _next(self, sim: Sim, node: SimNode) -> None:
        """Start the next unit of work (a transaction, or a dirty write)."""
        if sim.now >= self.stop_at:
            return
        rng = sim.rng
        table = rng.choice(("d", "m"))
        if rng.random() < 0.15:
            k = rng.randrange(KEYS)
            node.state["script"] = None
            self._request(
                sim, node, "dirty_write", table=table, record={"k": k, "v": f"{node.name}:d"}
            )
            return
        k1, k2 = rng.sample(range(KEYS), 2)
        node.state["script"] = {"table": table, "keys": (k1, k2), "step": 0, "tid": None}
        node.state["retries"] = 0
        node.state["age"] = None
        self._request(sim, node, "tx_begin", age=None)

    def _later(
        self, sim: Sim, node: SimNode, lo: float, hi: float, fn: Callable[..., None]
    ) -> None:
        sim.post(node, sim.rng.uniform(lo, hi), fn, sim, node)

    def _reply(self, sim: Sim, node: SimNode, cname: str, eff: Any) -> None:
        pending = node.state.get("pending")
        if pending is None or pending[0] != eff.req_id:
            return
        node.state["pending"] = None
        op = pending[1]
        script = node.state.get("script")
        if op == "dirty_write":
            if eff.error is None:
                self.record.dirty += 1
            self._later(sim, node, 0.02, 0.08, self._next)
            return
        if eff.error is not None:
            if isinstance(eff.error, Restart) and node.state["retries"] < 8:
                node.state["retries"] += 1
                self.record.restarts += 1
                self._later(sim, node, 0.005, 0.05 * node.state["retries"], self._restart)
            else:
                self.record.gave_up += 1
                self._later(sim, node, 0.05, 0.15, self._next)
            return
        if op == "tx_begin":
            script["tid"] = eff.value["tid"]
            node.state["age"] = eff.value["age"]
            script["step"] = 0
            script["reads"] = []
        elif op == "tx_commit":
            stamp = eff.value["stamp"]
            if stamp is not None:
                keys = [(script["table"], key_json(k)) for k in script["keys"]]
                self.record.acked.append((node.name, (stamp[0], stamp[1]), keys))
            self.record.committed += 1
            self._later(sim, node, 0.02, 0.08, self._next)
            return
        else:
            script["step"] += 1
            if op == "tx_read":
                script["reads"].append(eff.value)
        self._later(sim, node, 0.001, 0.01, self._step)

    def _restart(self, sim: Sim, node: SimNode) -> None:
        script = node.state.get("script")
        if script is None:
            return
        self._request(sim, node, "tx_begin", age=node.state["age"])

    def _step(self, sim: Sim, node: SimNode) -> None:
        script = node.state["script"]
        tid, table, (k1, k2) = script["tid"], script["table"], script["keys"]
        step = script["step"]
        if step < 2:
            key = (k1, k2)[step]
            if self.wread:
                self._request(sim, node, "tx_read", tid=tid, table=table, key=key, lock="write")
            else:
                self._request(sim, node, "tx_read", tid=tid, table=table, key=key)
        elif step < 4:
            k = (k1, k2)[step - 2]
            seen = [r["v"] if isinstance(r, dict) else None for r in script["reads"]]
            value = f"{node.name}:{tid}:{len(str(seen))}"
            self._request(sim, node, "tx_write", tid=tid, table=table, record={"k": k, "v": value})
        else:
            self._request(sim, node, "tx_commit", tid=tid)


# ---------------------------------------------------------------------------- schedules


@dataclass(frozen=True)
class MnesiaSchedule:
    seed: int
    nodes: tuple[str, ...]
    merge: str
    faults: tuple[Fault, ...]
    heal_at: float

    @property
    def end(self) -> float:
        return self.heal_at + SETTLE

    def describe(self) -> str:
        lines = [f"schedule seed={self.seed} nodes={len(self.nodes)} merge={self.merge}"]
        for f in self.faults:
            lines.append(f"  {f.kind}: " + "; ".join(str(op) for op in f.ops))
        lines.append(f"  heal_all at {self.heal_at}")
        return "\n".join(lines)


def generate(seed: int, n_nodes: int, merge: str) -> MnesiaSchedule:
    rng = random.Random(f"rabbitry-mnesia-sim/{seed}/{n_nodes}/{merge}")
    nodes = tuple(f"n{i}@sim" for i in range(1, n_nodes + 1))
    kinds = (
        ("crash",)
        if merge == "none"
        else ("partition", "partial", "oneway", "flap", "crash", "freeze", "blip", "double_cut")
    )
    faults = []
    for _ in range(rng.randint(1, 4)):
        faults.append(make_fault(rng, rng.choice(kinds), nodes, FIRST_FAULT + rng.uniform(0, 6)))
    faults.sort(key=lambda f: f.start)
    heal_at = round(max(f.end for f in faults) + 0.5, 6)
    return MnesiaSchedule(seed, nodes, merge, tuple(faults), heal_at)


@dataclass
class MnesiaRun:
    schedule: MnesiaSchedule
    sim: Sim
    kind: MnesiaKind
    record: Record
    steps: int = 0  # crash points (see step_crashes), for the replay line

    def report(self, violation: BaseException) -> str:
        s = self.schedule
        return "\n".join(
            [
                f"FAILED seed={s.seed} nodes={len(s.nodes)} merge={s.merge}: {violation}",
                s.describe(),
                "last 80 trace entries:",
                self.sim.format_trace(80),
                f"replay: python -m tests.sim.mnesia --seed {s.seed} --nodes {len(s.nodes)} "
                f"--merge {s.merge}{' --wread' if self.kind.wread else ''}"
                f"{' --parallel' if self.kind.options.get('parallel_commit') else ''}"
                f"{f' --steps {self.steps}' if self.steps else ''} --trace 400",
            ]
        )


# The steps of a commit a crash point may follow (see step_crashes and _step_of).
STEPS = ("any", "record", "vote", "reply", "commit", "table", "marker", "abort")


def step_crashes(seed: int, schedule: MnesiaSchedule, count: int = 3) -> list[tuple[str, str, int]]:
    """Crash points for `schedule`: (node, step, n), the node is killed right after the n-th
    effect of that step it performs ("any": any effect; "record": a prepare record written,
    "vote", "reply": a final answer ("acked": of a commit), "commit", "table": a table append,
    "marker": a committed
    marker, "abort": a prepare record deleted), in the middle of an event's effects, as a kill
    -9 lands between two system calls; after a "vote" the vote's receiver is killed too,
    right after it next acknowledges a commit. Drawn apart from the schedule's own faults."""
    rng = random.Random(f"rabbitry-mnesia-sim/steps/{seed}/{len(schedule.nodes)}")
    points = []
    for _ in range(count):
        step = rng.choice(STEPS)
        n = rng.randint(20, 1500) if step == "any" else rng.randint(1, 40)
        points.append((rng.choice(schedule.nodes), step, n))
    return points


def _step_of(eff: Any) -> str | None:
    kind = type(eff).__name__
    if kind == "Send":
        t = eff.msg.get("t") if isinstance(eff.msg, dict) else None
        return t if t in ("vote", "commit") else None
    if kind == "Reply":
        value = eff.value
        return "acked" if isinstance(value, dict) and value.get("stamp") else "reply"
    if kind == "DiscCommit":
        if eff.table == "_prepared":
            if eff.after:
                return "marker"
            return "abort" if eff.ops and eff.ops[0][0] == "del" else "record"
        return "table"
    return None


def _arm_step_crashes(
    sim: Sim, schedule: MnesiaSchedule, points: list[tuple[str, str, int]]
) -> None:
    counts: dict[tuple[str, str], int] = {}
    plan: dict[tuple[str, str], set[int]] = {}
    for name, step, n in points:
        plan.setdefault((name, step), set()).add(n)

    def reboot(name: str) -> None:
        if not sim.nodes[name].alive:
            sim.boot(name)

    def hook(node: SimNode, eff: Any) -> None:
        step_of = _step_of(eff)
        for step in ("any", step_of, "reply" if step_of == "acked" else None):
            if step is None:
                continue
            key = (node.name, step)
            n = counts[key] = counts.get(key, 0) + 1
            if n in plan.get(key, ()) and sim.now < schedule.heal_at - 1.0:
                sim.record(node, "step_crash", f"after {step} {n}: {type(eff).__name__}")
                if step == "vote" and eff.node != node.name:
                    # a double failure: the coordinator goes too, right after it next
                    # acknowledges a commit (then only the participants know the outcome)
                    to = (eff.node, "acked")
                    plan.setdefault(to, set()).add(counts.get(to, 0) + 1)
                sim.crash(node.name)
                sim.at(sim.now + sim.rng.uniform(0.05, 0.8), reboot, node.name)
                return

    sim.effect_hook = hook


def _heal_everything(sim: Sim) -> None:
    heal_all(sim)
    dead = [name for name, node in sim.nodes.items() if not node.alive]
    if dead:
        sim.boot(*dead)


def prepare(
    schedule: MnesiaSchedule,
    trace_len: int | None = 300,
    *,
    wread: bool = False,
    crash_points: list[tuple[str, str, int]] | None = None,
    **core_options: Any,
) -> MnesiaRun:
    """A run of `schedule`, ready to go; `wread`: the transactions read with write locks;
    `crash_points`: (node, step, n) kills the node right after its n-th effect of that step
    (see step_crashes)."""
    sim = Sim(schedule.seed, net=NetConfig(net_ticktime=1.0), trace_len=trace_len)
    record = Record()
    kind = MnesiaKind(list(schedule.nodes), schedule.merge, record, stop_at=schedule.heal_at)
    kind.options = {**CORE_OPTIONS, **core_options}
    kind.wread = wread
    sim.add_kind(kind)
    for name in schedule.nodes:
        sim.add_node(name)
    for f in schedule.faults:
        for op in f.ops:
            sim.at(op.at, apply_fault, sim, op)
    sim.at(schedule.heal_at, _heal_everything, sim)
    if crash_points:
        _arm_step_crashes(sim, schedule, crash_points)
    sim.boot(*schedule.nodes)
    return MnesiaRun(schedule, sim, kind, record)


def check_end(run: MnesiaRun) -> None:
    """Invariants 2 to 4, at the end of the run."""
    sim, record, members = run.sim, run.record, list(run.schedule.nodes)
    cores = {}
    for name in members:
        node = sim.nodes[name]
        if not node.alive or node.frozen:
            record.fail(f"liveness: {name} is not running at the end")
        cores[name] = node.cores[NAME]
    for name, core in cores.items():
        running = sorted(core.status()["running_db_nodes"])
        if running != sorted(members):
            record.fail(f"liveness: {name} runs with {running} at the end, not all nodes")
        for table, d in core.tables.items():
            if name in set(d["ram"]) | set(d["disc"]) and table not in core.loaded:
                record.fail(f"liveness: {name} has not loaded {table!r} at the end")
    for table in ("d", "m"):
        holders = [n for n in members if table in cores[n].loaded]
        contents = {n: cores[n].records(table) for n in holders}
        first = contents[holders[0]]
        for n in holders[1:]:
            if contents[n] != first:
                diff = sorted(
                    k for k in {*first, *contents[n]} if first.get(k) != contents[n].get(k)
                )
                record.fail(
                    f"convergence: {table!r} differs between {holders[0]} and {n} at keys {diff}"
                )
        for n in holders:
            for kj, entry in cores[n].store[table].items():
                if (entry["s"][0], entry["s"][1]) in record.aborted_stamps:
                    record.fail(
                        f"abort left a trace: {table!r}[{kj}] on {n} has the stamp of an "
                        f"aborted transaction {entry['s']}"
                    )
    if run.schedule.merge == "autoheal":
        return
    for node, stamp, keys in record.acked:
        parts = record.participants.get(stamp, {})
        for table, kj in keys:
            disc = set(cores[node].tables[table]["disc"])
            if not parts.get(table, set()) & disc:
                continue  # committed while every disc copy was down: it lived in RAM only
            for n in members:
                entry = cores[n].store.get(table, {}).get(kj)
                if entry is None or (entry["s"][0], entry["s"][1]) < stamp:
                    record.fail(
                        f"durability: the commit {stamp} acknowledged on {node} wrote "
                        f"{table!r}[{kj}], but {n} holds {entry} at the end"
                    )


def run_schedule(schedule: MnesiaSchedule, trace_len: int | None = 300) -> MnesiaRun:
    """Run one schedule to its end and check; raises Violation (see MnesiaRun.report)."""
    run = prepare(schedule, trace_len)
    run.sim.run_until(schedule.end)
    check_end(run)
    return run


def sweep_scale() -> float:
    """RABBITRY_SIM_SCALE (default 1): how many schedules the suites run, as a factor."""
    try:
        return float(os.environ.get("RABBITRY_SIM_SCALE", "1"))
    except ValueError:
        return 1.0


def run_seed(
    seed: int,
    n_nodes: int,
    merge: str,
    *,
    wread: bool = False,
    steps: int = 0,
    **core_options: Any,
) -> tuple[MnesiaRun, Violation | None]:
    """Run one named schedule; the run and its violation (None if every invariant held).
    `steps`: that many crash points besides the schedule's faults (step_crashes)."""
    schedule = generate(seed, n_nodes, merge)
    points = step_crashes(seed, schedule, steps) if steps else None
    run = prepare(schedule, wread=wread, crash_points=points, **core_options)
    run.steps = steps
    try:
        run.sim.run_until(schedule.end)
        check_end(run)
    except Violation as v:
        return run, v
    return run, None


def main(argv: list[str] | None = None) -> int:
    """Replay one schedule or sweep many:

    python -m tests.sim.mnesia --seed 58 --nodes 4 --merge autoheal [--trace N]
    python -m tests.sim.mnesia --sweep 80 --nodes 3-5 --merge all [--first 0] [--wread]
    """
    import argparse
    import time

    p = argparse.ArgumentParser(prog="python -m tests.sim.mnesia", description=main.__doc__)
    p.add_argument("--seed", type=int)
    p.add_argument("--nodes", default="3", help="a size or a range, e.g. 3-5")
    p.add_argument("--merge", default="autoheal", help="none, autoheal, lww or all")
    p.add_argument("--trace", type=int, default=0, help="print the last N trace entries")
    p.add_argument("--sweep", type=int, default=0, help="run this many seeds per size and mode")
    p.add_argument("--first", type=int, default=0, help="the first seed of a sweep")
    p.add_argument("--wread", action="store_true", help="transactions read with write locks")
    p.add_argument("--parallel", action="store_true", help="parallel commit (parallel_commit=True)")
    p.add_argument("--steps", type=int, default=0, help="crash points per schedule (mid-event)")
    a = p.parse_args(argv)
    opts: dict[str, Any] = {"parallel_commit": a.parallel}
    if a.steps:
        opts["steps"] = a.steps
    nodes = sizes(a.nodes)
    merges = MERGES if a.merge == "all" else (a.merge,)
    if a.seed is not None:
        status = 0
        for n in nodes:
            for merge in merges:
                run, v = run_seed(a.seed, n, merge, wread=a.wread, **opts)
                print(run.report(v) if v else f"ok seed={a.seed} nodes={n} merge={merge}")
                if a.trace and not v:
                    print(run.sim.format_trace(a.trace))
                status |= v is not None
        return status
    failed = 0
    total = 0
    for merge in merges:
        for n in nodes:
            t0 = time.process_time()
            bad = []
            for seed in range(a.first, a.first + a.sweep):
                _run, v = run_seed(seed, n, merge, wread=a.wread, **opts)
                total += 1
                if v is not None:
                    bad.append(f"{seed} ({str(v).split(':')[0]})")
            failed += len(bad)
            cpu = time.process_time() - t0
            print(
                f"{merge:8} {n} nodes: {a.sweep} schedules, {len(bad)} failed"
                f"{': ' + ', '.join(bad) if bad else ''} ({cpu:.1f} s CPU)",
                flush=True,
            )
    print(f"total: {total} schedules, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
