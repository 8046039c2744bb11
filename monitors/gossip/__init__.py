"""Celery-style worker state sync: LamportClock, LimitedSet, Mingle, Gossip and elections.

LamportClock and LimitedSet are the data structures (docs/gossip-structures.md). Gossip and
Mingle are the actor shells (shell.py) around the pure GossipCore (gossip_core, mingle_core,
election_core), which also runs in the simulator (tests/sim/gossip.py). See docs/gossip.md.
"""

from monitors.gossip.clock import LamportClock, TimeTuple
from monitors.gossip.limited_set import LimitedSet
from monitors.gossip.shell import ElectionError, Gossip, Mingle, elect, wait_mingled

__all__ = [
    "ElectionError",
    "Gossip",
    "LamportClock",
    "LimitedSet",
    "Mingle",
    "TimeTuple",
    "elect",
    "wait_mingled",
]
