"""Cluster singletons in the simulator: the node monitor and SingletonCore on every core node,
one singleton child in every node's application tree, and the usual fault schedules.

    python -m tests.sim.singleton --sweep 300 --mode all        # 300 schedules per mode
    python -m tests.sim.singleton --seed 7 --nodes 5 --mode pause_minority --trace

A node's guard runs while its application runs: the node monitor's PauseApp stops it (the
instance stops, then the lease is released), ResumeApp starts it again. Each node's monotonic
clock runs at its own rate, drawn within the bound the core assumes (rabbitry.singleton.core.
DRIFT, 1 %): the core reads `rate * t` and its timers fire after `after / rate`.

An instance is the child running on one node, from StartInstance to the first of StopInstance,
the node's crash, or the end of its lease (its OS child checks the lease file before acting, so
a frozen node's child stops acting at the lease's end although nothing stops it).

Invariants (on top of the node monitor's own, tests/sim/invariants.py):
- one_instance: no two instances' intervals overlap, in real (virtual) time;
- tokens_grow: every new instance has a token above every earlier instance's;
- runs_again: once every node's application has run for `lease + 2 * net_ticktime` after the
  final heal (all links up, all nodes booted and thawed), an instance runs; and one runs at
  the end.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from dataclasses import dataclass
from typing import Any

from monitors.effects import SetTimer
from rabbitry.singleton.core import SingletonCore
from tests.sim.cli import run_jobs, schedule_report, sizes
from tests.sim.engine import EffectHandler, NetConfig, Sim, SimNode
from tests.sim.invariants import InvariantViolation
from tests.sim.node_monitor import NodeMonitorKind
from tests.sim.run import build
from tests.sim.schedules import MODES, Schedule, generate

KEY = "scheduler"
LEASE = 2.0  # 2 x the simulator's net_ticktime (1 s), the default
NET_TICKTIME = NetConfig().net_ticktime
DRIFT_USED = 0.0099  # the simulated clocks' worst rate error, within the core's bound


@dataclass
class Instance:
    node: str
    token: int
    start: float
    end: float  # the lease's end in real time, or when it was stopped
    stopped: bool = False


class DriftingCore:
    """A SingletonCore seen through one node's clock: `rate * t` in, timers `after / rate`."""

    def __init__(self, core: SingletonCore, rate: float) -> None:
        self.core = core
        self.rate = rate

    def _local(self, now: float) -> float:
        return now * self.rate

    def _out(self, effects: list[Any]) -> list[Any]:
        return [
            SetTimer(e.key, e.after / self.rate, e.data) if isinstance(e, SetTimer) else e
            for e in effects
        ]

    def start(self, now: float) -> list[Any]:
        return self._out(self.core.start(self._local(now)))

    def receive(self, sender: str, msg: Any, now: float) -> list[Any]:
        return self._out(self.core.receive(sender, msg, self._local(now)))

    def timer(self, key: str, now: float, data: Any = None) -> list[Any]:
        return self._out(self.core.timer(key, self._local(now), data))

    def call(self, name: str, now: float, *args: Any, **kwargs: Any) -> list[Any]:
        return self._out(getattr(self.core, name)(*args, self._local(now), **kwargs))


class SingletonChecker:
    """The invariants of the module docstring, fed by the kind's effect handlers."""

    def __init__(self, sim: Sim, schedule: Schedule, members: list[str], lease: float) -> None:
        self.sim = sim
        self.schedule = schedule
        self.members = members
        self.lease = lease
        self.instances: list[Instance] = []
        self.live: dict[str, Instance] = {}
        self.max_token = 0
        self.whole_since: float | None = None
        self.recoveries: list[float] = []

    def fail(self, name: str, text: str) -> None:
        raise InvariantViolation(name, text, self.sim.now)

    def started(self, node: str, token: int, lease_end: float) -> None:
        now = self.sim.now
        for other in self.live.values():
            if other.node != node and other.end > now:
                self.fail(
                    "one_instance",
                    f"{node} started token {token} while {other.node}'s token {other.token} "
                    f"is live until {other.end:.4f}",
                )
        if token <= self.max_token:
            self.fail("tokens_grow", f"{node} started token {token} after token {self.max_token}")
        self.max_token = token
        inst = Instance(node, token, now, lease_end)
        self.instances.append(inst)
        self.live[node] = inst

    def renewed(self, node: str, token: int, lease_end: float) -> None:
        inst = self.live.get(node)
        if inst is None or inst.token != token:
            self.fail("renew_known", f"{node} renewed token {token}, which it does not run")
            return
        if inst.end < self.sim.now:
            self.fail("renew_in_time", f"{node} renewed token {token} after its lease ended")
        inst.end = max(inst.end, lease_end)

    def stopped(self, node: str) -> None:
        inst = self.live.pop(node, None)
        if inst is not None:
            inst.end = min(inst.end, self.sim.now)
            inst.stopped = True

    def crashed(self, node: str) -> None:
        self.stopped(node)

    def running_instance(self) -> Instance | None:
        now = self.sim.now
        live = [i for i in self.live.values() if i.end > now]
        return live[0] if live else None

    def after_step(self, sim: Sim, node: SimNode) -> None:
        self._check_liveness()

    def after_change(self, sim: Sim) -> None:
        self._check_liveness()

    def _whole(self) -> bool:
        sim = self.sim
        if sim.now < self.schedule.heal_at:
            return False
        nodes = [sim.nodes[m] for m in self.members]
        return all(n.alive and not n.frozen and n.state.get("app") == "running" for n in nodes)

    def _check_liveness(self) -> None:
        now = self.sim.now
        if not self._whole():
            self.whole_since = None
            return
        if self.whole_since is None:
            self.whole_since = now
        if self.running_instance() is not None:
            if self.whole_since is not None and self.whole_since >= 0:
                self.recoveries.append(now - self.whole_since)
                self.whole_since = -1.0  # recorded once per whole period
            return
        if self.whole_since >= 0 and now - self.whole_since > self.bound():
            self.fail(
                "runs_again",
                f"no instance {now - self.whole_since:.3f}s after the cluster was whole "
                f"(bound {self.bound():.3f}s)",
            )

    def bound(self) -> float:
        return self.lease + 2 * NET_TICKTIME

    def finish(self) -> None:
        self._check_liveness()
        if self.running_instance() is None:
            self.fail("runs_again", "no instance runs at the end")


