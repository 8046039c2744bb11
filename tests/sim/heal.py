"""Heal schedules: "a heal resumes once" (issue 15).

A heal schedule cuts links (a partition, an isolated node, a partial partition, one-way cuts),
holds the cuts until the cluster has settled, then brings the links back one at a time, in a
random order, with random gaps (each link both ways at once, or one direction after the
other). The dist layer models connect attempts as TCP does across a DROP rule: one started
while a link is cut hangs until its `connect_timeout` (NetConfig.connect_timeout), and no other
attempt for the pair starts meanwhile. That is how RabbitMQ's and our nodes met the links of a
heal in the real runs of issue 15.

The invariant, `heal_once` (pause modes without autoheal; autoheal's losers restart by
design): from the first link that comes back to the end of the run, every node that was
paused resumes its application exactly once (one ResumeApp, no PauseApp), and every node that
was running never pauses. The usual invariants of tests/sim/invariants.py are checked too.

    python -m tests.sim.heal --sweep 200 --nodes 3-7 --mode pause_minority
    python -m tests.sim.heal --seed 4 --nodes 5 --mode pause_if_all_down --trace
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from tests.sim.cli import run_jobs, sizes
from tests.sim.engine import NetConfig, Sim, SimNode
from tests.sim.invariants import InvariantViolation
from tests.sim.node_monitor import Mode, NodeMonitorKind
from tests.sim.run import Result, build
from tests.sim.schedules import FIRST_FAULT, Fault, Op, Schedule, heal_time, node_names

HEAL_MODES = ("pause_minority", "pause_if_all_down")
SETTLE = 8.0  # from the last cut to the first link back: detection, checks, pauses settle
CONNECT_TIMEOUT = 1.0  # NetKernel's default connect_timeout (the ping interval)
KINDS = ("partition", "isolate", "partial", "oneway")


def _links_of(rng: random.Random, kind: str, nodes: tuple[str, ...]) -> list[tuple[str, str]]:
    """Directed links to cut for one fault of `kind`."""
    pairs = list(combinations(nodes, 2))
    if kind == "partition":
        shuffled = list(nodes)
        rng.shuffle(shuffled)
        k = rng.randint(1, len(nodes) - 1)
        left, right = shuffled[:k], shuffled[k:]
        return [d for a in left for b in right for d in ((a, b), (b, a))]
    if kind == "isolate":
        a = rng.choice(nodes)
        return [d for b in nodes if b != a for d in ((a, b), (b, a))]
    if kind == "partial":
        chosen = rng.sample(pairs, rng.randint(1, max(1, len(pairs) // 2)))
        return [d for a, b in chosen for d in ((a, b), (b, a))]
    if kind == "oneway":
        chosen = rng.sample(pairs, rng.randint(1, min(2, len(pairs))))
        return [(a, b) if rng.random() < 0.5 else (b, a) for a, b in chosen]
    raise ValueError(f"unknown heal fault kind {kind!r}")


def generate_heal(seed: int, n_nodes: int, mode: str) -> Schedule:
    """The heal schedule named by (seed, n_nodes, mode)."""
    if not 2 <= n_nodes <= 9:
        raise ValueError(f"nodes: expected 2..9; got {n_nodes}")
    rng = random.Random(f"rabbitry-heal/{seed}/{n_nodes}/{mode}")
    nodes = node_names(n_nodes)
    preferred: tuple[str, ...] = ()
    if mode == "pause_if_all_down":
        preferred = (rng.choice(nodes),)
    cut: dict[tuple[str, str], float] = {}
    for _ in range(rng.randint(1, 2)):
        kind = rng.choice(KINDS)
        t0 = round(FIRST_FAULT + rng.uniform(0.0, 2.0), 3)
        for d in _links_of(rng, kind, nodes):
            cut.setdefault(d, t0)
    # Back one at a time: an undirected link both ways at once, or (sometimes) one direction
    # and then the other, in a random order with gaps around the ping interval.
    units: list[list[tuple[str, str]]] = []
    for a, b in sorted({tuple(sorted(d)) for d in cut}):
        dirs = [d for d in ((a, b), (b, a)) if d in cut]
        if len(dirs) == 2 and rng.random() < 0.3:
            units += [[dirs[0]], [dirs[1]]]
        else:
            units.append(dirs)
    rng.shuffle(units)
    t = round(max(cut.values()) + SETTLE, 3)
    ops = [Op(t0, "cut", d) for d, t0 in sorted(cut.items())]
    for unit in units:
        ops += [Op(t, "heal", d) for d in unit]
        t = round(t + rng.choice((rng.uniform(0.0, 0.3), rng.uniform(0.3, 2.5))), 3)
    faults = (Fault("heal", tuple(ops)),)
    return Schedule(seed, nodes, Mode.parse(mode, preferred), faults, heal_at=heal_time(faults))


def first_heal(schedule: Schedule) -> float:
    return min(op.at for op in schedule.ops() if op.action == "heal")


@dataclass
class HealOnce:
    """Counts each node's PauseApp/ResumeApp from the first heal on (the engine calls the
    kind's handlers; see HealKind)."""

    start: float
    paused_at_start: dict[str, bool] = field(default_factory=dict)
    requests: dict[str, list[tuple[float, str]]] = field(default_factory=dict)

    def snapshot(self, sim: Sim, core_name: str) -> None:
        for name, node in sim.nodes.items():
            core = node.cores.get(core_name)
            self.paused_at_start[name] = bool(core is not None and core.paused)

    def record(self, now: float, node: str, what: str) -> None:
        if now >= self.start:
            self.requests.setdefault(node, []).append((now, what))

    def check(self, now: float) -> None:
        for name, was_paused in sorted(self.paused_at_start.items()):
            got = self.requests.get(name, [])
            kinds = [w for _, w in got]
            want = ["resume"] if was_paused else []
            if kinds != want:
                state = "paused" if was_paused else "running"
                seen = ", ".join(f"{w} at t={t:.3f}" for t, w in got) or "nothing"
                raise InvariantViolation(
                    "heal_once",
                    f"{name} was {state} when the heal began (t={self.start:.3f}) and then got "
                    f"{seen}; expected {'one resume' if was_paused else 'no pause'}",
                    now,
                )


