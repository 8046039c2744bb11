"""What the adversarial generator's operations do to a simulation, beyond faults.py's faults
(tests/sim/adversarial.py says what a schedule holds and why).

- Forgeries (stale_leave, forged_leave, shrunk_list): a message nobody honest sends, handed
  to one core (`core.receive`) as if it came from its link to the named sender.
- Core membership, done the way rabbitry/node.py does it on a real node:
  - core_leave X SECONDS: `rabbitry cluster leave` on X (left_cluster(X) on X's core: it tells the
    members it reaches and becomes a cluster of one);
  - core_forget Y M: `rabbitry cluster forget M` on Y (M is dead: a live M is refused);
  - dial W X, then core_join W X: `rabbitry cluster join X` on W, a node started alone: its
    dist layer connects to X, X's member list comes back, and W's core is told each member
    joined, then that W itself did (which it tells the members it reaches).
  Each is performed only when the core is whole for it (every member it must tell is up and
  connected to it), as an operator does: until then it is retried every RETRY seconds (each
  attempt traced), up to a second before the final heal. (A leave that does not reach a
  member needs a forget on that member, in RabbitMQ as here.) A leave may stop the leaver
  some time after (core_leave X SECONDS; "-": it stays up as a cluster of one). A forget that
  never happened leaves its dead node a member: it boots again at the final heal.
  `AdvKind.truth` follows the members: both runs of a schedule (with and without executors)
  keep it, the invariants read it.
- Names (the dist handshake is not simulated, its outcome is):
  - impostor C VARIANT SEED...: an ephemeral process under the dead core member C's name
    (a newer creation, role ephemeral, the given seeds). "refused": the dist layer does its
    job, every handshake from or to it is refused (Network.refused_names) and nothing it
    sends reaches a core. "admitted": the check is bypassed, its links come up and its
    messages (role ephemeral) reach the cores, which must not count it as C.
    impostor_end C: it exits; the real C then boots from its own disk (a schedule `boot`).
  - takeover X: X is frozen (silent) and a copy of its config (its own data_dir) takes the
    name: the dist layer lets it in (a silent old link is a restart in progress) and refuses
    the old process when it thaws. To the cores that is the frozen X gone and a new
    incarnation with empty files (a core member then starts from its configured members).
  A duplicate of a live, answering node is refused before it has a link (tests/dist,
  tests/rabbitry/test_names_verified.py): nothing of it reaches a core, so there is nothing
  to simulate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from monitors.effects import Log
from monitors.node_monitor import PartitionHandling
from monitors.node_monitor.core import NodeMonitorCore
from monitors.node_monitor.ephemeral import EphemeralMonitorCore
from tests.sim import ephemeral as eph
from tests.sim.engine import Sim, SimNode
from tests.sim.invariants import InvariantViolation
from tests.sim.schedules import Op

FORGERIES = frozenset({"stale_leave", "forged_leave", "shrunk_list"})
MEMBERSHIP = frozenset({"core_leave", "core_forget", "dial", "core_join"})
NAMES = frozenset({"impostor", "impostor_end", "takeover"})

Decision = tuple[float, str, str]
RETRY = 0.5  # an operator tries a membership change again this long after the core said no


class AdvKind(eph.MixedKind):
    """Core members, executors built with their own (maybe wrong) partition_handling, and
    impostors; it keeps the core's membership (`truth`) and records what each core member
    decides (`decisions`: pauses, resumes, cluster files, autoheal), which the runner compares
    with the same schedule's run without executors."""

    def __init__(self, schedule: Any, truth: list[str]) -> None:
        super().__init__(schedule.base)
        self.local = dict(schedule.local_modes)
        self.truth = list(truth)  # the core's members, as the membership ops change them
        self.impostors: dict[str, tuple[str, ...]] = {}  # name -> seeds, while one holds it
        self.decisions: dict[str, list[Decision]] = {}
        self.on_app_stopped: Callable[[SimNode, Any], None] | None = None
        self.gone = set(schedule.base.gone)  # nodes not booted at the final heal
        self.shrinks = any(op.action in ("core_leave", "core_forget") for op in schedule.ops)
        self.retry_until = schedule.base.heal_at - 1.0
        self.reapply: Callable[[Op], None] | None = None  # the driver's way to run an op

    def build(self, sim: Sim, node: SimNode) -> Any:
        seeds = self.impostors.get(node.name)
        if seeds is not None:
            node.state.update(app="stopped", app_busy_until=sim.now, notified=[])
            return EphemeralMonitorCore(
                node.name,
                node.creation,
                seeds,
                self.config,
                down_ping_interval=self.down_ping_interval,
                keepalive_interval=self.keepalive_interval,
            )
        core = super().build(sim, node)
        local = self.local.get(node.name)
        if isinstance(core, EphemeralMonitorCore) and local and local != self.config.mode:
            mine = PartitionHandling(local)
            core.config = core._local_config = mine
        return core

    # ---- what core members decide ----------------------------------------------------------

    def _record(self, sim: Sim, node: SimNode, cname: str, what: str, detail: str) -> None:
        if isinstance(node.cores.get(cname), NodeMonitorCore):
            self.decisions.setdefault(node.name, []).append((sim.now, what, detail))

    def _pause(self, sim: Sim, node: SimNode, cname: str, eff: Any) -> None:
        self._record(sim, node, cname, "pause", eff.reason)
        super()._pause(sim, node, cname, eff)

    def _resume(self, sim: Sim, node: SimNode, cname: str, eff: Any) -> None:
        self._record(sim, node, cname, "resume", eff.reason)
        super()._resume(sim, node, cname, eff)

    def _save(self, sim: Sim, node: SimNode, cname: str, eff: Any) -> None:
        self._record(sim, node, cname, "files", repr((eff.all, eff.disc, eff.running)))
        super()._save(sim, node, cname, eff)

    def watch_logs(self, sim: Sim) -> None:
        """Record the autoheal lines of core members (who leads, wins, loses, aborts)."""
        log = sim._common[Log]

        def watched(node: SimNode, cname: str, eff: Log) -> None:
            if eff.text.startswith("autoheal"):
                self._record(sim, node, cname, "autoheal", f"{eff.text} {eff.fields!r}")
            log(node, cname, eff)

        sim._common[Log] = watched

    def _app_done(self, sim: Sim, node: SimNode, cname: str, stop: bool) -> None:
        core = node.cores[cname]
        super()._app_done(sim, node, cname, stop)
        if stop and self.on_app_stopped is not None:
            self.on_app_stopped(node, core)


