"""The adversarial generator's invariants (tests/sim/adversarial.py), on top of ephemeral.py's
(which include every core invariant of invariants.py):

- core_mode: an executor that has heard from a core member runs the core's mode.
- never_shrunk: an executor that has a member list from a current core member counts every
  current member it has heard of (in a list or its seeds): it drops a member only when that
  member left or was forgotten, never on one member's word (a forged shrunk list, the list
  of a node that left, the first list to reach it).
- not_forgotten_by_forgery: a live executor is never forgotten on a stale or forged leave
  (checked where the forgery lands, adversarial_ops.forge).
- moves (at the end, with liveness): every executor still meant to be there counts exactly
  the current core: one attached to a member that left or was forgotten has moved to the rest.
- restarts (mode autoheal): when a core member stops its application because it lost an
  autoheal, every executor that follows it (its side) and runs stops its application within
  `grace` + 0.5 s (after it thaws, if it is frozen), unless it dies first. It then starts
  again with a running member it reaches (`follows` checks that part).
- impostor_not_counted: while an impostor (an ephemeral process under a core member's name)
  holds a link to a core node, that node (unless frozen) does not count the member as
  connected over that link for longer than `tolerance` (its first message says role
  ephemeral: the role is a fact).
- same_decisions: adversarial.py runs the schedule's core-only projection and compares.

The ground truth follows the membership ops (`AdvKind.truth`) and leaves an impostor out: while
one holds a core member's name, that member is down (not running, seen by nobody).
"""

from __future__ import annotations

from typing import Any

from monitors.node_monitor.core import NodeMonitorCore
from tests.sim import ephemeral as eph
from tests.sim.adversarial_ops import AdvKind, Decision
from tests.sim.engine import Sim, SimNode
from tests.sim.invariants import InvariantViolation


