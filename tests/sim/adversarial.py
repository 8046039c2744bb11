"""An adversarial generator for ephemeral members (issue 24): everything tests/sim/ephemeral.py
does, plus messages nobody honest sends, settings nobody meant, core membership changes under
attached executors, names taken by the wrong process, and a harsher executor network.

    python -m tests.sim.adversarial --seed 7 --mode pause_minority --trace
    python -m tests.sim.adversarial --sweep 400 --mode all --jobs 1    # 2,000 schedules

On top of ephemeral.py's churn and core faults, a schedule may have:
- up to 32 executors (ephemeral nodes), some placed deliberately on one side of a core
  partition (cut from every core member of the other side), and one-way cuts between an
  executor and a core member;
- lossy executor links (frames sent across a cut are lost though the connection survives:
  harsher than TCP) and a connect timeout on executor-core pairs (a connect that meets a cut
  hangs for 1 s, as NetKernel's does); the core's own links stay as in every other schedule;
- mode mismatches: executors whose own partition_handling differs from the core's;
- stale leaves (an executor's leave with an older creation) and forged ones (a leave that
  claims the core role), delivered to core members; forged member lists (a core member's
  record that lists only itself, what `rabbitry cluster leave` makes it say), to executors;
- a core membership change while executors are attached: a member runs `cluster leave`
  (and is stopped soon after, or stays up as a cluster of one to the end), a dead member is
  forgotten on another, or a new node joins;
- names: a role flip (an ephemeral process under a dead core member's name, newer creation,
  role ephemeral; the dist layer refuses it, or in other schedules it is let in and its
  messages reach the cores), and a takeover (a copy of a frozen node's config takes its
  name, as the dist layer allows when the old process is silent).
tests/sim/adversarial_ops.py says how each of these is performed and why so.

Invariants: every invariant of ephemeral.py (the core ones of invariants.py included, with
the members as the membership ops change them, and a core name held by an impostor counted
as down), plus core_mode, never_shrunk, not_forgotten_by_forgery, moves, restarts and
impostor_not_counted (tests/sim/adversarial_checks.py), and same_decisions:

same_decisions runs the schedule's core-only projection: the same core nodes and every
operation on them (core faults, membership changes, impostors, takeovers of core members),
without the executors or anything done to or by them, and compares what each core node
decided in the two runs: the list of its PauseApp (with the reason), ResumeApp, cluster files
written and autoheal log lines, each with its virtual time, compared for equality. Why they
must be equal: both runs draw their random numbers keyed (engine.py: a node's creation,
phase, weight and app delays from its own stream, a frame's latency and a handshake's
duration from a hash of its link and the instant), so executor traffic shifts no draw of the
core's; a core node runs no decision pass on an executor's message, nodeup or nodedown
(core.py returns before it), and what it sends to executors goes over other links. So the
core's events, and with them its decisions, are the same in both runs to the last bit,
unless an executor changed a core decision: which is what this checks. (Virtual times are
compared too: a decision taken later is a changed decision.)
One core-to-core message exists only because of executors: ephemeral_left (a core node tells
the others that an executor left). On a real link it counts as a tick and keeps its place in
the TCP stream, so it can move the instant a core node notices a peer down by up to one tick
interval (net_ticktime/4) and hold back a core frame by one latency; and sent to a peer whose
link has just gone (before the core has its nodedown), it makes the dist layer connect, up
to a ping interval before the core's own ping would. Timing, not a decision rule (the sweep
found all three). Here it travels as side traffic (Network.side_traffic: no tick, no place
in the connection's order, no connect of its own), so that the comparison can be exact; it
is still delivered over a live link, and the decision pass it runs on the receiving core
node is compared like any other.

Not covered: the dist handshake itself (a duplicate of a live, answering node never gets a
link, so nothing of it reaches a core: tests/dist/test_name_check.py and the real-process
tests/rabbitry/test_names_verified.py test the refusals); a membership change while the core
is not whole (it waits until it is, as an operator would: a leave that misses a member needs
a forget there, in RabbitMQ as here); more than one membership change per schedule, cores
of fewer than two members after one, and a forged member list in a schedule whose core
shrinks (in a core of two the one other member's list is all there is to agree with, so
one word may drop a member there by design); a leaver that restarts (it keeps no record of
whom it left, so executors that reach only it are back to waiting for the others' lists); a
core member's dead name held by an impostor during a membership change (the change waits);
lossy or slow links between core members
(tests/sim/run.py --lossy and tests/sim/heal.py have those); `restarts` in modes other than
autoheal (under the pause modes an executor follows a majority, not a member: `follows`).
"""

from __future__ import annotations

