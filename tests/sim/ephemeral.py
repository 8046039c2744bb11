"""Ephemeral members in the simulator: core nodes, ephemeral nodes that churn, and faults.

    python -m tests.sim.ephemeral --seed 7 --mode pause_minority --trace
    python -m tests.sim.ephemeral --sweep 250 --mode all      # 1,250 schedules

A schedule has 3 to 5 core nodes and 2 to 6 ephemeral nodes. Ephemeral nodes attach at the
start or later, are SIGKILLed, leave, come back under the same name, are frozen and are cut
off from part of the core; in half the schedules the core has faults of its own as well
(tests/sim/schedules.py's kinds). At `heal_at` every link heals and every node boots again,
except the ephemeral nodes that are gone for good: those must be forgotten.

Invariants (on top of every core invariant of invariants.py, checked on the core members):
- never_counts: no core node's all/disc/running/partitions, nor any cluster file, ever names
  an ephemeral node; an ephemeral node writes no cluster file.
- core_never_pauses: in schedules where only ephemeral nodes fail, no core node pauses once
  the cluster has formed (an ephemeral node never changes a core node's decision).
- follows: past the grace of the last fault, a running ephemeral node sees a strict majority
  of the core (pause_minority), a listed node (pause_if_all_down), or a running core member
  (ignore, autoheal), within `tolerance`.
- forgotten: a dead ephemeral node is known to no core node `forget_after` + grace after it
  died (after the core node last thawed, if it was frozen meanwhile).
- star: no core node asks for a connection to an ephemeral one (Connect), nor an ephemeral
  one to another. (A message sent to a node whose link just went may open one, as in Erlang;
  a real core node does not know an ephemeral node's address, so there it cannot.)
- liveness: after the final heal, every ephemeral node still meant to be there runs and every
  core node lists it as up.
"""

from __future__ import annotations

import random
import sys
import traceback
from dataclasses import dataclass
from typing import Any

from monitors.effects import Connect
from monitors.node_monitor.ephemeral import EphemeralMonitorCore
from tests.sim.cli import mode_seed_main, schedule_report
from tests.sim.engine import NetConfig, Sim, SimNode
from tests.sim.faults import apply_fault, heal_all
from tests.sim.invariants import InvariantViolation, NodeMonitorInvariants
from tests.sim.node_monitor import Mode, NodeMonitorKind, core_api
from tests.sim.schedules import FIRST_FAULT, KINDS, MODES, Op, make_fault

FORGET_AFTER = 5.0  # cluster.forget_ephemeral_after in the simulator (30 s by default)
LIVENESS_BOUND = 30.0
QUIET_WINDOW = 20.0
CHURN_WINDOW = 12.0  # ephemeral churn starts within [FIRST_FAULT, FIRST_FAULT + this]


@dataclass(frozen=True)
class EphSchedule:
    seed: int
    core: tuple[str, ...]
    ephemeral: tuple[str, ...]
    mode: Mode
    seeds: tuple[tuple[str, tuple[str, ...]], ...]  # ephemeral -> the core seeds it is given
    attach_at: tuple[tuple[str, float], ...]  # ephemeral -> when it first boots
    ops: tuple[Op, ...]
    gone: frozenset[str]  # ephemeral nodes that stay dead from their last op on
    core_faults: bool
    heal_at: float

    @property
    def end(self) -> float:
        return self.heal_at + LIVENESS_BOUND + QUIET_WINDOW

    def describe(self) -> str:
        lines = [
            f"seed={self.seed} core={len(self.core)} ephemeral={len(self.ephemeral)} "
            f"mode={self.mode.label}"
            + (f" preferred={','.join(self.mode.nodes)}" if self.mode.nodes else "")
        ]
        for e, at in self.attach_at:
            lines.append(f"  {at:8.3f} attach {e} (seeds {','.join(dict(self.seeds)[e])})")
        lines += [f"  {op}" for op in sorted(self.ops, key=lambda o: o.at)]
        lines.append(
            f"  {self.heal_at:8.3f} heal everything (gone for good: {sorted(self.gone)}); "
            f"end at {self.end:.3f}"
        )
        return "\n".join(lines)


