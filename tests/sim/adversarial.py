"""An adversarial generator for ephemeral members (issue 24): everything tests/sim/ephemeral.py
does, plus messages nobody honest sends and settings nobody meant.

    python -m tests.sim.adversarial --seed 7 --mode pause_minority --trace
    python -m tests.sim.adversarial --sweep 400 --mode all --jobs 2    # 2,000 schedules

On top of ephemeral.py's churn and core faults, a schedule may have:
- up to 32 executors (ephemeral nodes), some placed deliberately on one side of a core
  partition (cut from every core member of the other side), and one-way cuts between an
  executor and a core member;
- mode mismatches: executors whose own partition_handling differs from the core's (they must
  follow the core's: the `follows` invariant checks against the core's mode);
- stale leaves (an executor's leave with an older creation) and forged ones (a leave that
  claims the core role), delivered to core members: neither may forget the executor;
- forged member lists: a core member's record that lists only itself (what `rabbitry cluster
  leave` makes it say), delivered to executors: one member's word must not shrink the core.

Invariants, on top of ephemeral.py's:
- core_mode: an executor that has heard from a core member runs the core's mode;
- never_shrunk: an executor that has a member list from a core member counts every core
  member (nobody leaves the core in these schedules, so its core is never smaller);
- not_forgotten_by_forgery: a live executor is never forgotten on a stale or forged leave
  (checked where the forgery lands: the executor is still known right after).

Not simulated here (the dist handshake is not in the simulator's network): name collisions
and role flips; they are refused in the dist layer (tests/dist/test_name_check.py and the
real-process tests/rabbitry/test_names_verified.py). Core join/leave/forget with executors
attached is covered by hand-fed and real-process tests, not by this generator.
"""

from __future__ import annotations

import argparse
import random
import sys
import traceback
from dataclasses import dataclass, replace
from typing import Any

from monitors.node_monitor import PartitionHandling
from monitors.node_monitor.ephemeral import EphemeralMonitorCore
from tests.sim import ephemeral as eph
from tests.sim.cli import run_jobs, schedule_report
from tests.sim.engine import Sim, SimNode
from tests.sim.invariants import InvariantViolation
from tests.sim.schedules import FIRST_FAULT, MODES, Op

MAX_EXECUTORS = 32
_LOCAL_MODES = ("ignore", "pause_minority", "autoheal")


@dataclass(frozen=True)
class AdvSchedule:
    base: eph.EphSchedule
    local_modes: tuple[tuple[str, str], ...]  # executor -> its own (maybe wrong) mode

    def __getattr__(self, name: str) -> Any:  # the base schedule's fields
        return getattr(self.base, name)

    def describe(self) -> str:
        wrong = [f"{e}={m}" for e, m in self.local_modes if m != self.base.mode.name]
        return self.base.describe() + (
            f"\n  local modes that differ from the core's: {', '.join(wrong)}" if wrong else ""
        )