# ---- the operations -------------------------------------------------------------------------


def apply_op(sim: Sim, kind: AdvKind, op: Op) -> bool | None:
    """Perform `op` if it is one of this module's: True if done, False if it could not be
    (traced; a membership op is tried again later), None if it is not ours."""
    if op.action in FORGERIES:
        forge(sim, kind, op)
        return True
    if op.action in MEMBERSHIP:
        return _membership(sim, kind, op)
    if op.action in NAMES:
        return _names(sim, kind, op)
    return None


def _usable(node: SimNode) -> bool:
    """Up, not frozen, and a core member's monitor (not an impostor's)."""
    return (
        node.alive
        and not node.frozen
        and isinstance(node.cores.get(NodeMonitorCore.NAME), NodeMonitorCore)
    )


def _reaches(sim: Sim, kind: AdvKind, name: str, others: list[str]) -> bool:
    """`name` is up and connected (for its core too) to each of `others`, each of them the
    real member (a name an impostor holds is a member down, however its link looks)."""
    node = sim.nodes[name]
    if not _usable(node) or set(others) & set(kind.impostors):
        return False
    up = node.cores[kind.name]._connected()
    return all(o in up and sim.net.healthy(name, o) for o in others)


def _skip(sim: Sim, op: Op, why: str) -> bool:
    sim.record(None, "skipped", f"{op.action} {' '.join(op.args)}: {why}")
    return False


def _not_yet(sim: Sim, kind: AdvKind, op: Op, why: str) -> bool:
    """The core said no: try again in RETRY seconds, or give up before the final heal."""
    _skip(sim, op, why)
    if sim.now + RETRY <= kind.retry_until and kind.reapply is not None:
        sim.at(sim.now + RETRY, kind.reapply, Op(sim.now + RETRY, op.action, op.args))
    elif op.action == "core_forget":
        kind.gone.discard(op.args[1])  # still a member: it comes back at the final heal
    return False