import random
import sys
import traceback
from dataclasses import dataclass, replace
from typing import Any

from monitors.effects import Connect
from tests.sim import ephemeral as eph
from tests.sim.adversarial_checks import AdvInvariants, compare_decisions
from tests.sim.adversarial_ops import FORGERIES, MEMBERSHIP, NAMES, AdvKind, Decision, apply_op
from tests.sim.cli import mode_seed_main, schedule_report
from tests.sim.engine import NetConfig, Sim, SimNode
from tests.sim.faults import apply_fault, heal_all
from tests.sim.invariants import InvariantViolation
from tests.sim.schedules import FIRST_FAULT, MODES, Op

MAX_EXECUTORS = 32
CONNECT_TIMEOUT = 1.0  # NetKernel's default connect_timeout (the ping interval)
_LOCAL_MODES = ("ignore", "pause_minority", "autoheal")


@dataclass(frozen=True)
class AdvSchedule:
    base: eph.EphSchedule
    local_modes: tuple[tuple[str, str], ...]  # executor -> its own (maybe wrong) mode
    lossy: tuple[str, ...] = ()  # executors whose links to the core are lossy
    connect_timeout: float = 0.0  # on executor-core pairs
    joiners: tuple[str, ...] = ()  # core nodes that start alone and join later

    def __getattr__(self, name: str) -> Any:  # the base schedule's fields
        return getattr(self.base, name)

    def describe(self) -> str:
        wrong = [f"{e}={m}" for e, m in self.local_modes if m != self.base.mode.name]
        extra = []
        if wrong:
            extra.append(f"local modes that differ from the core's: {', '.join(wrong)}")
        if self.lossy:
            extra.append(f"lossy executor links: {', '.join(self.lossy)}")
        if self.connect_timeout:
            extra.append(f"executor-core connect timeout: {self.connect_timeout:g} s")
        if self.joiners:
            extra.append(f"started alone, to join: {', '.join(self.joiners)}")
        return self.base.describe() + "".join(f"\n  {line}" for line in extra)

    def core_only(self) -> AdvSchedule:
        """The projection without executors: the core nodes, every op that only they are in
        (faults, membership, names), and the same timeline (heal_at, end)."""
        core = set(self.base.core) | set(self.joiners)
        ops = tuple(
            op
            for op in self.base.ops
            if op.action not in FORGERIES and op.args and _names_in(op) <= core
        )
        base = replace(self.base, ephemeral=(), seeds=(), attach_at=(), ops=ops)
        return AdvSchedule(base, (), (), 0.0, self.joiners)


def _names_in(op: Op) -> set[str]:
    """The nodes an op is about (an impostor's variant and seeds are not nodes it touches)."""
    if op.action in ("impostor", "core_leave"):
        return {op.args[0]}
    return set(op.args)


def _touched(ops: list[Op], name: str, t0: float, t1: float) -> bool:
    """Whether an op between t0 and t1 changes `name`'s life (a cut to it does not)."""
    return any(
        t0 <= op.at <= t1 and op.action not in ("cut", "heal") and name in _names_in(op)
        for op in ops
    )


def _membership_op(
    rng: random.Random, base: eph.EphSchedule, ops: list[Op], preferred: set[str]
) -> tuple[list[Op], set[str], tuple[str, ...], str | None]:
    """(ops, gone, joiners, the node whose membership changes) for one membership change."""
    core = list(base.core)
    t = round(FIRST_FAULT + rng.uniform(0.5, 12.0), 3)
    kind = rng.choice(("leave", "forget", "join"))
    if kind == "join":
        w = f"c{len(core) + 1}@sim"
        x = rng.choice(core)
        tb = round(max(0.0, t - rng.uniform(0.5, 3.0)), 3)
        return (
            [
                Op(tb, "boot", (w,)),
                Op(round(tb + 0.1, 3), "dial", (w, x)),
                Op(t, "core_join", (w, x)),
            ],
            set(),
            (w,),
            w,
        )
    # never a preferred node (pause_if_all_down would pause the rest for good: an operator
    # mistake, not ours), never one that the core faults touch from then on
    fit = [c for c in core if c not in preferred and not _touched(ops, c, t - 1.0, 1e9)]
    if not fit:
        return [], set(), (), None
    x = rng.choice(fit)
    if kind == "leave":  # decommissioned soon after, or a cluster of one to the end
        stop = f"{rng.uniform(0.1, 1.5):.3f}" if rng.random() < 0.5 else "-"
        return [Op(t, "core_leave", (x, stop))], set(), (), x
    y = rng.choice([c for c in core if c != x])
    tf = round(t + rng.uniform(1.5, 5.0), 3)
    return [Op(t, "crash", (x,)), Op(tf, "core_forget", (y, x))], {x}, (), x