def generate(seed: int, mode: str) -> AdvSchedule:
    """The adversarial schedule named by (seed, mode)."""
    rng = random.Random(f"rabbitry-sim-adversarial/{seed}/{mode}")
    n_core = rng.randint(3, 5)
    n_eph = rng.choice((rng.randint(2, 6), rng.randint(7, 16), rng.randint(17, MAX_EXECUTORS)))
    base = eph.generate(seed, mode, n_core, n_eph)
    core, execs = base.core, base.ephemeral
    ops = list(base.ops)
    # executors on one side of a core partition: cut from a core minority (or majority)
    if rng.random() < 0.5:
        side = sorted(rng.sample(core, rng.randint(1, len(core) - 1)))
        placed = rng.sample(execs, max(1, len(execs) // 3))
        t, d = round(FIRST_FAULT + rng.uniform(0.5, 6.0), 3), round(rng.uniform(1.0, 6.0), 3)
        for e in sorted(placed):
            for c in core:
                if c not in side:
                    ops += [Op(t, "cut", (e, c)), Op(t, "cut", (c, e))]
                    ops += [
                        Op(round(t + d, 3), "heal", (e, c)),
                        Op(round(t + d, 3), "heal", (c, e)),
                    ]
    # one-way cuts between an executor and a core member
    for _ in range(rng.randint(0, 3)):
        e, c = rng.choice(execs), rng.choice(core)
        a, b = (e, c) if rng.random() < 0.5 else (c, e)
        t, d = round(FIRST_FAULT + rng.uniform(0.0, 10.0), 3), round(rng.uniform(0.3, 5.0), 3)
        ops += [Op(t, "cut", (a, b)), Op(round(t + d, 3), "heal", (a, b))]
    # stale and forged leaves, forged (shrunk) member lists
    for _ in range(rng.randint(1, 4)):
        t = round(FIRST_FAULT + rng.uniform(0.0, 12.0), 3)
        kind = rng.choice(("stale_leave", "forged_leave", "shrunk_list"))
        if kind == "shrunk_list":
            ops.append(Op(t, kind, (rng.choice(core), rng.choice(execs))))
        else:
            ops.append(Op(t, kind, (rng.choice(execs), rng.choice(core))))
    heal_at = round(max([op.at for op in ops] + [FIRST_FAULT]) + 0.5, 6)
    base = replace(base, ops=tuple(sorted(ops, key=lambda o: o.at)), heal_at=heal_at)
    local = tuple(
        (e, rng.choice(_LOCAL_MODES) if rng.random() < 0.4 else mode.split(":", maxsplit=1)[0])
        for e in execs
    )
    return AdvSchedule(base, local)


class AdvKind(eph.MixedKind):
    """Executors built with their own (maybe wrong) partition_handling."""

    def __init__(self, schedule: AdvSchedule) -> None:
        super().__init__(schedule.base)
        self.local = dict(schedule.local_modes)

    def build(self, sim: Sim, node: SimNode) -> Any:
        core = super().build(sim, node)
        local = self.local.get(node.name)
        if isinstance(core, EphemeralMonitorCore) and local and local != self.config.mode:
            mine = PartitionHandling(local)
            core.config = core._local_config = mine
        return core


class AdvInvariants(eph.EphemeralInvariants):
    def __init__(self, sim: Sim, kind: AdvKind, schedule: eph.EphSchedule) -> None:
        super().__init__(sim, kind, schedule)
        self.kind_config = kind.config  # the core's partition_handling

    def _eph_checks(self, now: float) -> None:
        super()._eph_checks(now)
        truth = set(self.members)
        for e in sorted(self.eph):
            node = self.sim.nodes[e]
            if not node.alive:
                continue
            core = node.cores[self.core_name]
            if core._greeted and core.config != self.kind_config:
                raise InvariantViolation(
                    "core_mode",
                    f"{e} runs {core.config.to_config()}, the core {self.kind_config.to_config()}",
                    now,
                )
            if set(core._lists) & truth and not truth <= core.core_members():
                raise InvariantViolation(
                    "never_shrunk",
                    f"{e} counts {sorted(core.core_members())}, not all of {sorted(truth)}",
                    now,
                )


def _forge(sim: Sim, checker: AdvInvariants, kind: AdvKind, op: Op) -> None:
    """Deliver a message nobody honest sends, as if from op.args[0] to op.args[1]."""
    sender, to = op.args
    target, source = sim.nodes[to], sim.nodes[sender]
    if not target.alive or target.frozen:
        return
    core = target.cores[kind.name]
    if op.action == "shrunk_list":
        if sender not in getattr(core, "_up", {}):
            return  # the executor hears only from a link it has
        msg = {
            "t": "announce",
            "c": source.creation,
            "role": "core",
            "node": sender,
            "disc": True,
            "creation": source.creation,
            "running": True,
            "down": None,
            "alarms": [],
            "members": [sender],
            "mode": kind.config.to_config(),
        }
    else:
        before = core.ephemeral_members()
        known = sender in before[0] + before[1]
        c = source.creation - 1 if op.action == "stale_leave" else source.creation
        role = "core" if op.action == "forged_leave" else "ephemeral"
        msg = {"t": "left_cluster", "c": c, "role": role, "node": sender}
    sim.call(target, kind.name, op.action, sender, core.receive(sender, msg, sim.now))
    if op.action != "shrunk_list" and known:
        up, down = core.ephemeral_members()
        if sender not in up + down:
            raise InvariantViolation(
                "not_forgotten_by_forgery", f"{to} forgot {sender} on a {op.action}", sim.now
            )


def build(schedule: AdvSchedule, trace_len: int | None = 200) -> tuple[Sim, AdvInvariants]:
    base = schedule.base
    kind = AdvKind(schedule)
    forged = [op for op in base.ops if op.action in ("stale_leave", "forged_leave", "shrunk_list")]
    honest = replace(base, ops=tuple(op for op in base.ops if op not in forged))
    sim, checker = eph.build(honest, trace_len, kind, AdvInvariants)
    for op in forged:
        sim.at(op.at, _forge, sim, checker, kind, op)
    return sim, checker  # type: ignore[return-value]


@dataclass
class AdvResult:
    schedule: AdvSchedule
    sim: Sim
    violation: InvariantViolation | None

    @property
    def ok(self) -> bool:
        return self.violation is None

    def report(self, tail: int = 60) -> str:
        s = self.schedule
        replay = f"python -m tests.sim.adversarial --seed {s.seed} --mode {s.mode.label} --trace"
        return schedule_report(s, self.sim, self.violation, tail, replay)


def run_schedule(schedule: AdvSchedule, trace_len: int | None = 200) -> AdvResult:
    sim, checker = build(schedule, trace_len)
    try:
        sim.run_until(schedule.end)
        checker.finish()
    except InvariantViolation as v:
        return AdvResult(schedule, sim, v)
    except Exception as e:
        where = traceback.extract_tb(e.__traceback__)[-1]
        text = f"{type(e).__name__}: {e} ({where.filename}:{where.lineno})"
        return AdvResult(schedule, sim, InvariantViolation("no_crash", text, sim.now))
    return AdvResult(schedule, sim, None)


def run_job(job: tuple[str, int]) -> tuple[str, int, str | None, str | None]:
    mode, seed = job
    r = run_schedule(generate(seed, mode))
    if r.ok:
        return mode, seed, None, None
    return mode, seed, r.violation.invariant if r.violation else None, r.report()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tests.sim.adversarial", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mode", default="pause_minority", help=f"{', '.join(MODES)} or 'all'")
    ap.add_argument("--sweep", type=int, default=0, help="run this many seeds per mode")
    ap.add_argument("--trace", action="store_true")
    ap.add_argument("--jobs", type=int, default=1)
    args = ap.parse_args(argv)
    modes = list(MODES) if args.mode == "all" else args.mode.split(",")
    if args.sweep:
        jobs = [(m, s) for m in modes for s in range(args.seed, args.seed + args.sweep)]
        results = run_jobs(run_job, jobs, args.jobs, chunksize=4)
        failures = [(m, s, inv) for m, s, inv, _ in results if inv is not None]
        for m, s, inv in failures:
            print(f"seed={s} mode={m}: {inv}")
        print(f"{len(jobs)} schedules, {len(failures)} failing")
        return 1 if failures else 0
    result = run_schedule(generate(args.seed, modes[0]), None if args.trace else 200)
    if args.trace:
        print(result.sim.format_trace())
    print(result.report())
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
