"""Seeded random fault schedules.

A schedule is plain data (a list of faults, each a list of timed operations), generated from
its own `random.Random(seed)`, separate from the engine's RNG. Being data is what allows
shrinking (drop faults, keep the rest) and printing; drawing it from the seed alone means
`--seed N --nodes K --mode M` names one schedule exactly.

Every schedule lets the cluster form first (`FIRST_FAULT` s), then applies 1 to 4 faults that
start within `FAULT_WINDOW` s and may overlap, then heals everything at `heal_at` (links healed, frozen nodes thawed, crashed
nodes booted) and runs a quiet period of `liveness_bound + quiet_window` seconds.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from itertools import combinations
from typing import Any

from tests.sim.node_monitor import Mode

FIRST_FAULT = 1.0  # the cluster forms (boot, connect, node_up: < 0.1 s) before any fault
FAULT_WINDOW = 8.0  # faults start within [FIRST_FAULT, FIRST_FAULT + FAULT_WINDOW]
LIVENESS_BOUND = 30.0  # after the final heal, the cluster must be whole within this
QUIET_WINDOW = 20.0  # then this long with only steady keepalive traffic

MODES = (
    "ignore",
    "pause_minority",
    "pause_if_all_down:ignore",
    "pause_if_all_down:autoheal",
    "autoheal",
)
KINDS = ("partition", "partial", "oneway", "flap", "crash", "freeze", "blip", "double_cut")


@dataclass(frozen=True)
class Op:
    """One low-level action at a virtual time: cut/heal take (src, dst) (one direction)."""

    at: float
    action: str  # cut | heal | crash | boot | freeze | thaw
    args: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.at:8.3f} {self.action} {' '.join(self.args)}"


@dataclass(frozen=True)
class Fault:
    """A named group of ops that belong together (a cut and its heal)."""

    kind: str
    ops: tuple[Op, ...]

    @property
    def start(self) -> float:
        return min(op.at for op in self.ops)

    @property
    def end(self) -> float:
        return max(op.at for op in self.ops)

    def __str__(self) -> str:
        return f"{self.kind}: " + "; ".join(str(op).strip() for op in self.ops)

    def without_episodes(self) -> Iterator[Fault]:
        """This fault minus one of its cut episodes, for each, if it has more than one."""
        cuts = sorted({op.at for op in self.ops if op.action == "cut"})
        heals = sorted({op.at for op in self.ops if op.action == "heal"})
        if len(cuts) < 2 or len(heals) != len(cuts):
            return
        for tc, th in zip(cuts, heals, strict=True):
            ops = tuple(
                op
                for op in self.ops
                if not (op.action == "cut" and op.at == tc)
                and not (op.action == "heal" and op.at == th)
            )
            yield Fault(self.kind, ops)


@dataclass(frozen=True)
class Schedule:
    seed: int
    nodes: tuple[str, ...]
    mode: Mode
    faults: tuple[Fault, ...]
    liveness_bound: float = LIVENESS_BOUND
    quiet_window: float = QUIET_WINDOW
    heal_at: float = field(default=0.0)

    @property
    def end(self) -> float:
        return self.heal_at + self.liveness_bound + self.quiet_window

    def ops(self) -> Iterator[Op]:
        for f in self.faults:
            yield from f.ops

    def with_faults(self, faults: tuple[Fault, ...]) -> Schedule:
        """The same schedule with other faults (for shrinking); heal_at is recomputed."""
        return replace(self, faults=faults, heal_at=heal_time(faults))

    def smaller(self) -> Iterator[Schedule]:
        """Candidates one step smaller: a whole fault dropped; one cut episode (the cuts at
        one instant and the heals that end them) dropped from a fault with several (a flap);
        one link (its cuts and heals) dropped from a fault that cuts several."""
        for i in range(len(self.faults)):
            yield self.with_faults(self.faults[:i] + self.faults[i + 1 :])
        for i, f in enumerate(self.faults):
            for g in f.without_episodes():
                yield self.with_faults((*self.faults[:i], g, *self.faults[i + 1 :]))
        for i, f in enumerate(self.faults):
            links = sorted(
                {frozenset(op.args) for op in f.ops if op.action in ("cut", "heal")}, key=sorted
            )
            if len(links) < 2:
                continue
            for link in links:
                ops = tuple(op for op in f.ops if frozenset(op.args) != link)
                g = Fault(f.kind, ops)
                yield self.with_faults((*self.faults[:i], g, *self.faults[i + 1 :]))

    def to_json(self) -> dict[str, Any]:
        """A replayable form (shrunk schedules are not named by a seed alone)."""
        return {
            "seed": self.seed,
            "nodes": list(self.nodes),
            "mode": self.mode.label,
            "preferred": list(self.mode.nodes),
            "faults": [
                {"kind": f.kind, "ops": [[op.at, op.action, *op.args] for op in f.ops]}
                for f in self.faults
            ],
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> Schedule:
        faults = tuple(
            Fault(f["kind"], tuple(Op(o[0], o[1], tuple(o[2:])) for o in f["ops"]))
            for f in d["faults"]
        )
        mode = Mode.parse(d["mode"], tuple(d.get("preferred", ())))
        return Schedule(d["seed"], tuple(d["nodes"]), mode, faults, heal_at=heal_time(faults))

    def describe(self) -> str:
        head = f"seed={self.seed} nodes={len(self.nodes)} mode={self.mode.label}"
        if self.mode.nodes:
            head += f" preferred={','.join(self.mode.nodes)}"
        lines = [head, *(f"  {f}" for f in self.faults)]
        lines.append(f"  {self.heal_at:8.3f} heal everything; end at {self.end:.3f}")
        return "\n".join(lines)


def node_names(n: int) -> tuple[str, ...]:
    return tuple(f"n{i}@sim" for i in range(1, n + 1))


def heal_time(faults: tuple[Fault, ...]) -> float:
    return round(max((f.end for f in faults), default=FIRST_FAULT) + 0.5, 6)


def _both(a: str, b: str, at: float, action: str) -> list[Op]:
    return [Op(at, action, (a, b)), Op(at, action, (b, a))]


def _split(rng: random.Random, nodes: tuple[str, ...]) -> tuple[list[str], list[str]]:
    shuffled = list(nodes)
    rng.shuffle(shuffled)
    k = rng.randint(1, len(nodes) - 1)
    return sorted(shuffled[:k]), sorted(shuffled[k:])


def _duration(rng: random.Random) -> float:
    """Mostly longer than detection (net_ticktime 1 s), sometimes just around it."""
    return round(rng.choice((rng.uniform(0.3, 1.5), rng.uniform(1.5, 6.0), rng.uniform(2, 4))), 3)


def _cut_links(links: list[tuple[str, str]], t0: float, t1: float, kind: str) -> Fault:
    ops = [op for a, b in links for op in _both(a, b, t0, "cut")]
    ops += [op for a, b in links for op in _both(a, b, t1, "heal")]
    return Fault(kind, tuple(ops))


def make_fault(rng: random.Random, kind: str, nodes: tuple[str, ...], t0: float) -> Fault:
    """One fault of `kind` starting at t0."""
    pairs = list(combinations(nodes, 2))
    t0 = round(t0, 3)
    if kind == "partition":
        left, right = _split(rng, nodes)
        links = [(a, b) for a in left for b in right]
        return _cut_links(links, t0, round(t0 + _duration(rng), 3), kind)
    if kind == "partial":
        k = rng.randint(1, max(1, len(pairs) // 2))
        links = sorted(rng.sample(pairs, k))
        return _cut_links(links, t0, round(t0 + _duration(rng), 3), kind)
    if kind == "oneway":
        links = rng.sample(pairs, rng.randint(1, min(2, len(pairs))))
        ops: list[Op] = []
        t1 = round(t0 + _duration(rng), 3)
        for a, b in sorted(links):
            src, dst = (a, b) if rng.random() < 0.5 else (b, a)
            ops += [Op(t0, "cut", (src, dst)), Op(t1, "heal", (src, dst))]
        return Fault(kind, tuple(ops))
    if kind == "flap":
        if rng.random() < 0.5:
            left, right = _split(rng, nodes)
            links = [(a, b) for a in left for b in right]
        else:
            links = [rng.choice(pairs)]
        ops = []
        t = t0
        for _ in range(rng.randint(2, 5)):
            up = round(t + rng.uniform(0.1, 1.5), 3)
            ops += [op for a, b in links for op in _both(a, b, t, "cut")]
            ops += [op for a, b in links for op in _both(a, b, up, "heal")]
            t = round(up + rng.uniform(0.1, 1.2), 3)
        return Fault(kind, tuple(ops))
    if kind == "crash":
        n = rng.choice(nodes)
        down = rng.choice((round(rng.uniform(0.0, 0.2), 3), _duration(rng)))
        return Fault(kind, (Op(t0, "crash", (n,)), Op(round(t0 + down, 3), "boot", (n,))))
    if kind == "freeze":
        n = rng.choice(nodes)
        return Fault(
            kind, (Op(t0, "freeze", (n,)), Op(round(t0 + _duration(rng), 3), "thaw", (n,)))
        )
    if kind == "blip":
        if rng.random() < 0.5:
            left, right = _split(rng, nodes)
            links = [(a, b) for a in left for b in right]
        else:
            links = [rng.choice(pairs)]
        return _cut_links(links, t0, round(t0 + rng.uniform(0.05, 0.9), 3), kind)
    if kind == "double_cut":
        links = sorted(rng.sample(pairs, 2))
        return _cut_links(links, t0, round(t0 + _duration(rng), 3), kind)
    raise ValueError(f"unknown fault kind {kind!r}")


def generate(seed: int, n_nodes: int, mode: str) -> Schedule:
    """The schedule named by (seed, n_nodes, mode)."""
    if not 2 <= n_nodes <= 9:
        raise ValueError(f"nodes: expected 2..9; got {n_nodes}")
    rng = random.Random(f"rabbitry-sim/{seed}/{n_nodes}/{mode}")
    nodes = node_names(n_nodes)
    preferred: tuple[str, ...] = ()
    if mode.startswith("pause_if_all_down"):
        k = 1 if rng.random() < 0.7 else 2
        preferred = tuple(sorted(rng.sample(nodes, k)))
    faults = []
    for _ in range(rng.randint(1, 4)):
        kind = rng.choice(KINDS)
        t0 = FIRST_FAULT + rng.uniform(0.0, FAULT_WINDOW)
        faults.append(make_fault(rng, kind, nodes, t0))
    faults.sort(key=lambda f: f.start)
    ft = tuple(faults)
    return Schedule(seed, nodes, Mode.parse(mode, preferred), ft, heal_at=heal_time(ft))