def generate(seed: int, mode: str, n_core: int | None = None, n_eph: int | None = None):
    """The schedule named by (seed, mode) (sizes drawn from the seed unless given)."""
    rng = random.Random(f"rabbitry-sim-ephemeral/{seed}/{mode}")
    n_core = n_core or rng.randint(3, 5)
    n_eph = n_eph or rng.randint(2, 6)
    core = tuple(f"c{i}@sim" for i in range(1, n_core + 1))
    eph = tuple(f"e{i}@sim" for i in range(1, n_eph + 1))
    preferred: tuple[str, ...] = ()
    if mode.startswith("pause_if_all_down"):
        preferred = tuple(sorted(rng.sample(core, 1 if rng.random() < 0.7 else 2)))
    seeds = tuple(
        (e, tuple(sorted(rng.sample(core, rng.randint(1, n_core))))) for e in eph
    )  # some know only part of the core: they learn the rest from its member list
    attach = tuple((e, 0.0 if rng.random() < 0.6 else round(rng.uniform(0.3, 8.0), 3)) for e in eph)
    ops: list[Op] = []
    core_faults = rng.random() < 0.5
    if core_faults:
        for _ in range(rng.randint(1, 3)):
            t0 = FIRST_FAULT + rng.uniform(0.0, 8.0)
            ops += make_fault(rng, rng.choice(KINDS), core, t0).ops
    gone: set[str] = set()
    for e, at in attach:
        t = max(at, FIRST_FAULT) + rng.uniform(0.2, 3.0)
        alive = True
        for _ in range(rng.randint(0, 3)):
            if t > FIRST_FAULT + CHURN_WINDOW:
                break
            kind = rng.choice(("kill", "kill", "leave", "cut", "freeze", "cut_all"))
            d = round(rng.choice((rng.uniform(0.2, 1.5), rng.uniform(1.5, 8.0))), 3)
            t = round(t, 3)
            if kind in ("kill", "leave"):
                if kind == "leave":
                    ops.append(Op(t, "leave", (e,)))
                    ops.append(Op(round(t + 0.05, 3), "crash", (e,)))
                else:
                    ops.append(Op(t, "crash", (e,)))
                alive = rng.random() < 0.6
                if alive:
                    ops.append(Op(round(t + 0.1 + d, 3), "boot", (e,)))
            elif kind == "freeze":
                ops += [Op(t, "freeze", (e,)), Op(round(t + d, 3), "thaw", (e,))]
            else:
                cut = core if kind == "cut_all" else rng.sample(core, rng.randint(1, n_core))
                for c in sorted(cut):
                    ops += [Op(t, "cut", (e, c)), Op(t, "cut", (c, e))]
                    ops += [
                        Op(round(t + d, 3), "heal", (e, c)),
                        Op(round(t + d, 3), "heal", (c, e)),
                    ]
            t += d + rng.uniform(0.2, 2.0)
            if not alive:
                break
        if not alive:
            gone.add(e)
    heal_at = round(max([op.at for op in ops] + [FIRST_FAULT]) + 0.5, 6)
    return EphSchedule(
        seed,
        core,
        eph,
        Mode.parse(mode, preferred),
        seeds,
        attach,
        tuple(sorted(ops, key=lambda o: o.at)),
        frozenset(gone),
        core_faults,
        heal_at,
    )


class MixedKind(NodeMonitorKind):
    """NodeMonitorCore on core nodes, EphemeralMonitorCore on ephemeral ones."""

    def __init__(self, schedule: EphSchedule, forget_after: float = FORGET_AFTER) -> None:
        super().__init__(core_api("real"), list(schedule.core), schedule.mode)
        self.seeds = dict(schedule.seeds)
        self.forget_after = forget_after

    def build(self, sim: Sim, node: SimNode) -> Any:
        if node.name not in self.seeds:
            core = super().build(sim, node)
            core.forget_ephemeral_after = self.forget_after
            return core
        node.state["app"] = "stopped"
        node.state["app_busy_until"] = sim.now
        node.state["notified"] = []
        return EphemeralMonitorCore(
            node.name,
            node.creation,
            self.seeds[node.name],
            self.config,
            down_ping_interval=self.down_ping_interval,
            keepalive_interval=self.keepalive_interval,
        )