class HealKind(NodeMonitorKind):
    """NodeMonitorKind that also reports every PauseApp/ResumeApp to a HealOnce."""

    def __init__(self, *args: Any, counter: HealOnce, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.counter = counter

    def _pause(self, sim: Sim, node: SimNode, cname: str, eff: Any) -> None:
        self.counter.record(sim.now, node.name, "pause")
        super()._pause(sim, node, cname, eff)

    def _resume(self, sim: Sim, node: SimNode, cname: str, eff: Any) -> None:
        self.counter.record(sim.now, node.name, "resume")
        super()._resume(sim, node, cname, eff)


def run_heal(
    seed: int, n_nodes: int, mode: str, core: str = "auto", trace_len: int | None = 200
) -> Result:
    """Run the heal schedule named by (seed, n_nodes, mode)."""
    return run_heal_schedule(generate_heal(seed, n_nodes, mode), core, trace_len)


def run_heal_schedule(
    schedule: Schedule, core: str = "auto", trace_len: int | None = 200
) -> Result:
    """Run one heal schedule; the result carries the first violation, if any."""
    counter = HealOnce(first_heal(schedule))
    net = NetConfig(connect_timeout=CONNECT_TIMEOUT)

    def kind_factory(api: Any, members: list[str], m: Mode) -> NodeMonitorKind:
        return HealKind(api, members, m, counter=counter)

    sim, checker = build(schedule, core, trace_len, net, kind_factory=kind_factory)
    kind_name = checker.core_name
    sim.at(counter.start - 1e-6, counter.snapshot, sim, kind_name)
    try:
        sim.run_until(schedule.end)
        checker.finish()
        counter.check(sim.now)
    except InvariantViolation as v:
        return Result(schedule, sim, v, core)
    return Result(schedule, sim, None, core)


def run_heal_job(job: tuple[str, int, int]) -> tuple[str, int, int, str | None, str | None]:
    """(mode, nodes, seed) -> (mode, nodes, seed, invariant, report), for process pools."""
    mode, nodes, seed = job
    r = run_heal(seed, nodes, mode)
    if r.violation is None:
        return mode, nodes, seed, None, None
    return mode, nodes, seed, r.violation.invariant, r.report()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tests.sim.heal", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--nodes", default="5", help="a size, or a range like 3-7 for --sweep")
    ap.add_argument("--mode", default="pause_minority", help=f"{', '.join(HEAL_MODES)} or all")
    ap.add_argument("--sweep", type=int, default=0, help="seeds per size and mode")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes for --sweep")
    ap.add_argument("--trace", action="store_true")
    args = ap.parse_args(argv)
    modes = list(HEAL_MODES) if args.mode == "all" else args.mode.split(",")
    nodes = sizes(args.nodes)
    if args.sweep:
        jobs = [
            (mode, n, seed)
            for mode in modes
            for n in nodes
            for seed in range(args.seed, args.seed + args.sweep)
        ]
        results = run_jobs(run_heal_job, jobs, args.jobs, chunksize=8)
        failed = [r for r in results if r[3] is not None]
        for mode, n, seed, inv, _ in failed:
            print(f"seed={seed} nodes={n} mode={mode}: {inv}")
        print(f"{len(results)} heal schedules, {len(failed)} failing")
        if failed:
            print("\nthe first:\n" + (failed[0][4] or ""))
        return 1 if failed else 0
    r = run_heal(args.seed, nodes[0], modes[0], trace_len=None if args.trace else 200)
    if args.trace:
        print(r.sim.format_trace())
    print(r.report())
    return 0 if r.ok else 1


if __name__ == "__main__":
    sys.exit(main())