def _membership(sim: Sim, kind: AdvKind, op: Op) -> bool:
    name, now, truth = kind.name, sim.now, kind.truth
    if op.action == "dial":
        w, x = op.args
        if sim.nodes[w].alive:
            sim.net.connect(sim.nodes[w], x)
        return True
    if op.action == "core_leave":
        x, stop_after = op.args
        if x not in truth:
            return _skip(sim, op, f"{x} is not a member")
        if not _reaches(sim, kind, x, [m for m in truth if m != x]):
            return _not_yet(sim, kind, op, "the core is not whole for it")
        node = sim.nodes[x]
        sim.call(node, name, "cluster_leave", x, node.cores[name].left_cluster(x, now))
        truth.remove(x)
        if stop_after != "-" and kind.reapply is not None:  # decommissioned
            kind.gone.add(x)
            at = now + float(stop_after)
            sim.at(at, kind.reapply, Op(at, "crash", (x,)))
        return True
    if op.action == "core_forget":
        y, m = op.args
        node = sim.nodes[y]
        if m not in truth or y not in truth:
            return _skip(sim, op, "not members")
        if not _usable(node) or m in node.cores[name]._up:
            return _not_yet(sim, kind, op, f"{y} is not up, or {m} is connected to it")
        if not _reaches(sim, kind, y, [o for o in truth if o not in (y, m)]):
            return _not_yet(sim, kind, op, "the core is not whole for it")
        sim.call(node, name, "cluster_forget", m, node.cores[name].left_cluster(m, now))
        truth.remove(m)
        return True
    # core_join
    w, x = op.args
    wn, xn = sim.nodes[w], sim.nodes[x]
    if w in truth or x not in truth:
        return _skip(sim, op, "not a lone node joining a member")
    if not (_usable(wn) and _usable(xn) and sim.net.healthy(w, x)):
        if wn.alive and not wn.frozen:
            sim.net.connect(wn, x)  # the join's own connect (rabbitry/node.py _join)
        return _not_yet(sim, kind, op, f"{w} is not connected to {x}")
    remote = xn.cores[name].status()
    if set(remote["all"]) != set(truth) or not _reaches(sim, kind, x, [m for m in truth if m != x]):
        return _not_yet(sim, kind, op, "the core is not whole for it")
    core = wn.cores[name]
    for m in remote["all"]:
        if m != w:
            effects = core.joined_cluster(m, m in remote["disc"], now)
            sim.call(wn, name, "joined_cluster", m, effects)
    sim.call(wn, name, "joined_cluster", w, core.joined_cluster(w, True, now))
    truth.append(w)
    return True


def _names(sim: Sim, kind: AdvKind, op: Op) -> bool:
    c = op.args[0]
    node = sim.nodes[c]
    if op.action == "impostor":
        if node.alive:
            return _skip(sim, op, f"{c} is alive: its name is held")
        variant, *seeds = op.args[1:]
        kind.impostors[c] = tuple(seeds)
        if variant == "refused":
            sim.net.refused_names.add(c)
        sim.record(node, "impostor", f"{variant}, seeds {','.join(seeds)}")
        sim.boot(c)
    elif op.action == "impostor_end":
        if c not in kind.impostors:
            return False
        sim.crash(c)
        del kind.impostors[c]
        sim.net.refused_names.discard(c)
    else:  # takeover
        if not node.alive:
            return _skip(sim, op, f"{c} is not running")
        sim.record(node, "takeover", "a copy takes the name of the silent process")
        sim.crash(c)
        node.disk.pop(kind.name, None)  # the copy has a data_dir of its own
        sim.boot(c)
    return True


def forge(sim: Sim, kind: AdvKind, op: Op) -> None:
    """Deliver a message nobody honest sends, as if from op.args[0] to op.args[1]."""
    sender, to = op.args
    target, source = sim.nodes[to], sim.nodes[sender]
    if not target.alive or target.frozen:
        return
    core = target.cores[kind.name]
    if op.action == "shrunk_list":
        if sender not in getattr(core, "_up", {}):
            return  # the executor hears only from a link it has
        truth = set(kind.truth)
        short = [s for s, listed in core._lists.items() if s != sender and not truth <= listed]
        if kind.shrinks or sender not in truth or short:
            # Not one word then: a list an executor holds stays until its sender's next one,
            # so an earlier forgery (or a stale list) would be a second word, and once the core
            # is down to two the other member's list is all there is to agree with; the list of
            # a node that left (it names only itself) is a word of its own. Two words may drop
            # a member by design (core_from_lists).
            return _skip(sim, op, "it would not be one member's word")
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
