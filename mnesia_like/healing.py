"""Healing: what follows an inconsistent_database, and anti-entropy between replicas.

A reconnect where each side saw the other go down (membership.py) is healed by the merge
mode: none (stay split, as Mnesia), autoheal (the losing side, by autoheal's rule, drops
its tables and reloads them from the winner's side), lww (both keep running and exchange
contents; the newest entry per key wins, by stamp).

Anti-entropy repairs what no inconsistency reports: two running replicas of a loaded table
whose bucket digests differ at two checks in a row (with neither digest changed between)
exchange those buckets' entries and keep the newest per key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mnesia_like import records as rec
from mnesia_like import schema as sch
from mnesia_like.effects import MnesiaEffect
from mnesia_like.loading import Loader
from mnesia_like.membership import Membership
from mnesia_like.messages import str_list
from mnesia_like.state import NodeState, entry_pair_ok
from mnesia_like.waiters import Waiters
from mnesia_like.writes import Writes
from monitors.effects import Connect, Log


def winner_side(a: list[str], b: list[str]) -> int:
    """Autoheal's rule without the node monitor: the larger side wins; on a tie, the side
    holding the lowest node name. Returns 0 if `a` wins, 1 if `b` does. Every node gets the
    same answer from the same two lists."""
    if len(set(a)) != len(set(b)):
        return 0 if len(set(a)) > len(set(b)) else 1
    return 0 if min(a) < min(b) else 1


class Healer:
    """Healing and anti-entropy (see the module docstring). `drop_transactions` forgets
    every transaction of this node (a reload ends them all)."""

    def __init__(  # noqa: PLR0917 - the parts it drives
        self,
        state: NodeState,
        writes: Writes,
        loader: Loader,
        waiters: Waiters,
        membership: Membership,
        drop_transactions: Callable[[], list[MnesiaEffect]],
        *,
        merge: str,
        anti_entropy: bool,
    ) -> None:
        self.s = state
        self.writes = writes
        self.loader = loader
        self.waiters = waiters
        self.membership = membership
        self.drop_transactions = drop_transactions
        self.merge = merge
        self.anti_entropy = anti_entropy  # off only in tests that need a bare protocol
        # per (peer, table) the digests compared at the previous check, so that only a
        # difference that outlived a check is repaired
        self._sync_seen: dict[tuple[str, str], tuple[list[int], list[int]]] = {}
        self.repairs = 0
        self.merge_conflicts = 0

    def inconsistent(
        self, peer: str, inc: int, my_side: list[str], their_side: list[str], m: dict[str, Any]
    ) -> list[MnesiaEffect]:
        if self.merge == "none":
            self.s.inconsistent[peer] = inc
            return [Log.warning("staying split from the node (merge: none)", node=peer)]
        if self.merge == "autoheal":
            if winner_side(my_side, their_side) == 1:
                return self.reload(peer, "autoheal")
            # until it comes back with a heal hello; told, in case its view of us differs
            # (it may still count us as running after crossing messages of an earlier heal)
            self.s.inconsistent[peer] = inc
            return [
                Log.info("autoheal: we are on the winning side", node=peer),
                self.s.send(peer, "heal_req"),
            ]
        # lww: both keep running together and exchange contents
        out = self._send_merge(peer, m)
        db_nodes = str_list(m["db_nodes"]) or []
        merged, changed, _ = sch.merge_tables(self.s.tables, m["tables"])
        out += self.membership.merge_schema(db_nodes, merged, changed, peer)
        out += self.membership.peer_up(peer, m)
        out += [self.s.event("heal", self.s.node, f"lww merge with {peer}")]
        return out

    def reload(self, winner: str, why: str) -> list[MnesiaEffect]:
        """Discard this node's tables and reload them from `winner`'s side (autoheal loser)."""
        out: list[MnesiaEffect] = [
            Log.warning("reloading every table from another node", winner=winner, why=why),
            self.s.event("heal", self.s.node, f"reload_from {winner}"),
        ]
        out += self.drop_transactions()
        for peer in sorted(self.s.running):
            out.append(self.s.send(peer, "leave"))
            self.s.marks.add(peer)
            out.append(self.s.event("mnesia_down", peer))
        self.s.running.clear()
        self.membership.forget_hellos()
        self.s.peer_loaded.clear()
        self.s.peer_loading.clear()
        self.s.inconsistent.pop(winner, None)
        self.s.marks.discard(winner)
        self.loader.unload_all()
        self._sync_seen.clear()
        self.s.heal_side = {winner}
        if winner in self.s.connected:
            out.append(self.membership.hello(winner, reply=False))
        else:
            out.append(Connect(winner))
        return out + self.s.persist()

    def on_check(self, sender: str, m: dict[str, Any], now: float) -> list[MnesiaEffect]:
        self.s.peer_tables(sender, m)
        out = self.loader.try_loads() + self.waiters.check()
        sums = m.get("sums")
        if isinstance(sums, dict) and self.anti_entropy:
            out += self._compare_sums(sender, sums)
        return out

    # ---- anti-entropy

    def _compare_sums(self, sender: str, sums: dict[str, Any]) -> list[MnesiaEffect]:
        """Anti-entropy: two running replicas of a loaded table whose bucket digests differ
        at two checks in a row, with neither side's digest of that bucket changed in between
        (so no write was in flight), hold different content. That happens when a write
        reached only part of a replica set that is not fully connected (a partial
        partition: nobody saw anybody down between the replicas that differ, so no
        inconsistent_database fires), when a node that loaded its own copy while cut off
        rejoins peers that saw it go down but that it did not see go down, or when
        autoheal reloads cross. Both sides then exchange the bucket's entries and keep the
        newest per key, as the lww merge does. The node with the smaller name starts it."""
        out: list[MnesiaEffect] = []
        if self.s.node > sender:
            return out
        for table, theirs in sorted(sums.items()):
            mine = self.writes.sums.get(table)
            if mine is None or table not in self.s.loaded or not rec.sums_ok(theirs):
                continue
            prev = self._sync_seen.get((sender, table))
            self._sync_seen[(sender, table)] = (list(theirs), list(mine))
            if prev is None:
                continue
            buckets = [
                b
                for b in range(rec.SYNC_BUCKETS)
                if theirs[b] != mine[b] and prev[0][b] == theirs[b] and prev[1][b] == mine[b]
            ]
            if buckets:
                self.repairs += 1
                out.append(
                    Log.warning(
                        "anti-entropy: a replica differs from ours; exchanging entries",
                        table=table,
                        node=sender,
                        buckets=len(buckets),
                    )
                )
                out += self._send_sync(sender, table, buckets, reply=True)
        return out

    def _send_sync(
        self, peer: str, table: str, buckets: list[int], reply: bool
    ) -> list[MnesiaEffect]:
        wanted = set(buckets)
        content = {kj: e for kj, e in self.s.store[table].items() if rec.bucket_of(kj) in wanted}
        out: list[MnesiaEffect] = []
        for chunk, last in self.writes.chunks(content):
            out.append(
                self.s.send(
                    peer,
                    "sync",
                    table=table,
                    buckets=sorted(wanted),
                    entries=chunk,
                    reply=reply and last,
                )
            )
        return out

    def on_sync(self, sender: str, m: dict[str, Any], now: float) -> list[MnesiaEffect]:
        table = m["table"]
        if table not in self.s.store:
            return []
        entries = [e for e in m["entries"] if entry_pair_ok(e)]
        before = self.writes.sums.get(table, [])[:]
        # every active replica is a target: a repair is not forwarded (each pair repairs)
        out = self.writes.apply_entries(
            table, entries, sorted(self.s.write_view(table) | {sender}), forward=False
        )
        if self.writes.sums.get(table, []) != before:
            out.append(Log.warning("anti-entropy: newer entries taken", table=table, node=sender))
        buckets = [b for b in m["buckets"] if isinstance(b, int) and 0 <= b < rec.SYNC_BUCKETS]
        if m["reply"] and table in self.s.loaded and buckets:
            out += self._send_sync(sender, table, buckets, reply=False)
        return out

    def on_heal_req(self, sender: str, m: dict[str, Any], now: float) -> list[MnesiaEffect]:
        """The winner of an inconsistency tells us we lost: reload from it (or, if we are
        already on our way to its side, ask to join again)."""
        if self.merge != "autoheal":
            return []
        if sender in self.s.heal_side:
            return [self.membership.hello(sender, reply=False)]
        return self.reload(sender, "autoheal: the winning side asked")

    def _send_merge(self, peer: str, m: dict[str, Any]) -> list[MnesiaEffect]:
        out: list[MnesiaEffect] = []
        theirs = set(str_list(m["loaded"]) or [])
        for table in sorted(self.s.loaded & theirs):
            for chunk, last in self.writes.chunks(self.s.store[table]):
                out.append(self.s.send(peer, "merge_chunk", table=table, entries=chunk, last=last))
        return out

    def on_merge_chunk(self, sender: str, m: dict[str, Any], now: float) -> list[MnesiaEffect]:
        table = m["table"]
        if table not in self.s.store:
            return []
        content = self.s.store[table]
        entries = [e for e in m["entries"] if entry_pair_ok(e)]
        conflicts = []
        for kj, entry in entries:
            mine = content.get(kj)
            if mine is not None and mine["s"] != entry["s"] and mine["r"] != entry["r"]:
                conflicts.append(kj)
        out = self.writes.apply_entries(table, entries, [self.s.node, sender])
        if conflicts:
            self.merge_conflicts += len(conflicts)
            out.append(
                Log.warning(
                    "lww merge: conflicting writes decided by (lamport, node), newest wins",
                    table=table,
                    node=sender,
                    conflicts=len(conflicts),
                    keys=conflicts[:5],
                )
            )
        return out
