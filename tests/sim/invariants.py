"""Invariants of the node monitor's partition handling, checked after every simulator step.

Vocabulary (all of it ground truth read from the simulator, except "belief"):

- running(n): n is alive, not frozen, and its core is not paused (`core.paused`). A frozen
  node is not running: it acts on nothing until thawed.
- belief(n): set(core.status()["running"]) | {n}, the nodes n considers running.
- sees(n): {n} plus every m such that n and m hold the same open dist connection, both link
  directions are up and neither is frozen (Network.healthy).
- a fault is any schedule operation (cut, heal, crash, boot, freeze, thaw), and the boot.

The invariants, and why each tolerance is what it is:

Both safety invariants hold once detection has settled: from `grace` after the last fault
on. grace = 1.25 * net_ticktime (the worst detection delay) + down_ping_interval (a booted or
thawed node learns whom it reaches within one ping round: failed connection set-ups are
silent) + 0.5 s. Before that a correct core cannot know: a paused node that reconnects to a
majority resumes, and a link to one of those nodes may have been cut a few ms earlier (seed
5017, 7 nodes, pause_minority: n5 resumes on a connection to n7 cut 18 ms before; both n5
and n7 run with disjoint beliefs until n5's tick timeout pauses it again).

1. no_split_brain (pause_minority; pause_if_all_down with one preferred node): no two running
   nodes have disjoint beliefs for longer than `tolerance` (0.5 s) past the grace. Beliefs
   travel as messages, so two views can be disjoint for a message round trip even in a correct
   implementation (two nodes detecting each other down a few ms apart while their
   partial-partition check is in flight). A split brain is a disjointness that lasts. With
   two or more preferred nodes pause_if_all_down legitimately runs both sides of a split that
   separates them (a documented RabbitMQ caveat), so there only invariant 2' is checked.
2. majority (pause_minority): past the grace, every running node sees a strict majority of
   the members, and a node that stops seeing one (a deliberate disconnect, say) is paused
   within `tolerance`.
2b. running_clique (where 1 is checked): past the grace, any two running nodes see each other
   (for longer than `tolerance`). The issue's "a partial partition ends with the largest
   fully-connected majority running and the rest paused or disconnected": in these modes a
   node cut from part of the running set must pause, or the two sides serve without talking.
2'. preferred_reachable (pause_if_all_down): the same, with "sees a member of the preferred
   list" (or the list has no member) in place of "sees a strict majority".
3. liveness (all modes): from heal_at + liveness_bound to the end, every node is alive, not
   paused, connected to every other node, and believes every member running; under autoheal
   (or pause_if_all_down with recover autoheal) no partition stays recorded; under ignore and
   the pause modes without autoheal recorded partitions may stay.
4. quiescence (all modes): in the quiet window (the last `quiet_window` seconds) the cores
   handle at most 2*N^2/keepalive + 1 events per virtual second (steady state is N^2 per
   keepalive interval: each node's timer and its N-1 keepalives), and no timer key fires on a
   node more than quiet_window/keepalive + 1 times (only keepalive-rate timers remain).
"""

from __future__ import annotations

import math
from typing import Any

from tests.sim.engine import Sim, SimNode
from tests.sim.node_monitor import Mode


class InvariantViolation(AssertionError):
    """An invariant failed at virtual time `time`."""

    def __init__(self, invariant: str, message: str, time: float) -> None:
        super().__init__(f"[{invariant}] at t={time:.4f}: {message}")
        self.invariant = invariant
        self.message = message
        self.time = time


