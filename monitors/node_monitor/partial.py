"""Partials: partial partitions, the links we cut, and the settling after a heal.

A part of NodeMonitorCore (see core.py): RabbitMQ's check_partial_partition round (reporter,
checker, proxy), the upgrade of a confirmed partial partition to a full one along the parts of
partitions.decompose (`cut_link`, `review_cuts`), the members still down after a nodeup that
count as linked for `heal_settle` (`is_settling`, `settled`), and the parts a decision is
taken on (`parts`, `part_runs`). It reads and changes the shared MonitorState and calls
nothing of the facade.
"""

from __future__ import annotations

from typing import Any

from monitors.effects import Connect, Disconnect, Log, SetTimer
from monitors.node_monitor.effects import NodeMonitorEffect, Notify
from monitors.node_monitor.messages import MAX_LIST, MAX_NAME
from monitors.node_monitor.partitions import decompose, majority, part_of
from monitors.node_monitor.state import CUT_TIMER, TIMER_HEAL_SETTLE, MonitorState
from monitors.node_monitor.views import View, view_from_wire


class Partials:
    """Partial partitions, cuts and settling over one MonitorState."""

    def __init__(self, st: MonitorState) -> None:
        self.st = st

    def on_check_partial_partition(
        self, sender: str, m: dict[str, Any], now: float
    ) -> list[NodeMonitorEffect]:
        """We are the checker: does the node `sender` saw down still look up to us, and is it
        the same incarnation? Ask it for its creation (RabbitMQ's rpc of system_info(creation))."""
        node = m["node"]
        if m["reporter"] != sender or node in (self.st.node, sender):
            return [
                Log.warning(
                    "node monitor: dropped a malformed check_partial_partition", sender=sender
                )
            ]
        if m["checker_c"] != self.st.creation:
            return [
                Log.info(
                    "check_partial_partition for an old incarnation of us; ignored", sender=sender
                )
            ]
        if node not in self.st._up or self.st._guids.get(node) != m["node_c"]:
            return []  # it is down for us too (or restarted): a full partition, nothing to say
        self.st._checks.setdefault(node, {})[sender] = (m["node_c"], m["reporter_c"])
        if node in self.st._queried:
            return []
        self.st._queried.add(node)
        return [self.st._send(node, "creation_query")]

    def on_creation_query(
        self, sender: str, m: dict[str, Any], now: float
    ) -> list[NodeMonitorEffect]:
        return [self.st._send(sender, "creation_reply", creation=self.st.creation)]

    def on_creation_reply(
        self, sender: str, m: dict[str, Any], now: float
    ) -> list[NodeMonitorEffect]:
        self.st._queried.discard(sender)
        out: list[NodeMonitorEffect] = []
        for reporter, (node_c, reporter_c) in sorted(self.st._checks.pop(sender, {}).items()):
            if m["creation"] != node_c or reporter not in self.st._up:
                continue
            out += [
                Log.warning(
                    "partial partition: the reporter saw the node down, we still see it",
                    reporter=reporter,
                    node=sender,
                ),
                self.st._send(
                    reporter,
                    "partial_partition",
                    node=sender,
                    proxy=self.st.node,
                    creation=reporter_c,
                ),
                # Ours: the node it cannot see learns it too (if the cut is both ways, as it
                # checks on arrival), so both ends of the broken link act at once.
                self.st._send(
                    sender, "partial_partition", node=reporter, proxy=self.st.node, creation=node_c
                ),
            ]
        if out:
            self.st._partial = True
            out += self.resolve_partial()
        return out

    def on_partial_partition(
        self, sender: str, m: dict[str, Any], now: float
    ) -> list[NodeMonitorEffect]:
        node = m["node"]
        if m["proxy"] != sender:
            return [
                Log.warning(
                    "node monitor: dropped a partial_partition not sent by its proxy", sender=sender
                )
            ]
        if m["creation"] != self.st.creation or node not in self.st._all:
            return [
                Log.info(
                    "partial_partition for an old incarnation or a non-member; ignored",
                    sender=sender,
                )
            ]
        if node in self.st._up or sender not in self.st._up:
            # RabbitMQ acts on it regardless; by now the picture has changed, so it is stale.
            return [Log.info("partial_partition no longer holds; ignored", node=node, proxy=sender)]
        if self.is_settling(node, now):
            self.st._deferred.add(node)
            return [
                Log.info(
                    "partial_partition put off: the node may still be reconnecting after a heal",
                    node=node,
                    proxy=sender,
                    for_s=round(self.st._settling[node] - now, 3),
                ),
                *self.arm_settle_timer(now),
            ]
        out: list[NodeMonitorEffect] = [
            Log.warning(
                "Partial partition detected: we saw DOWN from the node; we can still see the "
                "proxy, which can see it",
                node=node,
                proxy=sender,
            ),
            Notify("partial_partition", node),
        ]
        self.st._partial = True
        return out + self.resolve_partial()

    def on_partial_partition_disconnect(
        self, sender: str, m: dict[str, Any], now: float
    ) -> list[NodeMonitorEffect]:
        if m["node"] != sender:
            return [
                Log.warning(
                    "node monitor: dropped a partial_partition_disconnect naming another node",
                    sender=sender,
                )
            ]
        if sender not in self.st._up:
            return []
        self.st._cut.add(sender)
        self.st._cutting.add(sender)
        return [
            Log.warning("disconnecting at the peer's request (partial partition)", node=sender),
            Disconnect(sender, self.st.disconnect_ban),
        ]

    def check_partial_partition(self, node: str) -> list[NodeMonitorEffect]:
        """Ask every other connected member whose creation we know whether `node` is really
        down (RabbitMQ sends to the running ones; our paused monitors still answer)."""
        node_c = self.st._guids.get(node)
        if node_c is None and node in self.st._views.others:
            node_c = self.st._views.others[node].creation  # never connected: gossip knows it
        if node_c is None:
            return []
        out: list[NodeMonitorEffect] = []
        for checker in sorted(self.st._connected() - {node}):
            checker_c = self.st._guids.get(checker)
            if checker_c is None:
                continue
            out.append(
                self.st._send(
                    checker,
                    "check_partial_partition",
                    node=node,
                    reporter=self.st.node,
                    node_c=node_c,
                    checker_c=checker_c,
                    reporter_c=self.st.creation,
                )
            )
        return out

    def recheck_down(self, down: list[str]) -> list[NodeMonitorEffect]:
        """A member that stays down for us while a peer we see can see it is a partial
        partition no nodedown will ever report (it began while we were cut off from everyone,
        or before we booted, or while the link was still down from an earlier fault). RabbitMQ
        never finds those. Where the answer is a pause (our part or the member's would not run:
        always under pause_minority, under pause_if_all_down when one of the two parts holds
        no preferred node) we check from the first ping round on, every 5th round: the answer
        is at most a brief pause. Where it may be a cut (both parts would run), from the 10th
        round, every 30th: while a partition heals, links come back one by one (after
        reconnect bans), and those gaps must not be cut."""
        parts = self.parts() if self.st.config.pauses else []
        out: list[NodeMonitorEffect] = []
        for n in down:
            ticks = self.st._down_ticks[n] = self.st._down_ticks.get(n, 0) + 1
            pauses = bool(parts) and not (
                self.part_runs(part_of(self.st.node, parts)) and self.part_runs(part_of(n, parts))
            )
            first, every = (1, 5) if pauses else (10, 30)
            if ticks % every != first % every:
                continue
            if any(
                n in self.st._views.others[p].seen
                for p in self.st._connected()
                if p in self.st._views.others
            ):
                out += self.check_partial_partition(n)
        return out

    def is_settling(self, node: str, now: float) -> bool:
        until = self.st._settling.get(node)
        if until is None:
            return False
        if now < until:
            return True
        del self.st._settling[node]
        return False

    def arm_settle_timer(self, now: float) -> list[NodeMonitorEffect]:
        """Fire when the earliest settle time is over: the decision is made again without
        it, and a put-off partial partition is checked afresh."""
        due = [until for until in self.st._settling.values() if until > now]
        if not due or TIMER_HEAL_SETTLE in self.st._timers:
            return []
        self.st._timers.add(TIMER_HEAL_SETTLE)
        return [SetTimer(TIMER_HEAL_SETTLE, max(min(due) - now, 0.0) + 1e-3)]

    def settled(self, now: float) -> list[NodeMonitorEffect]:
        """The settle time of some put-off partial partitions is over: the members still down
        are checked afresh (RabbitMQ's check_partial_partition, with today's picture)."""
        out: list[NodeMonitorEffect] = []
        for n in sorted(self.st._deferred):
            if self.is_settling(n, now):
                continue
            self.st._deferred.discard(n)
            if n not in self.st._up and n in self.st._all and n not in self.st._cut:
                out.append(Log.info("heal settled; the node is still down: checking", node=n))
                out += self.check_partial_partition(n)
        return out + self.arm_settle_timer(now)

    def partial_in_sight(self) -> bool:
        """Whether the nodes we can reach, directly or not, fail to all see each other."""
        graph = self.st._views.graph(self.st._all)
        component, todo = {self.st.node}, [self.st.node]
        while todo:
            for n in graph[todo.pop()]:
                if n not in component:
                    component.add(n)
                    todo.append(n)
        return any(len(graph[n] & component) != len(component) - 1 for n in component)

    def preferred(self) -> set[str]:
        if self.st.config.mode != "pause_if_all_down":
            return set()
        return set(self.st.config.nodes) & self.st._all

    def parts(self, assume: set[str] | None = None, physical: bool = False) -> list[frozenset[str]]:
        graph = self.st._views.graph(self.st._all, assume or (), physical)
        return decompose(graph, preferred=self.preferred(), paused=self.st._views.paused_nodes())

    def part_runs(self, part: frozenset[str]) -> bool:
        """Whether the nodes of `part` keep their application under the current mode."""
        if self.st.config.mode == "pause_minority":
            return majority(part, self.st._all)
        if self.st.config.mode == "pause_if_all_down":
            preferred = self.preferred()
            return not preferred or bool(part & preferred)
        return True

    def should_cut(self, node: str, parts: list[frozenset[str]]) -> bool:
        """A link is cut when it joins two different parts that both keep running (links to
        paused nodes are harmless, so pause_minority never cuts)."""
        if self.st.config.mode == "pause_minority":
            return False
        mine, theirs = part_of(self.st.node, parts), part_of(node, parts)
        return node not in mine and self.part_runs(mine) and self.part_runs(theirs)

    def resolve_partial(self) -> list[NodeMonitorEffect]:
        """A partial partition is confirmed: make it a full one along the parts every node
        computes alike (RabbitMQ: upgrade_to_full_partition from the proxy, on both sides)."""
        parts = self.parts(physical=True)
        out: list[NodeMonitorEffect] = []
        for n in sorted(self.st._connected()):
            if self.should_cut(n, parts):
                out += self.cut_link(n)
        return out

    def cut_link(self, n: str) -> list[NodeMonitorEffect]:
        """upgrade_to_full_partition for one link: tell the peer, which disconnects at once,
        and disconnect ourselves `disconnect_delay` later if it has not. (RabbitMQ disconnects
        right after the cast, so the peer may never hear why, reconnect after the ban and be
        cut again, for as long as the fault lasts.) Both ends then leave the link alone (no
        pings) until `_review_cuts` finds the fault gone."""
        self.st._cut.add(n)
        self.st._cutting.add(n)
        out: list[NodeMonitorEffect] = [
            Log.warning("upgrading the partial partition to a full one: disconnecting", node=n),
            self.st._send(n, "partial_partition_disconnect", node=self.st.node),
        ]
        if self.st.disconnect_delay <= 0:
            return [*out, Disconnect(n, self.st.disconnect_ban)]
        key = CUT_TIMER + n
        if key not in self.st._timers:
            self.st._timers.add(key)
            out.append(SetTimer(key, self.st.disconnect_delay))
        return out

    def review_cuts(self) -> list[NodeMonitorEffect]:
        """Reconnect a cut link once it would no longer be cut if it were up: the fault that
        made it cross two parts has healed. Until then it is not pinged, so it does not flap."""
        self.st._cut &= self.st._others()
        idle = self.st._cut - set(self.st._up)
        # reconnected by the other side, and we have its view since: judge it afresh
        back = (self.st._cut & self.st._fresh) - self.st._cutting
        if not (idle or back):
            return []
        parts = self.parts(assume=idle | back, physical=True)
        out: list[NodeMonitorEffect] = []
        for n in sorted(idle | back):
            if self.should_cut(n, parts):
                if n in back:
                    out += self.cut_link(n)  # still faulty: it missed our request
            else:
                self.st._cut.discard(n)
                out.append(Log.info("the partial partition is over: reconnecting", node=n))
                if n in idle:
                    out.append(Connect(n))
        return out

    def on_view(self, sender: str, m: dict[str, Any], now: float) -> list[NodeMonitorEffect]:
        entries: dict[str, View] = {}
        for origin, raw in m["views"].items():
            view = view_from_wire(raw)
            if (
                view is None
                or not isinstance(origin, str)
                or not 0 < len(origin) <= MAX_NAME
                or len(view.seen) > MAX_LIST
            ):
                return [
                    Log.warning(
                        "node monitor: dropped a malformed view",
                        sender=sender,
                        origin=str(origin)[:80],
                    )
                ]
            entries[origin] = view
        current = {n: self.st._guids[n] for n in self.st._up if n in self.st._guids}
        changed, bumped = self.st._views.merge(sender, entries, self.st._all, current)
        if sender in entries and sender in self.st._up:
            self.st._fresh.add(sender)
        out: list[NodeMonitorEffect] = []
        if changed:
            relay = self.st._views.wire(changed)
            out += [
                self.st._send(n, "view", views=relay)
                for n in sorted(self.st._connected() - {sender})
            ]
        if bumped:
            own = self.st._views.wire({self.st.node: self.st._views.own})
            out += [self.st._send(n, "view", views=own) for n in sorted(self.st._connected())]
        return out

    def resume_check(self) -> tuple[bool, str]:
        """A paused node resumes once (issue 15): only when it has the current view of every
        member it reaches, and its part of partitions.decompose may run: a strict majority
        that is fully connected (or one holding a preferred node), not merely a majority it
        reaches. While a heal brings links back one at a time, a node that reaches a majority
        through one peer is still in a partial partition, and resuming there meant pausing
        again a ping round later, when the check confirmed it (or pausing a running node on
        the other side of the missing link). The running nodes form a clique, so the part
        that wins holds all of them and only grows as links return: nobody running pauses,
        and each paused node resumes once, when its last link to that part is back."""
        waiting = sorted(self.st._connected() - self.st._fresh)
        if waiting:
            return True, f"resuming waits for the current views of {waiting}"
        mine = part_of(self.st.node, self.parts())
        if self.part_runs(mine):
            return False, ""
        return True, (
            f"resuming waits for a full connection to a part that may run; this node's "
            f"fully-connected part is {sorted(mine)}"
        )