class AdvInvariants(eph.EphemeralInvariants):
    def __init__(self, sim: Sim, kind: AdvKind, schedule: Any) -> None:
        super().__init__(sim, kind, schedule.base)
        self.kind = kind
        self.kind_config = kind.config  # the core's partition_handling
        for name in schedule.joiners:  # not members yet: their views are kept all the same
            self.running[name] = False
            self.belief[name] = frozenset()
            self.partitions[name] = ()
        self.restart_bound = self.grace + 0.5
        self.must_restart: dict[str, tuple[str, float, int, int]] = {}
        self.counted_since: dict[tuple[str, str], float] = {}  # (core node, impostor's name)
        self.app_stops: dict[str, int] = {}  # executor -> application stops so far
        kind.on_app_stopped = self.app_stopped

    # ---- the ground truth -------------------------------------------------------------------

    def membership_changed(self) -> None:
        """The driver performed a membership op: the members are kind.truth from now on."""
        self.members = list(self.kind.truth)
        self.n = len(self.members)
        keep = set(self.members)
        self.disjoint_since = {k: v for k, v in self.disjoint_since.items() if set(k) <= keep}
        self.apart_since = {k: v for k, v in self.apart_since.items() if set(k) <= keep}
        self.bad_since = {k: v for k, v in self.bad_since.items() if k in keep}
        self._sees = {}

    def _view(self, node: SimNode) -> bool:
        name = node.name
        if name not in self.kind.impostors:
            return super()._view(node)
        changed = self.running[name] or bool(self.belief[name]) or bool(self.partitions[name])
        self.running[name], self.belief[name], self.partitions[name] = False, frozenset(), ()
        return changed

    def sees(self, name: str) -> set[str]:
        seen = super().sees(name)
        return seen - set(self.kind.impostors) if self.kind.impostors else seen

    def _core_seen(self, e: str) -> set[str]:
        return super()._core_seen(e) - set(self.kind.impostors)

    # ---- the checks --------------------------------------------------------------------------

    def after_step(self, sim: Sim, node: SimNode) -> None:
        super().after_step(sim, node)
        if self.kind.impostors or self.counted_since:
            self._impostor_not_counted(sim.now)

    def _impostor_not_counted(self, now: float) -> None:
        current: dict[tuple[str, str], float] = {}
        for c in sorted(self.kind.impostors):
            impostor = self.sim.nodes[c].creation  # its link, not one of the dead member's
            for a in self.members:
                node = self.sim.nodes[a]
                core = node.cores.get(self.core_name) if node.alive and not node.frozen else None
                if not isinstance(core, NodeMonitorCore) or core._up.get(c) != impostor:
                    continue
                if c not in core._connected():
                    continue
                since = current[(a, c)] = self.counted_since.get((a, c), now)
                if now > since + self.tolerance:
                    raise InvariantViolation(
                        "impostor_not_counted",
                        f"{a} counts {c} as connected since t={since:.4f}, but an ephemeral "
                        f"process holds that name",
                        now,
                    )
                self._wake(since + self.tolerance + 1e-9)
        self.counted_since = current

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
            if set(core._lists) & truth:
                heard = set(core._seeds).union(*core._lists.values())
                missing = (truth & heard) - core.core_members()
                if missing:
                    raise InvariantViolation(
                        "never_shrunk",
                        f"{e} counts {sorted(core.core_members())}: not {sorted(missing)}, "
                        f"members it has heard of",
                        now,
                    )
        self._restarts(now)

    def app_stopped(self, node: SimNode, core: Any) -> None:
        """The kind tells us of every application stop (see restarts in the docstring)."""
        name = node.name
        if name in self.eph:
            self.app_stops[name] = self.app_stops.get(name, 0) + 1
            return
        if (
            self.mode.name != "autoheal"
            or not isinstance(core, NodeMonitorCore)
            or not core.autoheal.holds_app
            or name not in self.members
        ):
            return
        now = self.sim.now
        for e in sorted(self.eph):
            en = self.sim.nodes[e]
            ec = en.cores.get(self.core_name) if en.alive else None
            if getattr(ec, "_follow", None) != name:
                continue
            if en.state.get("app") not in ("running", "starting"):
                continue
            self.must_restart[e] = (name, now, en.incarnation, self.app_stops.get(e, 0))
        self._restarts(now)

    def _restarts(self, now: float) -> None:
        for e, (loser, at, inc, stops) in list(self.must_restart.items()):
            node = self.sim.nodes[e]
            if not node.alive or node.incarnation != inc or self.app_stops.get(e, 0) > stops:
                del self.must_restart[e]  # it stopped, or died: it restarted either way
                continue
            if node.frozen:
                continue  # its thaw is a fault: we evaluate again then
            due = max(at, self.thawed_at.get(e, 0.0)) + self.restart_bound
            if now > due:
                raise InvariantViolation(
                    "restarts",
                    f"{e} followed {loser}, which lost an autoheal at t={at:.4f}; its "
                    "application still runs",
                    now,
                )
            self._wake(due + 1e-9)

    def whole(self) -> str | None:
        why = super().whole()
        if why is not None:
            return why
        truth = set(self.members)
        for e in sorted(self.eph - self.schedule.gone):
            counted = self.sim.nodes[e].cores[self.core_name].core_members()
            if counted != truth:
                return f"{e} counts {sorted(counted)} as the core, not {sorted(truth)}"
        return None


def compare_decisions(
    with_executors: dict[str, list[Decision]], core_only: dict[str, list[Decision]]
) -> InvariantViolation | None:
    """same_decisions: the first core member whose decisions differ between the two runs."""
    for name in sorted(set(with_executors) | set(core_only)):
        a, b = with_executors.get(name, []), core_only.get(name, [])
        if a == b:
            continue
        i = next(
            (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
        )
        got = a[i] if i < len(a) else "nothing"
        want = b[i] if i < len(b) else "nothing"
        at = min(x[0] for x in (a[i : i + 1] + b[i : i + 1]))
        return InvariantViolation(
            "same_decisions",
            f"{name}'s decision #{i + 1} with executors is {got}, without them {want}",
            at,
        )
    return None