def _role_flip(
    rng: random.Random, core: tuple[str, ...], ops: list[Op], busy: set[str]
) -> list[Op]:
    t0 = round(FIRST_FAULT + rng.uniform(0.0, 10.0), 3)
    t1 = round(t0 + rng.uniform(0.2, 2.0), 3)
    t2 = round(t1 + rng.uniform(1.0, 6.0), 3)
    t3 = round(t2 + rng.uniform(0.05, 1.0), 3)
    fit = [c for c in core if c not in busy and not _touched(ops, c, t0 - 0.5, t3 + 0.5)]
    if not fit:
        return []
    c = rng.choice(fit)
    variant = "admitted" if rng.random() < 0.6 else "refused"
    others = [m for m in core if m != c]
    seeds = sorted(rng.sample(others, rng.randint(1, len(others))))
    return [
        Op(t0, "crash", (c,)),
        Op(t1, "impostor", (c, variant, *seeds)),
        Op(t2, "impostor_end", (c,)),
        Op(t3, "boot", (c,)),
    ]


def _takeover(rng: random.Random, names: list[str], ops: list[Op], gone: set[str]) -> list[Op]:
    t0 = round(FIRST_FAULT + rng.uniform(0.0, 10.0), 3)
    t1 = round(t0 + rng.uniform(0.3, 3.0), 3)
    fit = [n for n in names if n not in gone and not _touched(ops, n, t0 - 0.5, t1 + 0.5)]
    if not fit:
        return []
    x = rng.choice(fit)
    return [Op(t0, "freeze", (x,)), Op(t1, "takeover", (x,))]


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
    local = tuple(
        (e, rng.choice(_LOCAL_MODES) if rng.random() < 0.4 else mode.split(":", maxsplit=1)[0])
        for e in execs
    )
    # a harsher executor network
    lossy = tuple(sorted(e for e in execs if rng.random() < 0.3)) if rng.random() < 0.5 else ()
    connect_timeout = CONNECT_TIMEOUT if rng.random() < 0.5 else 0.0
    # core membership, names
    gone, joiners, core_ops = set(base.gone), (), False
    moved: str | None = None
    if rng.random() < 0.45:
        new, left, joiners, moved = _membership_op(rng, base, ops, set(base.mode.nodes))
        ops += new
        gone |= left
        core_ops = core_ops or bool(new)
    if rng.random() < 0.3:
        new = _role_flip(rng, core, ops, {moved} if moved else set())
        ops += new
        core_ops = core_ops or bool(new)
    if rng.random() < 0.3:
        # a core member's copy starts from the configured members: not after a change
        names = list(execs) + ([] if moved else list(core))
        new = _takeover(rng, names, ops, gone)
        ops += new
        core_ops = core_ops or any(set(op.args) & set(core) for op in new)
    seeds = dict(base.seeds)
    if moved and not joiners:  # an executor needs a seed that stays in the core
        for e, s in seeds.items():
            if set(s) <= {moved}:
                seeds[e] = tuple(sorted({*s, min(c for c in core if c != moved)}))
    heal_at = round(max([op.at for op in ops] + [FIRST_FAULT]) + 0.5, 6)
    base = replace(
        base,
        ops=tuple(sorted(ops, key=lambda o: o.at)),
        heal_at=heal_at,
        gone=frozenset(gone),
        seeds=tuple(seeds.items()),
        core_faults=base.core_faults or core_ops,
    )
    return AdvSchedule(base, local, lossy, connect_timeout, joiners)


# ---- running a schedule -------------------------------------------------------------------


def _apply(sim: Sim, checker: AdvInvariants | None, kind: AdvKind, op: Op) -> None:
    if checker is not None and op.action not in FORGERIES:
        checker.fault()
        checker.op(op)
    if apply_fault(sim, op):
        return
    if op.action == "leave":  # an executor's leave (ephemeral.py's churn)
        node = sim.nodes[op.args[0]]
        if node.alive and not node.frozen:
            core = node.cores[kind.name]
            sim.call(node, kind.name, "leave", None, core.left_cluster(node.name, sim.now))
        return
    done = apply_op(sim, kind, op)
    if done is None:
        raise ValueError(f"unknown op {op}")
    if done and checker is not None:
        if op.action in MEMBERSHIP:
            checker.membership_changed()
        elif op.action in NAMES:
            checker.op(Op(sim.now, "boot", op.args[:1]))  # a new incarnation came up
            checker.after_change(sim)


