"""EphemeralMembers: what a core node keeps of the ephemeral members attached to it.

A part of NodeMonitorCore (see core.py). Ephemeral members (role: ephemeral, their own core in
ephemeral.py) are never members of the cluster: this part records them as they attach
(node_up, announce, keepalive), tells them the member list whenever it changes, forgets them
when they leave or after `forget_ephemeral_after` seconds down, and logs once what it drops.
It reads and changes the shared MonitorState and calls nothing of the facade.
"""

from __future__ import annotations

from typing import Any

from monitors.effects import CancelTimer, Log, SetTimer
from monitors.node_monitor.effects import NodeMonitorEffect
from monitors.node_monitor.ephemeral import ROLE_CORE, ROLE_EPHEMERAL
from monitors.node_monitor.state import FORGET_TIMER, MonitorState


class EphemeralMembers:
    """The ephemeral members of one core node, over one MonitorState."""

    def __init__(self, st: MonitorState) -> None:
        self.st = st

    def on_ephemeral(self, sender: str, m: dict[str, Any], now: float) -> list[NodeMonitorEffect]:
        """A message from an ephemeral node: its record (attach, refresh) or its leave."""
        t = m["t"]
        if t in ("node_up", "announce", "keepalive") and "node" in m:
            if m["node"] != sender or sender not in self.st._up:
                return []  # a record for another node, or from a link that has gone
            out: list[NodeMonitorEffect] = []
            if self.st._eph.get(sender) != m["creation"] or sender in self.st._eph_down:
                out.append(Log.info("ephemeral member up", node=sender))
            self.st._eph[sender] = m["creation"]
            self.st._eph_down.pop(sender, None)
            if FORGET_TIMER + sender in self.st._timers:
                self.st._timers.discard(FORGET_TIMER + sender)
                out.append(CancelTimer(FORGET_TIMER + sender))
            if t == "node_up":
                out.append(self.st._send(sender, "announce", **self.ephemeral_record(sender)))
            return out
        if t == "left_cluster" and m["node"] == sender and sender in self.st._eph:
            creation = self.st._eph[sender]
            if m.get("c") != creation:  # a leave of an older (or forged) incarnation
                return self.dropped_once(sender, "a leave from another incarnation", m)
            out = self.forget_ephemeral(sender, "it left", now)
            return out + self.st._broadcast("ephemeral_left", node=sender, creation=creation)
        return []

    def on_ephemeral_left(
        self, sender: str, m: dict[str, Any], now: float
    ) -> list[NodeMonitorEffect]:
        """Another core node saw an ephemeral member leave: so do we, if it is the same
        incarnation (a restarted one under the same name stays)."""
        node = m["node"]
        if self.st._eph.get(node) != m["creation"]:
            return []
        return self.forget_ephemeral(node, f"it left ({sender} was told)", now)

    def ephemeral_down(self, node: str, now: float) -> list[NodeMonitorEffect]:
        if node not in self.st._eph or node in self.st._eph_down:
            return []
        self.st._eph_down[node] = now
        self.st._timers.add(FORGET_TIMER + node)
        return [
            Log.info(
                "ephemeral member down",
                node=node,
                forgotten_in=self.st.forget_ephemeral_after,
            ),
            SetTimer(FORGET_TIMER + node, self.st.forget_ephemeral_after),
        ]

    def forget_ephemeral(self, node: str, why: str, now: float) -> list[NodeMonitorEffect]:
        if node not in self.st._eph:
            return []
        since = self.st._eph_down.pop(node, None)
        del self.st._eph[node]
        out: list[NodeMonitorEffect] = []
        if FORGET_TIMER + node in self.st._timers:
            self.st._timers.discard(FORGET_TIMER + node)
            out.append(CancelTimer(FORGET_TIMER + node))
        down = {} if since is None else {"down_for": round(now - since, 3)}
        return [*out, Log.info("ephemeral member forgotten: " + why, node=node, **down)]

    def dropped_once(self, sender: str, what: str, m: dict[str, Any]) -> list[NodeMonitorEffect]:
        """Log a dropped membership message once per sender and kind, then drop quietly."""
        key = (sender, what)
        if key in self.st._dropped_told:
            return []
        if len(self.st._dropped_told) >= 1024:
            self.st._dropped_told.clear()
        self.st._dropped_told.add(key)
        return [
            Log.warning("node monitor: dropped " + what, sender=sender, t=m.get("t"), c=m.get("c"))
        ]

    def misnamed(self, sender: str) -> list[NodeMonitorEffect]:
        if sender in self.st._eph_misnamed:
            return []
        self.st._eph_misnamed.add(sender)
        return [
            Log.error(
                "a core member says it is ephemeral; its messages are dropped. Give it back "
                "role: core, or run `rabbitry cluster forget` for it on a core node first",
                node=sender,
            )
        ]

    def ephemeral_record(self, peer: str) -> dict[str, Any]:
        """What an ephemeral node follows: our members, running, and partition mode; and, if
        we left a cluster, its members (`left`: our own word that we are not one of them)."""
        record = {
            **self.st._peer_record(peer),
            "members": sorted(self.st._all),  # and _peer_record's mode: the core's, to follow
        }
        if self.st._left_from:
            record["left"] = sorted(self.st._left_from)
        return record

    def tell_ephemerals(self) -> list[NodeMonitorEffect]:
        """An ephemeral node follows us: tell it whenever the members or our running changed."""
        said = (tuple(sorted(self.st._all)), tuple(sorted(self.st._disc)), self.st._app)
        if said == self.st._eph_said:
            return []
        self.st._eph_said = said
        up = sorted(set(self.st._eph) - set(self.st._eph_down))
        return [self.st._send(n, "announce", **self.ephemeral_record(n)) for n in up]

    def role_conflict(self, node: str, role: str) -> str:
        """Why `node` may not connect as `role` ("" if it may): roles are facts. A name our
        cluster files hold as core cannot attach as ephemeral (it would count as that core
        member being up: split brain under pause_minority), and an ephemeral member we know
        cannot come back as core, until the name is forgotten. The dist layer refuses the
        handshake with this text, and the refused process exits 2 printing it."""
        if node == self.st.node:
            return ""
        if role == ROLE_EPHEMERAL and node in self.st._all:
            return (
                f"{node} is a core member of the cluster (in {self.st.node}'s cluster files), so "
                f"it cannot attach as ephemeral; run `rabbitry cluster forget {node}` on a core "
                "member first, or start it with role: core"
            )
        if role == ROLE_CORE and node in self.st._eph and node not in self.st._all:
            return (
                f"{node} is an ephemeral member of the cluster (known to {self.st.node}), so it "
                f"cannot join as core until it is forgotten: `rabbitry cluster forget {node}` "
                f"on a core member, or {self.st.forget_ephemeral_after:g} s after it went down"
            )
        return ""
