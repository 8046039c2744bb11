"""The faults every simulator driver replays (cut, heal, crash, boot, freeze, thaw) and the
heal at a schedule's end: one copy, so the drivers cannot drift apart on what a fault means."""

from __future__ import annotations

from tests.sim.engine import Sim
from tests.sim.schedules import Op

FAULTS = frozenset({"cut", "heal", "crash", "boot", "freeze", "thaw"})


def apply_fault(sim: Sim, op: Op) -> bool:
    """Perform `op` if it is one of FAULTS and say so; any other action is the driver's own.
    A boot of a node that is alive is nothing (a crash in the schedule may not have come)."""
    name, args = op.action, op.args
    if name == "cut":
        sim.net.cut(args[0], args[1])
    elif name == "heal":
        sim.net.heal(args[0], args[1])
    elif name == "crash":
        sim.crash(args[0])
    elif name == "boot":
        if not sim.nodes[args[0]].alive:
            sim.boot(args[0])
    elif name == "freeze":
        sim.freeze(args[0])
    elif name == "thaw":
        sim.thaw(args[0])
    else:
        return False
    return True


def heal_all(sim: Sim) -> list[str]:
    """Heal every link and thaw every frozen node (traced as heal_all); the nodes thawed. The
    driver boots the dead ones itself: which may come back is its schedule's business."""
    sim.record(None, "heal_all", "")
    sim.net.heal_all()
    thawed = [name for name, node in sim.nodes.items() if node.frozen]
    for name in thawed:
        sim.thaw(name)
    return thawed