def _heal_everything(sim: Sim, checker: AdvInvariants | None, kind: AdvKind) -> None:
    if checker is not None:
        checker.fault()
    thawed = heal_all(sim)
    dead = [n for n, node in sim.nodes.items() if not node.alive and n not in kind.gone]
    if checker is not None:
        for name in thawed:
            checker.thawed_at[name] = sim.now
        for n in dead:
            checker.op(Op(sim.now, "boot", (n,)))
    if dead:
        sim.boot(*dead)


def _executor_caused(name: str, msg: Any) -> bool:
    """The core message that exists only because of executors (see the docstring)."""
    return isinstance(msg, dict) and msg.get("t") == "ephemeral_left"


def build(
    schedule: AdvSchedule, trace_len: int | None = 200, check: bool = True
) -> tuple[Sim, AdvKind, AdvInvariants | None]:
    """The simulation of `schedule` (keyed randomness: see the docstring), its kind (which
    records the core's decisions) and, if `check`, its invariant checker."""
    base = schedule.base
    sim = Sim(base.seed, net=NetConfig(), trace_len=trace_len, keyed=True)
    kind = AdvKind(schedule, list(base.core))
    sim.add_kind(kind)
    kind.watch_logs(sim)
    for name in (*base.core, *schedule.joiners, *base.ephemeral):
        sim.add_node(name)
    for w in schedule.joiners:  # started alone: its own cluster of one
        sim.nodes[w].disk[kind.name] = ([w], [w], [w])
    net = sim.net
    net.side_traffic = _executor_caused
    for e in base.ephemeral:
        for c in (*base.core, *schedule.joiners):
            if e in schedule.lossy:
                net.lossy_links |= {(e, c), (c, e)}
            if schedule.connect_timeout:
                net.connect_timeouts[(min(e, c), max(e, c))] = schedule.connect_timeout
    checker = AdvInvariants(sim, kind, schedule) if check else None
    if checker is not None:
        sim.add_observer(checker)
        connect = sim._common[Connect]

        def watched(node: SimNode, cname: str, eff: Connect) -> None:
            checker.connecting(node.name, eff.node)
            connect(node, cname, eff)

        sim._common[Connect] = watched
    kind.reapply = lambda op: _apply(sim, checker, kind, op)
    for op in base.ops:
        sim.at(op.at, _apply, sim, checker, kind, op)
    for e, at in base.attach_at:
        if at > 0:
            sim.at(at, _apply, sim, checker, kind, Op(at, "boot", (e,)))
    sim.at(base.heal_at, _heal_everything, sim, checker, kind)
    if checker is not None:
        sim.at(checker.live_from, checker.start_quiet)
    sim.boot(*base.core, *(e for e, at in base.attach_at if at == 0))
    return sim, kind, checker


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


def _crash_violation(sim: Sim, e: Exception) -> InvariantViolation:
    where = traceback.extract_tb(e.__traceback__)[-1]
    text = f"{type(e).__name__}: {e} ({where.filename}:{where.lineno})"
    return InvariantViolation("no_crash", text, sim.now)


def decisions_of(schedule: AdvSchedule) -> dict[str, list[Decision]]:
    """What each core node decides in `schedule`, run without invariant checks."""
    sim, kind, _ = build(schedule, 0, check=False)
    sim.run_until(schedule.end)
    return kind.decisions


def run_schedule(schedule: AdvSchedule, trace_len: int | None = 200) -> AdvResult:
    """Run `schedule` under every invariant, then its core-only projection (same_decisions)."""
    sim, kind, checker = build(schedule, trace_len)
    assert checker is not None
    try:
        sim.run_until(schedule.end)
        checker.finish()
    except InvariantViolation as v:
        return AdvResult(schedule, sim, v)
    except Exception as e:
        return AdvResult(schedule, sim, _crash_violation(sim, e))
    try:
        alone = decisions_of(schedule.core_only())
    except Exception as e:
        return AdvResult(schedule, sim, _crash_violation(sim, e))
    return AdvResult(schedule, sim, compare_decisions(kind.decisions, alone))


def run_job(job: tuple[str, int]) -> tuple[str, int, str | None, str | None]:
    mode, seed = job
    r = run_schedule(generate(seed, mode))
    if r.ok:
        return mode, seed, None, None
    return mode, seed, r.violation.invariant if r.violation else None, r.report()


def main(argv: list[str] | None = None) -> int:
    return mode_seed_main(
        "python -m tests.sim.adversarial",
        __doc__ or "",
        MODES,
        run_job,
        lambda seed, mode, trace_len: run_schedule(generate(seed, mode), trace_len),
        argv=argv,
    )


if __name__ == "__main__":
    sys.exit(main())