class EphemeralInvariants(NodeMonitorInvariants):
    """The core invariants on the core members, plus the ephemeral ones (module docstring)."""

    def __init__(self, sim: Sim, kind: MixedKind, schedule: EphSchedule) -> None:
        super().__init__(
            sim,
            kind.name,
            list(schedule.core),
            schedule.mode,
            heal_at=schedule.heal_at,
            liveness_bound=LIVENESS_BOUND,
            quiet_window=QUIET_WINDOW,
            keepalive_interval=kind.keepalive_interval,
            down_ping_interval=kind.down_ping_interval,
        )
        self.schedule = schedule
        self.eph = set(schedule.ephemeral)
        self.forget_after = kind.forget_after
        self.dead_since: dict[str, float] = {}  # ephemeral node -> when it died
        self.thawed_at: dict[str, float] = {}  # core node -> when it last thawed or booted
        self.eph_bad_since: dict[str, float] = {}
        self.formed = False

    # ---- hooks ---------------------------------------------------------------------------

    def after_step(self, sim: Sim, node: SimNode) -> None:
        if node.name in self.eph:
            self._eph_checks(self.sim.now)
            return
        self._never_counts(node)
        super().after_step(sim, node)

    def after_change(self, sim: Sim) -> None:
        self._sees = {}
        for node in sim.nodes.values():
            if node.name not in self.eph:
                self._view(node)
        self._evaluate()

    def _evaluate(self) -> None:
        super()._evaluate()
        self._eph_checks(self.sim.now)

    def op(self, op: Op) -> None:
        """Called by the runner before each op, to keep the ground truth."""
        now = self.sim.now
        (name,) = op.args[:1]
        if op.action == "crash" and name in self.eph:
            self.dead_since.setdefault(name, now)
        elif op.action == "boot" and name in self.eph:
            self.dead_since.pop(name, None)
        elif op.action in ("thaw", "boot"):
            self.thawed_at[name] = now

    # ---- the ephemeral invariants -------------------------------------------------------

    def _never_counts(self, node: SimNode) -> None:
        core = node.cores.get(self.core_name)
        if core is None:
            return
        st = core.status()
        for key in ("all", "disc", "running", "partitions"):
            bad = set(st[key]) & self.eph
            if bad:
                raise InvariantViolation(
                    "never_counts", f"{node.name}'s {key} names {sorted(bad)}", self.sim.now
                )
        saved = node.disk.get(self.core_name)
        if saved is not None and set().union(*map(set, saved)) & self.eph:
            raise InvariantViolation(
                "never_counts", f"{node.name}'s cluster files name {saved}", self.sim.now
            )

    def _eph_checks(self, now: float) -> None:
        sim = self.sim
        if not self.formed and now > FIRST_FAULT:
            self.formed = True
        if self.formed and not self.schedule.core_faults:
            for m in self.members:
                node = sim.nodes[m]
                if node.alive and node.cores[self.core_name].paused:
                    raise InvariantViolation(
                        "core_never_pauses",
                        f"{m} paused though only ephemeral nodes failed: "
                        f"{node.cores[self.core_name].status()}",
                        now,
                    )
        current: dict[str, float] = {}
        for e in sorted(self.eph):
            node = sim.nodes[e]
            if not node.alive:
                continue
            if node.disk:
                raise InvariantViolation("never_counts", f"{e} wrote {node.disk}", now)
            if node.frozen or node.cores[self.core_name].paused:
                continue
            why = self._follow_problem(e)
            if why is None:
                continue
            since = self.eph_bad_since.get(e, now)
            current[e] = since
            due = max(since + self.tolerance, self.last_fault + self.grace)
            if now > due:
                raise InvariantViolation(
                    "follows", f"{e} runs but {why} (since t={since:.4f})", now
                )
            self._wake(due + 1e-9)
        self.eph_bad_since = current
        self._forgotten(now)

    def _core_seen(self, e: str) -> set[str]:
        """The core members `e` sees (ground truth); a driver may leave some out."""
        net = self.sim.net
        return {c for c in self.members if net.healthy(e, c)}

    def _follow_problem(self, e: str) -> str | None:
        seen = self._core_seen(e)
        mode = self.mode.name
        if mode == "pause_minority":
            if 2 * len(seen) <= self.n:
                return f"sees only {sorted(seen)} of {self.n} core members"
        elif mode == "pause_if_all_down":
            if self.preferred and not seen & self.preferred:
                return f"sees {sorted(seen)}, none of {sorted(self.preferred)}"
        elif not any(self.running[c] for c in seen):
            return f"sees no running core member (sees {sorted(seen)})"
        return None

    def _forgotten(self, now: float) -> None:
        for e, died in self.dead_since.items():
            for c in self.members:
                node = self.sim.nodes[c]
                if not node.alive or node.frozen:
                    continue
                due = max(died, self.thawed_at.get(c, 0.0)) + self.forget_after + self.grace
                if now <= due:
                    self._wake(due + 1e-9)
                    continue
                up, down = node.cores[self.core_name].ephemeral_members()
                if e in up or e in down:
                    raise InvariantViolation(
                        "forgotten", f"{c} still knows {e}, dead since t={died:.4f}", now
                    )

    def connecting(self, initiator: str, peer: str) -> None:
        if peer in self.eph:
            who = "ephemeral" if initiator in self.eph else "core"
            raise InvariantViolation(
                "star", f"{initiator} ({who}) opens a connection to ephemeral {peer}", self.sim.now
            )

    def whole(self) -> str | None:
        why = super().whole()
        if why is not None:
            return why
        for e in sorted(self.eph - self.schedule.gone):
            node = self.sim.nodes[e]
            if node.cores[self.core_name].paused:
                return f"{e} is paused"
            for c in self.members:
                if e not in self.sim.nodes[c].cores[self.core_name].status()["ephemeral"]:
                    return f"{c} does not list {e} as up"
        return None

    def finish(self) -> None:
        # quiescence with every node counted (ephemeral ones keep alive too)
        n = self.n
        self.n = n + len(self.eph)
        try:
            super().finish()
        finally:
            self.n = n