class SingletonKind:
    """A CoreKind: one SingletonCore per node, registered as SingletonCore.NAME."""

    name = SingletonCore.NAME

    def __init__(self, members: list[str], nm_name: str, lease: float) -> None:
        self.members = members
        self.nm_name = nm_name
        self.lease = lease
        self.checker: SingletonChecker | None = None

    def build(self, sim: Sim, node: SimNode) -> Any:
        saved = node.disk.get(self.name)
        core = SingletonCore(
            node.name,
            lease=self.lease,
            max_token=saved[0] if saved else 0,
            restarted=saved is not None,
            members=self.members,
        )
        rate = node.state.get("rate") or 1.0 + sim.rng.uniform(-DRIFT_USED, DRIFT_USED)
        node.state["rate"] = rate
        return DriftingCore(core, rate)

    def handlers(self) -> dict[str, EffectHandler]:
        return {
            "StartInstance": self._start,
            "RenewInstance": self._renew,
            "StopInstance": self._stop,
            "PersistTokens": self._persist,
            "Answer": lambda sim, node, cname, eff: None,
            "Conflict": lambda sim, node, cname, eff: None,
        }

    def _lease_end(self, sim: Sim, node: SimNode, expires_in: float) -> float:
        return sim.now + expires_in / node.state["rate"]

    def _start(self, sim: Sim, node: SimNode, cname: str, eff: Any) -> None:
        sim.record(node, "instance_start", f"token={eff.token}")
        assert self.checker is not None
        self.checker.started(node.name, eff.token, self._lease_end(sim, node, eff.expires_in))

    def _renew(self, sim: Sim, node: SimNode, cname: str, eff: Any) -> None:
        assert self.checker is not None
        self.checker.renewed(node.name, eff.token, self._lease_end(sim, node, eff.expires_in))

    def _stop(self, sim: Sim, node: SimNode, cname: str, eff: Any) -> None:
        sim.record(node, "instance_stop", f"token={eff.token} {eff.reason}")
        assert self.checker is not None
        self.checker.stopped(node.name)

    def _persist(self, sim: Sim, node: SimNode, cname: str, eff: Any) -> None:
        node.disk[self.name] = (eff.max_token, eff.lease)

    # ---- what the node's shell does around the core

    def refresh(self, sim: Sim, node: SimNode) -> None:
        """Feed the core the node monitor's members and running nodes (the shell polls)."""
        core = node.cores.get(self.name)
        monitor = node.cores.get(self.nm_name)
        if core is None or monitor is None:
            return
        st = monitor.status()
        sim.call(
            node,
            self.name,
            "members",
            None,
            core.call("set_members", sim.now, st["all"], st["running"]),
        )

    def guard(self, sim: Sim, node: SimNode, up: bool) -> None:
        core = node.cores.get(self.name)
        if core is None:
            return
        self.refresh(sim, node)
        if up:
            effects = core.call("want", sim.now, KEY, lease=self.lease)
        else:
            effects = core.call("unwant", sim.now, KEY, reason="application stopped")
        sim.call(node, self.name, "guard_up" if up else "guard_down", KEY, effects)


class GuardedNodeMonitorKind(NodeMonitorKind):
    """The node monitor kind, telling the singleton kind when the application (and so the
    guard) starts and stops."""

    singleton: SingletonKind | None = None

    def _pause(self, sim: Sim, node: SimNode, cname: str, eff: Any) -> None:
        if self.singleton is not None and node.state.get("app") in ("running", "starting"):
            self.singleton.guard(sim, node, up=False)
        super()._pause(sim, node, cname, eff)

    def _app_done(self, sim: Sim, node: SimNode, cname: str, stop: bool) -> None:
        super()._app_done(sim, node, cname, stop)
        if self.singleton is not None and not stop:
            self.singleton.guard(sim, node, up=True)


