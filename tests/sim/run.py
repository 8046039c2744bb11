"""Run one schedule against the node monitor, report, replay, shrink.

    python -m tests.sim.run --seed 17 --nodes 5 --mode pause_minority --trace
    python -m tests.sim.run --seed 17 --nodes 5 --mode autoheal --shrink --save small.json
    python -m tests.sim.run --load small.json --trace
    python -m tests.sim.run --sweep 200 --nodes 3-7 --mode all

A failure prints the seed, the schedule, the invariant, a trace tail and the command that
replays it. Nothing here reads a clock: a run is a function of its arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.sim.cli import schedule_report, sizes
from tests.sim.engine import NetConfig, Sim
from tests.sim.faults import apply_fault, heal_all
from tests.sim.invariants import InvariantViolation, NodeMonitorInvariants
from tests.sim.node_monitor import NodeMonitorKind, core_api
from tests.sim.schedules import MODES, Op, Schedule, generate

TAIL = 60


@dataclass
class Result:
    schedule: Schedule
    sim: Sim
    violation: InvariantViolation | None
    core: str | Any = "auto"
    lossy: bool = False

    @property
    def ok(self) -> bool:
        return self.violation is None

    def command(self) -> str:
        s = self.schedule
        cmd = (
            f"python -m tests.sim.run --seed {s.seed} --nodes {len(s.nodes)} --mode {s.mode.label}"
        )
        if isinstance(self.core, str) and self.core != "auto":
            cmd += f" --core {self.core}"
        if self.lossy:
            cmd += " --lossy"
        return cmd

    def report(self, tail: int = TAIL) -> str:
        replay = f"{self.command()} --trace"
        return schedule_report(self.schedule, self.sim, self.violation, tail, replay)


def _apply(sim: Sim, checker: NodeMonitorInvariants, op: Op) -> None:
    checker.fault()
    if not apply_fault(sim, op):
        raise ValueError(f"unknown op {op}")


def _heal_everything(sim: Sim, checker: NodeMonitorInvariants) -> None:
    checker.fault()
    heal_all(sim)
    dead = [name for name, node in sim.nodes.items() if not node.alive]
    if dead:
        sim.boot(*dead)


def build(
    schedule: Schedule,
    core: str | Any = "auto",
    trace_len: int | None = 200,
    net: NetConfig | None = None,
    kind_factory: Any = NodeMonitorKind,
    *,
    before_boot: Any = None,
) -> tuple[Sim, NodeMonitorInvariants]:
    """A Sim with the schedule's nodes booted at t=0 and its ops queued, plus the checker.
    `kind_factory(api, members, mode)` makes the node monitor kind (tests/sim/heal.py wraps
    it to count pauses and resumes)."""
    sim = Sim(schedule.seed, net=net, trace_len=trace_len)
    members = list(schedule.nodes)
    kind = kind_factory(core_api(core), members, schedule.mode)
    sim.add_kind(kind)
    for name in members:
        sim.add_node(name)
    checker = NodeMonitorInvariants(
        sim,
        kind.name,
        members,
        schedule.mode,
        heal_at=schedule.heal_at,
        liveness_bound=schedule.liveness_bound,
        quiet_window=schedule.quiet_window,
        keepalive_interval=kind.keepalive_interval,
        down_ping_interval=kind.down_ping_interval,
    )
    sim.add_observer(checker)
    for op in sorted(schedule.ops(), key=lambda o: o.at):
        sim.at(op.at, _apply, sim, checker, op)
    sim.at(schedule.heal_at, _heal_everything, sim, checker)
    sim.at(checker.live_from, checker.start_quiet)
    if before_boot is not None:  # more kinds or observers (tests/sim/singleton.py)
        before_boot(sim, kind)
    sim.boot(*members)
    return sim, checker


def run_schedule(
    schedule: Schedule, core: str | Any = "auto", trace_len: int | None = 200, lossy: bool = False
) -> Result:
    """Run the schedule to its end; the result carries the first violation, if any."""
    sim, checker = build(schedule, core, trace_len, NetConfig(lossy=lossy))
    try:
        sim.run_until(schedule.end)
        checker.finish()
    except InvariantViolation as v:
        return Result(schedule, sim, v, core, lossy)
    except Exception as e:  # a core (or effect) that raises is a failure of the run too
        where = traceback.extract_tb(e.__traceback__)[-1]
        text = f"{type(e).__name__}: {e} ({where.filename}:{where.lineno})"
        return Result(schedule, sim, InvariantViolation("no_crash", text, sim.now), core, lossy)
    return Result(schedule, sim, None, core, lossy)


def run_seed(
    seed: int,
    nodes: int,
    mode: str,
    *,
    core: str | Any = "auto",
    trace_len: int | None = 200,
    lossy: bool = False,
) -> Result:
    return run_schedule(generate(seed, nodes, mode), core, trace_len, lossy)


def run_job(job: tuple[str, int, int, str]) -> tuple[str, int, int, str | None, str | None]:
    """(mode, nodes, seed, core) -> (mode, nodes, seed, invariant, report): for process pools
    (only strings cross the process boundary)."""
    mode, nodes, seed, core = job
    r = run_seed(seed, nodes, mode, core=core)
    if r.violation is None:
        return mode, nodes, seed, None, None
    return mode, nodes, seed, r.violation.invariant, r.report()


def shrink(result: Result) -> Result:
    """The smallest failing schedule reachable by dropping faults and cut links one at a time
    while the same invariant still fails (greedy; a local minimum, not a global one)."""
    assert result.violation is not None
    want = result.violation.invariant
    best = result
    progress = True
    while progress:
        progress = False
        for cand in best.schedule.smaller():
            r = run_schedule(cand, best.core, lossy=best.lossy)
            if r.violation is not None and r.violation.invariant == want:
                best, progress = r, True
                break
    return best


def _modes(arg: str) -> list[str]:
    return list(MODES) if arg == "all" else arg.split(",")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.sim.run", description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--nodes", default="5", help="a size, or a range like 3-7 for --sweep")
    ap.add_argument(
        "--mode",
        default="pause_minority",
        help=f"{', '.join(MODES)}; a comma list or 'all' for --sweep",
    )
    ap.add_argument("--core", default="auto", choices=("auto", "real", "stub"))
    ap.add_argument(
        "--lossy",
        action="store_true",
        help="frames sent across a cut are lost even if the connection survives",
    )
    ap.add_argument("--trace", action="store_true", help="print the whole trace")
    ap.add_argument("--tail", type=int, default=TAIL)
    ap.add_argument("--shrink", action="store_true", help="shrink a failing schedule")
    ap.add_argument("--save", type=Path, help="write the (shrunk) schedule as JSON")
    ap.add_argument("--load", type=Path, help="run a schedule from a JSON file")
    ap.add_argument(
        "--sweep", type=int, default=0, help="run this many seeds from --seed per size and mode"
    )
    args = ap.parse_args(argv)

    if args.sweep:
        failures = 0
        for mode in _modes(args.mode):
            for n in sizes(args.nodes):
                for seed in range(args.seed, args.seed + args.sweep):
                    r = run_seed(seed, n, mode, core=args.core, lossy=args.lossy)
                    if not r.ok:
                        failures += 1
                        print(f"seed={seed} nodes={n} mode={mode}: {r.violation}")
        print(f"{failures} failing schedules")
        return 1 if failures else 0

    if args.load:
        schedule = Schedule.from_json(json.loads(args.load.read_text()))
    else:
        schedule = generate(args.seed, sizes(args.nodes)[0], args.mode)
    result = run_schedule(schedule, args.core, None if args.trace else 200, args.lossy)
    if args.trace:
        print(result.sim.format_trace())
    print(result.report(args.tail))
    if args.load:
        print(f"(schedule from {args.load}: replay with --load {args.load})")
    if not result.ok and args.shrink:
        result = shrink(result)
        print("\nsmallest failing schedule found:")
        print(result.report(args.tail))
    if args.save:
        args.save.write_text(json.dumps(result.schedule.to_json(), indent=1) + "\n")
        print(
            f"schedule written to {args.save}; replay: python -m tests.sim.run --load {args.save}"
        )
    return 0 if result.ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # `... | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
