"""Celery-style worker state sync: LamportClock, LimitedSet, Mingle, Gossip and elections.

LamportClock and LimitedSet are the data structures (docs/gossip-structures.md); the
protocol cores (mingle_core, gossip_core, election_core) are pure and run in tests/sim.
"""

from monitors.gossip.clock import LamportClock, TimeTuple
from monitors.gossip.limited_set import LimitedSet

__all__ = ["LamportClock", "LimitedSet", "TimeTuple"]