class _Refresher:
    """An observer: after each step on a node, refresh its singleton core's membership, and
    start the guard of a node whose application runs from boot (not held)."""

    def __init__(self, kind: SingletonKind, checker: SingletonChecker) -> None:
        self.kind = kind
        self.checker = checker
        self.busy = False

    def after_step(self, sim: Sim, node: SimNode) -> None:
        if self.busy or not node.alive:
            return
        self.busy = True
        try:
            if node.state.get("app") == "running" and not node.state.get("guard_booted"):
                node.state["guard_booted"] = True
                self.kind.guard(sim, node, up=True)
            elif node.state.get("app") != "running":
                node.state["guard_booted"] = True  # the monitor starts it (held at boot)
        finally:
            self.busy = False

    def after_change(self, sim: Sim) -> None:
        for name, node in sim.nodes.items():
            if not node.alive:
                self.checker.crashed(name)


@dataclass
class Result:
    schedule: Schedule
    sim: Sim
    violation: InvariantViolation | None
    recoveries: list[float]

    def report(self, tail: int = 60) -> str:
        replay = (
            f"python -m tests.sim.singleton --seed {self.schedule.seed} "
            f"--nodes {len(self.schedule.nodes)} --mode {self.schedule.mode.label} --trace"
        )
        return schedule_report(self.schedule, self.sim, self.violation, tail, replay)


def run_schedule(schedule: Schedule, lease: float = LEASE, trace_len: int | None = 300) -> Result:
    members = list(schedule.nodes)
    kinds: list[GuardedNodeMonitorKind] = []

    def factory(api: Any, members_: list[str], mode: Any) -> GuardedNodeMonitorKind:
        kind = GuardedNodeMonitorKind(api, members_, mode)
        kinds.append(kind)
        return kind

    made: list[SingletonChecker] = []

    def before_boot(sim: Sim, nm_kind: GuardedNodeMonitorKind) -> None:
        skind = SingletonKind(members, nm_kind.name, lease)
        nm_kind.singleton = skind
        checker = SingletonChecker(sim, schedule, members, lease)
        skind.checker = checker
        sim.add_kind(skind)
        sim.add_observer(_Refresher(skind, checker))
        sim.add_observer(checker)
        made.append(checker)

    sim, nm_checker = build(
        schedule, "auto", trace_len, NetConfig(), kind_factory=factory, before_boot=before_boot
    )
    checker = made[0]
    try:
        sim.run_until(schedule.end)
        nm_checker.finish()
        checker.finish()
    except InvariantViolation as v:
        return Result(schedule, sim, v, checker.recoveries)
    except Exception as e:
        where = traceback.extract_tb(e.__traceback__)[-1]
        text = f"{type(e).__name__}: {e} ({where.filename}:{where.lineno})"
        return Result(schedule, sim, InvariantViolation("no_crash", text, sim.now), [])
    return Result(schedule, sim, None, checker.recoveries)


def run_seed(seed: int, nodes: int, mode: str, trace_len: int | None = 300) -> Result:
    return run_schedule(generate(seed, nodes, mode), trace_len=trace_len)


def run_job(job: tuple[int, int, str]) -> tuple[int, int, str, str | None, float]:
    seed, nodes, mode = job
    result = run_seed(seed, nodes, mode, trace_len=None if False else 300)
    worst = max(result.recoveries, default=0.0)
    return seed, nodes, mode, result.report() if result.violation else None, worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--sweep", type=int, default=0, help="run this many seeds per mode and size"
    )
    parser.add_argument("--nodes", default="3-5")
    parser.add_argument("--mode", default="pause_minority", help="a mode, or 'all'")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--trace", action="store_true")
    args = parser.parse_args(argv)
    modes = list(MODES) if args.mode == "all" else [args.mode]
    if not args.sweep:
        result = run_seed(args.seed, sizes(args.nodes)[0], modes[0])
        print(result.report(200 if args.trace else 40))
        print(f"recovery after the heal: {result.recoveries}")
        return 1 if result.violation else 0
    results: list[tuple[int, int, str, str | None, float]] = []
    for mode in modes:  # a tally per mode and size as it goes: a long sweep shows progress
        for n in sizes(args.nodes):
            jobs = [(s, n, mode) for s in range(args.seed, args.seed + args.sweep)]
            group = run_jobs(run_job, jobs, args.workers, chunksize=8)
            results += group
            bad = [r for r in group if r[3]]
            print(f"{mode} nodes={n}: {len(group)} schedules, {len(bad)} failed", flush=True)
            for r in bad[:1]:
                print(r[3], flush=True)
    failed = [r for r in results if r[3]]
    worst = max((r[4] for r in results), default=0.0)
    print(
        f"{len(results)} schedules, {len(failed)} failed; slowest recovery after the heal "
        f"{worst:.3f}s (bound lease + 2 x net_ticktime = {LEASE + 2.0:.1f}s)"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
