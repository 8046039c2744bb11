"""Who can see whom: each node's view, gossiped so that every node can judge a partial partition.

A view is the set of members a node has a dist connection to (itself included) and whether it
has paused its application. Each node stamps its own view with a counter that only grows and
sends it to its peers when it changes; peers relay what is new to them. So two nodes that can
reach each other, even through a third, end up holding the same views and (partitions.py) make
the same decision. RabbitMQ nodes share nothing of the kind, which is why its answer to a
partial partition depends on who heard what first.

Freshness: a view from its own node (the sender) always wins, unless it comes from an
incarnation we know is gone; a relayed one wins when its stamp is higher. A restarted node
starts counting at 0, so when a peer echoes its old, higher stamp back it jumps past it
(`bump`), and its views win again everywhere.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from monitors.node_monitor.partitions import Adjacency, mutual_graph


@dataclass(frozen=True)
class View:
    creation: int | None
    stamp: int
    seen: frozenset[str]
    paused: bool
    cut: frozenset[str] = frozenset()  # links this node cut on purpose (not faults)

    def to_wire(self) -> dict[str, Any]:
        out = {"c": self.creation, "s": self.stamp, "seen": sorted(self.seen), "p": self.paused}
        if self.cut:
            out["x"] = sorted(self.cut)
        return out


def view_from_wire(raw: Any) -> View | None:
    """A View from its JSON form, or None if the shape is wrong (the caller logs it)."""
    if not isinstance(raw, dict):
        return None
    c, s, seen, p = raw.get("c"), raw.get("s"), raw.get("seen"), raw.get("p")
    if c is not None and (not isinstance(c, int) or isinstance(c, bool)):
        return None
    if not isinstance(s, int) or isinstance(s, bool) or s < 0:
        return None
    if not isinstance(seen, list) or not all(isinstance(n, str) for n in seen):
        return None
    if not isinstance(p, bool):
        return None
    x = raw.get("x", [])
    if not isinstance(x, list) or not all(isinstance(n, str) for n in x):
        return None
    return View(c, s, frozenset(seen), p, frozenset(x))


class ViewTable:
    """This node's view and the latest view it knows of every other member."""

    def __init__(self, node: str, creation: int) -> None:
        self.node = node
        self.creation = creation
        self.own = View(creation, 0, frozenset((node,)), False)
        self.others: dict[str, View] = {}

    def set_own(self, seen: Collection[str], paused: bool, cut: Collection[str] = ()) -> bool:
        """Update this node's view; True (and a new stamp) if it changed."""
        seen_set, cut_set = frozenset(seen) | {self.node}, frozenset(cut)
        if (seen_set, paused, cut_set) == (self.own.seen, self.own.paused, self.own.cut):
            return False
        self.own = View(self.creation, self.own.stamp + 1, seen_set, paused, cut_set)
        return True

    def merge(
        self,
        sender: str,
        entries: Mapping[str, View],
        members: Collection[str],
        current: Mapping[str, int],
    ) -> tuple[dict[str, View], bool]:
        """Take what is newer from `entries` (received from `sender`).

        `current` maps connected nodes to the creation their monitor announced: a view of such
        a node from any other incarnation is stale. Returns the entries that changed (to relay)
        and whether our own stamp had to jump (then our view must be sent again).
        """
        changed: dict[str, View] = {}
        bumped = False
        for origin, view in entries.items():
            if origin == self.node:
                # our own view echoed back: only an older incarnation's can be ahead of us
                if view.creation != self.creation and view.stamp >= self.own.stamp:
                    self.own = View(
                        self.creation, view.stamp + 1, self.own.seen, self.own.paused, self.own.cut
                    )
                    bumped = True
                continue
            if origin not in members:
                continue
            known = current.get(origin)
            if known is not None and view.creation != known:
                continue
            held = self.others.get(origin)
            if origin == sender:
                fresh = held is None or held.creation != view.creation or view.stamp > held.stamp
            else:
                fresh = held is None or view.stamp > held.stamp
            if fresh and view != held:
                # Kept as its node sent it, not cut down to the members we know: during a join
                # a relay would otherwise lose the new member from a view, and the node's own
                # copy (same stamp) would never replace it (found by tests/sim/adversarial.py).
                # mutual_graph reads only members.
                self.others[origin] = view
                changed[origin] = view
        return changed, bumped

    def forget(self, node: str) -> None:
        self.others.pop(node, None)

    def wire(self, only: Mapping[str, View] | None = None) -> dict[str, Any]:
        """The JSON form of the given entries, or of every view we hold (ours included)."""
        if only is None:
            only = {self.node: self.own, **self.others}
        return {origin: view.to_wire() for origin, view in only.items()}

    def seen_map(self) -> dict[str, frozenset[str]]:
        return {self.node: self.own.seen, **{n: v.seen for n, v in self.others.items()}}

    def paused_nodes(self) -> frozenset[str]:
        out = {n for n, v in self.others.items() if v.paused}
        if self.own.paused:
            out.add(self.node)
        return frozenset(out)

    def graph(
        self, members: Collection[str], assume: Collection[str] = (), physical: bool = False
    ) -> Adjacency:
        """The mutual-visibility graph over `members`; `assume` adds edges from this node, and
        `physical` adds every link some node says it cut on purpose: "would this link be
        wanted if it were up?" must not count our own cuts as faults.
        """
        seen = self.seen_map()
        if physical:
            views = {self.node: self.own, **self.others}
            for u, v in views.items():
                for w in v.cut:
                    seen[u] = seen.get(u, frozenset()) | {w}
                    seen[w] = seen.get(w, frozenset()) | {u}
        if assume:
            seen[self.node] = seen[self.node] | set(assume)
            for n in assume:
                seen[n] = seen.get(n, frozenset()) | {self.node}
        return mutual_graph(seen, members)