@dataclass
class EphResult:
    schedule: EphSchedule
    sim: Sim
    violation: InvariantViolation | None

    @property
    def ok(self) -> bool:
        return self.violation is None

    def report(self, tail: int = 60) -> str:
        s = self.schedule
        replay = f"python -m tests.sim.ephemeral --seed {s.seed} --mode {s.mode.label} --trace"
        return schedule_report(s, self.sim, self.violation, tail, replay)


def _apply(sim: Sim, checker: EphemeralInvariants, kind: MixedKind, op: Op) -> None:
    checker.fault()
    checker.op(op)
    name, args = op.action, op.args
    if apply_fault(sim, op):
        return
    if name == "leave":
        node = sim.nodes[args[0]]
        if node.alive and not node.frozen:
            core = node.cores[kind.name]
            sim.call(node, kind.name, "leave", None, core.left_cluster(node.name, sim.now))
    else:
        raise ValueError(f"unknown op {op}")


def _heal_everything(sim: Sim, checker: EphemeralInvariants, schedule: EphSchedule) -> None:
    checker.fault()
    for name in heal_all(sim):
        checker.thawed_at[name] = sim.now
    dead = [n for n, node in sim.nodes.items() if not node.alive and n not in schedule.gone]
    for n in dead:
        checker.op(Op(sim.now, "boot", (n,)))
    if dead:
        sim.boot(*dead)


def build(
    schedule: EphSchedule,
    trace_len: int | None = 200,
    kind: MixedKind | None = None,
    checker_type: type[EphemeralInvariants] | None = None,
) -> tuple[Sim, EphemeralInvariants]:
    """The simulation of `schedule`; `kind` and `checker_type` let a driver (adversarial.py)
    build its nodes and check its invariants its own way."""
    sim = Sim(schedule.seed, net=NetConfig(), trace_len=trace_len)
    kind = kind or MixedKind(schedule)
    sim.add_kind(kind)
    for name in (*schedule.core, *schedule.ephemeral):
        sim.add_node(name)
    checker = (checker_type or EphemeralInvariants)(sim, kind, schedule)
    sim.add_observer(checker)
    connect = sim._common[Connect]

    def watched(node: SimNode, cname: str, eff: Connect) -> None:
        checker.connecting(node.name, eff.node)
        connect(node, cname, eff)

    sim._common[Connect] = watched  # explicit connects; a send may open a link, as in Erlang
    for op in schedule.ops:
        sim.at(op.at, _apply, sim, checker, kind, op)
    late = [(at, e) for e, at in schedule.attach_at if at > 0]
    for at, e in late:
        sim.at(at, _apply, sim, checker, kind, Op(at, "boot", (e,)))
    sim.at(schedule.heal_at, _heal_everything, sim, checker, schedule)
    sim.at(checker.live_from, checker.start_quiet)
    sim.boot(*schedule.core, *(e for e, at in schedule.attach_at if at == 0))
    return sim, checker


def run_schedule(schedule: EphSchedule, trace_len: int | None = 200) -> EphResult:
    sim, checker = build(schedule, trace_len)
    try:
        sim.run_until(schedule.end)
        checker.finish()
    except InvariantViolation as v:
        return EphResult(schedule, sim, v)
    except Exception as e:
        where = traceback.extract_tb(e.__traceback__)[-1]
        text = f"{type(e).__name__}: {e} ({where.filename}:{where.lineno})"
        return EphResult(schedule, sim, InvariantViolation("no_crash", text, sim.now))
    return EphResult(schedule, sim, None)


def run_job(job: tuple[str, int]) -> tuple[str, int, str | None, str | None]:
    """(mode, seed) -> (mode, seed, invariant, report), for process pools."""
    mode, seed = job
    r = run_schedule(generate(seed, mode))
    if r.ok:
        return mode, seed, None, None
    return mode, seed, r.violation.invariant if r.violation else None, r.report()


def main(argv: list[str] | None = None) -> int:
    return mode_seed_main(
        "python -m tests.sim.ephemeral",
        __doc__ or "",
        MODES,
        run_job,
        lambda seed, mode, trace_len: run_schedule(generate(seed, mode), trace_len),
        argv=argv,
    )


if __name__ == "__main__":
    sys.exit(main())