class NodeMonitorInvariants:
    """An engine Observer that checks the invariants above as the simulation runs."""

    def __init__(
        self,
        sim: Sim,
        core_name: str,
        members: list[str],
        mode: Mode,
        *,
        heal_at: float,
        liveness_bound: float,
        quiet_window: float,
        keepalive_interval: float = 10.0,
        down_ping_interval: float = 1.0,
        tolerance: float = 0.5,
    ) -> None:
        self.sim = sim
        self.core_name = core_name
        self.members = list(members)
        self.n = len(members)
        self.mode = mode
        self.heal_at = heal_at
        self.live_from = heal_at + liveness_bound
        self.quiet_window = quiet_window
        self.keepalive = keepalive_interval
        self.tolerance = tolerance
        self.grace = 1.25 * sim.net.ticktime + down_ping_interval + 0.5
        self.last_fault = 0.0
        preferred = [p for p in mode.nodes if p in members]
        self.check_split = mode.name == "pause_minority" or (
            mode.name == "pause_if_all_down" and len(preferred) <= 1
        )
        self.check_quorum = mode.name in ("pause_minority", "pause_if_all_down")
        self.check_clique = self.check_split  # pause_minority; pause_if_all_down, 1 preferred
        self.apart_since: dict[tuple[str, str], float] = {}
        self.preferred = set(preferred)
        self.running: dict[str, bool] = dict.fromkeys(members, False)
        self.belief: dict[str, frozenset[str]] = {m: frozenset() for m in members}
        self.partitions: dict[str, Any] = dict.fromkeys(members, ())
        self._sees: dict[str, set[str]] = {}  # cache, cleared when connectivity changes
        self.disjoint_since: dict[tuple[str, str], float] = {}
        self.bad_since: dict[str, float] = {}
        self._wakeups: set[float] = set()
        self.steps_at_quiet: int | None = None
        self.good_since: float | None = None

    # ---- observer hooks --------------------------------------------------------------------

    def fault(self) -> None:
        """The runner calls this for every schedule operation."""
        self.last_fault = self.sim.now

    def after_step(self, sim: Sim, node: SimNode) -> None:
        # Everything checked depends only on the views and on connectivity; deadlines
        # (tolerance, grace) are met by wake-ups, so unchanged views need no evaluation.
        if self._view(node):
            self._evaluate()

    def after_change(self, sim: Sim) -> None:
        self._sees = {}
        for node in sim.nodes.values():
            self._view(node)
        self._evaluate()

    def _view(self, node: SimNode) -> bool:
        """Refresh node's (running, belief); True if it changed."""
        name = node.name
        core = node.cores.get(self.core_name)
        if core is None or not node.alive or node.frozen:
            running, belief, parts = False, frozenset(), ()
        else:
            st = core.status()
            running = not core.paused
            belief = frozenset(st["running"]) | {name} if running else frozenset()
            parts = st.get("partitions") or ()
        if (
            running == self.running[name]
            and belief == self.belief[name]
            and parts == self.partitions[name]
        ):
            return False
        self.running[name] = running
        self.belief[name] = belief
        self.partitions[name] = parts
        return True

    # ---- evaluation ---------------------------------------------------------------------------

    def _evaluate(self) -> None:
        now = self.sim.now
        if self.check_split:
            self._split_brain(now)
        if self.check_quorum:
            self._quorum(now)
        if self.check_clique:
            self._clique(now)
        if now >= self.live_from:
            self._liveness(now)

    def _wake(self, t: float) -> None:
        if t not in self._wakeups:
            self._wakeups.add(t)
            self.sim.at(t, self._wakeup, t)

    def _wakeup(self, t: float) -> None:
        self._wakeups.discard(t)
        self._evaluate()

    def _split_brain(self, now: float) -> None:
        up = [m for m in self.members if self.running[m]]
        current: dict[tuple[str, str], float] = {}
        for i, a in enumerate(up):
            ba = self.belief[a]
            for b in up[i + 1 :]:
                if ba.isdisjoint(self.belief[b]):
                    since = self.disjoint_since.get((a, b), now)
                    current[(a, b)] = since
                    due = max(since, self.last_fault + self.grace) + self.tolerance
                    if now > due:
                        raise InvariantViolation(
                            "no_split_brain",
                            f"{a} (believes {sorted(ba)}) and {b} (believes "
                            f"{sorted(self.belief[b])}) both run with disjoint beliefs "
                            f"since t={since:.4f}",
                            now,
                        )
                    self._wake(due + 1e-9)
        self.disjoint_since = current

    def sees(self, name: str) -> set[str]:
        seen = self._sees.get(name)
        if seen is None:
            net = self.sim.net
            seen = {name} | {m for m in self.members if m != name and net.healthy(name, m)}
            self._sees[name] = seen
        return seen

    def _quorum_ok(self, seen: set[str]) -> bool:
        if self.mode.name == "pause_minority":
            return 2 * len(seen) > self.n
        return not self.preferred or not seen.isdisjoint(self.preferred)

    def _quorum(self, now: float) -> None:
        current: dict[str, float] = {}
        for m in self.members:
            if not self.running[m]:
                continue
            seen = self.sees(m)
            if self._quorum_ok(seen):
                continue
            since = self.bad_since.get(m, now)
            current[m] = since
            due = max(since + self.tolerance, self.last_fault + self.grace)
            if now > due:
                what = (
                    "a strict majority"
                    if self.mode.name == "pause_minority"
                    else (f"a preferred node of {sorted(self.preferred)}")
                )
                name = "majority" if self.mode.name == "pause_minority" else "preferred_reachable"
                raise InvariantViolation(
                    name,
                    f"{m} is running but sees only {sorted(seen)} of {self.n} members, not "
                    f"{what} (since t={since:.4f}; last fault t={self.last_fault:.4f}, "
                    f"grace {self.grace:.2f} s)",
                    now,
                )
            self._wake(due + 1e-9)
        self.bad_since = current

    def _clique(self, now: float) -> None:
        up = [m for m in self.members if self.running[m]]
        current: dict[tuple[str, str], float] = {}
        for i, a in enumerate(up):
            seen = self.sees(a)
            for b in up[i + 1 :]:
                if b in seen:
                    continue
                since = self.apart_since.get((a, b), now)
                current[(a, b)] = since
                due = max(since, self.last_fault + self.grace) + self.tolerance
                if now > due:
                    raise InvariantViolation(
                        "running_clique",
                        f"{a} and {b} both run but cannot talk to each other (since "
                        f"t={since:.4f}; running: {up})",
                        now,
                    )
                self._wake(due + 1e-9)
        self.apart_since = current

    # ---- liveness and quiescence ------------------------------------------------------------

    def whole(self) -> str | None:
        """Why the cluster is not whole yet, or None if it is."""
        sim = self.sim
        full = frozenset(self.members)
        for m in self.members:
            node = sim.nodes[m]
            if not node.alive or node.frozen:
                return f"{m} is not up"
            core = node.cores[self.core_name]
            if core.paused:
                return f"{m} is paused"
            st: dict[str, Any] = core.status()
            if frozenset(st["running"]) | {m} != full:
                return f"{m} believes running = {sorted(st['running'])}"
            if self.mode.heals and st.get("partitions"):
                return f"{m} still records partitions {st['partitions']}"
            for p in self.members:
                if p != m and not sim.net.connected(m, p):
                    return f"{m} is not connected to {p}"
        return None

    def _liveness(self, now: float) -> None:
        why = self.whole()
        if why is not None:
            raise InvariantViolation(
                "liveness",
                f"{now - self.heal_at:.1f} s after the final heal the cluster is not whole: {why}",
                now,
            )

    def start_quiet(self) -> None:
        """Called at heal_at + liveness_bound: liveness must hold from now on."""
        # this core's events only: other kinds hosted beside it (a singleton's lease renewals)
        # have steady traffic of their own
        self.steps_at_quiet = self.sim.core_steps.get(self.core_name, 0)
        self.sim.timer_fires.clear()
        self.sim.record_timers = True
        self._evaluate()

    def finish(self) -> None:
        """Called at the end of the run: the quiescence checks over the quiet window."""
        self._evaluate()
        if self.steps_at_quiet is None:
            return
        window = self.quiet_window
        rate = (self.sim.core_steps.get(self.core_name, 0) - self.steps_at_quiet) / window
        bound = 2 * self.n * self.n / self.keepalive + 1
        if rate > bound:
            raise InvariantViolation(
                "quiescence",
                f"{rate:.2f} core events per virtual second in the quiet window (bound "
                f"{bound:.2f}): {self._busiest()}",
                self.sim.now,
            )
        per_key: dict[tuple[str, str], int] = {}
        for _, node, key, cname in self.sim.timer_fires:
            if cname != self.core_name:
                continue
            per_key[(node, key)] = per_key.get((node, key), 0) + 1
        limit = math.floor(window / self.keepalive) + 1
        busy = {k: v for k, v in per_key.items() if v > limit}
        if busy:
            raise InvariantViolation(
                "quiescence",
                f"timers still firing faster than the keepalive ({limit} allowed in "
                f"{window:.0f} s): {sorted(busy.items())}",
                self.sim.now,
            )

    def _busiest(self) -> str:
        counts: dict[str, int] = {}
        for t, _node, what, detail in self.sim.trace:
            if t >= self.live_from:
                key = f"{what} {detail}"[:60]
                counts[key] = counts.get(key, 0) + 1
        top = sorted(counts.items(), key=lambda kv: -kv[1])[:5]
        return ", ".join(f"{k!r} x{v}" for k, v in top)
