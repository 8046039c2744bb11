"""MingleCore: the start-up sync of clocks and revoked ids (Celery's Mingle and `hello`).

Celery's mingle broadcasts `hello` with our revoked set, waits a fixed second for replies,
adjusts the clock and merges each reply's revoked set. What this core does differently, and why:

- It finishes as soon as every node known to be alive has answered, with `timeout` (1 s) as
  the upper bound, instead of always waiting the full second. "Known alive" is learnt from the
  replies: each carries the replier's view of the alive workers, so the set of nodes to wait
  for is every replier plus every node a replier named (plus any node whose worker-online
  reaches us meanwhile). Only a *settled* replier (one that finished a mingle of its own) has
  a view worth trusting, so we finish early only once one has answered: nodes that all start
  together know nobody yet, and they wait the timeout and so find each other. With no reply
  at all it waits the whole timeout and reports "all alone".
- Nodes starting at the same moment find each other (Celery #2355, where both said "all
  alone"): a hello that arrives while we mingle is answered AND counted (it carries the
  sender's clock and revoked set, so the sender is in `synced_with`), and its sender is waited
  for: we finish early only once every node we wait for has *replied*, so that our clock ends
  above each one's clock as it was when it handled our hello. A node whose mingle has ended
  still answers and merges every later hello and every late reply.
- Revoked sets travel as chunked deltas with a cap (Celery #4959: one 50 000-id message per
  reply): a hello or reply carries at most `sync_chunk` ids, the rest follow in `mingle.chunk`
  messages on the same path, newest first, and at most `sync_max` ids in all. A reply carries
  only the delta: what we hold that the hello did not carry. A hello from a starting node is
  empty, so it costs one small message; the replies carry what it lacks.
- Expired ids are purged before anything is sent (Celery's hello does the same).
- A client (an executor, issue 26) syncs from one core member, not from every node: its hello
  says `client` and `one`, only core members hear it, and GossipCore lets exactly one of them
  (the client's proxy) reply, naming nobody, so the client is done at that one reply. If no
  reply comes within the timeout (the members' views differed for a moment), the client asks
  once more without `one`, and every core member replies. A client's hello is never counted
  by a mingling core member: clients do not hear hellos, so it would wait for a reply that
  never comes.

The core is fed validated messages from other nodes by GossipCore, which owns the clock (and
has adjusted it) and the alive view. It never raises on input and reads no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from monitors.effects import CancelTimer, Log, SetTimer
from monitors.gossip import wire
from monitors.gossip.effects import Direct, GossipEffect, MingleDone, Publish
from monitors.gossip.limited_set import LimitedSet
from monitors.gossip.wire import Stamper

TIMER = "mingle"
MAX_INBOUND = 64  # chunked syncs being received at once (one per starting peer, usually)
INBOUND_TTL = 30.0  # an incomplete chunked sync is forgotten after this long


def merge(revoked: LimitedSet, entries: Mapping[str, Any], now: float) -> list[str]:
    """Merge validated wire entries into `revoked`; return the ids that were not there."""
    if not entries:
        return []
    new = [k for k in entries if k not in revoked]
    revoked.update(wire.as_stamps(entries, now), now=now)
    return new


@dataclass
class _Inbound:
    """A chunked hello or reply being received: how many chunks, which ids it carried."""

    pid: int
    chunks: int
    since: float
    got: int = 1
    seen: set[str] = field(default_factory=set)
    alive: list[str] = field(default_factory=list)
    settled: bool = False


class MingleCore:
    """One node's mingle: `start` (and again after a bus reconnect), the hello server, resyncs.

    Events in: `start(now)`, `on_hello(msg, now, alive)`, `on_reply(msg, now)`,
    `on_chunk(msg, now, alive)`, `timer(key, now)`, `resync(node, now)`.
    Effects out: Publish/Direct of mingle.hello, mingle.reply and mingle.chunk; SetTimer and
    CancelTimer of "mingle"; MingleDone; Log.
    """

    def __init__(
        self,
        stamper: Stamper,
        revoked: LimitedSet,
        *,
        timeout: float = 1.0,
        sync_chunk: int = 1000,
        sync_max: int = 50000,
        enabled: bool = True,
        client: bool = False,
    ) -> None:
        self.s = stamper
        self.client = client
        self.asked_all = False  # a client's second hello of this round went to every member
        self.revoked = revoked
        self.timeout = timeout
        self.sync_chunk = max(1, min(sync_chunk, wire.MAX_IDS))
        self.sync_max = max(0, min(sync_max, self.sync_chunk * wire.MAX_CHUNKS))
        self.enabled = enabled
        self.active: int | None = None  # the round of the mingle in progress
        self.expected: set[str] = set()  # who we wait for: repliers and the nodes they named
        self.answered: set[str] = set()  # whose state we have merged in this round
        self.replied: set[str] = set()  # ... of which by a reply to our hello
        self.trusted = False  # a settled node answered: `expected` is worth finishing on
        self.rounds_done = 0
        self.finished_round = 0  # the round of the last mingle that ended
        self._round = 0  # the last round number used (a mingle or a resync)
        self._inbound: dict[tuple[str, int, str], _Inbound] = {}

    @property
    def mingling(self) -> bool:
        return self.active is not None

    # ---- our side: hello, wait, done ----------------------------------------------------------

    def start(self, now: float) -> list[GossipEffect]:
        """Broadcast hello and wait for the replies (or skip, `without_mingle`)."""
        if not self.enabled:
            return [MingleDone((), all_alone=False, skipped=True)]
        self._round += 1
        self.active = self._round
        self.expected = set()
        self.answered = set()
        self.replied = set()
        self.trusted = False
        self.asked_all = False
        out: list[GossipEffect] = [Log.info("mingle: searching for neighbors", round=self.active)]
        out += self._hello(now, self.active, to=None, one=self.client)
        out.append(SetTimer(TIMER, self.timeout))
        return out

    def resync(self, node: str, now: float) -> list[GossipEffect]:
        """A hello sent to `node` only, outside a mingle: both sides end up with the union of
        the two revoked sets (its reply carries the delta). Gossip asks for one when heartbeat
        digests keep differing."""
        self._round += 1
        return self._hello(now, self._round, to=node)

    def timer(self, key: str, now: float) -> list[GossipEffect]:
        if key != TIMER or self.active is None:
            return []
        if self.client and not self.answered and not self.asked_all:
            self.asked_all = True
            return [
                Log.info("mingle: no reply from our core member; asking every one"),
                *self._hello(now, self.active, to=None, one=False),
                SetTimer(TIMER, self.timeout),
            ]
        return self._finish(now)

    def stop(self) -> list[GossipEffect]:
        self.active = None
        self._inbound.clear()
        return [CancelTimer(TIMER)]

    def _hello(self, now: float, rnd: int, to: str | None, one: bool = False) -> list[GossipEffect]:
        self.revoked.purge(now)
        chunks = wire.split(self.revoked.to_wire(), self.sync_chunk, self.sync_max)
        extra = {"client": True, "one": one} if self.client else {}
        head = self.s.stamp(
            wire.HELLO, now, round=rnd, chunks=len(chunks), revoked=chunks[0], **extra
        )
        return [
            self._out(to, wire.HELLO, head),
            *self._rest(to, now, rnd, "hello", chunks),
        ]

    def _out(self, to: str | None, rk: str, body: dict[str, Any]) -> GossipEffect:
        return Publish(rk, body) if to is None else Direct(to, rk, body)

    def _rest(
        self, to: str | None, now: float, rnd: int, of: str, chunks: list[dict[str, float]]
    ) -> list[GossipEffect]:
        n = len(chunks)
        return [
            self._out(
                to,
                wire.CHUNK,
                self.s.stamp(wire.CHUNK, now, round=rnd, of=of, seq=i, chunks=n, revoked=c),
            )
            for i, c in enumerate(chunks[1:], start=1)
        ]

    def note_alive(self, node: str, now: float) -> list[GossipEffect]:
        """Gossip heard from `node` (its worker-online, say) while we mingle: wait for it too."""
        if self.active is not None and node != self.s.hostname:
            self.expected.add(node)
        return []

    def _count(
        self, node: str, named: list[str], now: float, *, reply: bool, settled: bool = False
    ) -> list[GossipEffect]:
        """`node`'s state is merged into ours in this round, by a `reply` or by its own hello;
        `named` are the nodes it says are alive (trusted if it is `settled`). Done once every
        node we know of has replied."""
        if self.active is None:
            return []
        self.answered.add(node)
        if reply:
            self.replied.add(node)
        self.expected.add(node)
        self.expected.update(n for n in named if n != self.s.hostname)
        self.trusted = self.trusted or settled
        if self.trusted and self.expected <= self.replied:
            return self._finish(now)
        return []

    def _finish(self, now: float) -> list[GossipEffect]:
        self.finished_round = self.active or 0
        self.active = None
        self.rounds_done += 1
        synced = tuple(sorted(self.answered))
        out: list[GossipEffect] = [CancelTimer(TIMER)]
        if synced:
            missing = sorted(self.expected - self.answered)
            out.append(Log.info("mingle: sync complete", synced_with=list(synced), missing=missing))
        else:
            out.append(Log.info("mingle: all alone"))
        out.append(MingleDone(synced, all_alone=not synced))
        return out

    # ---- the other side: hello, reply and chunk messages from other nodes ---------------------

    def on_hello(
        self, msg: dict[str, Any], now: float, alive: list[str], reply: bool = True
    ) -> list[GossipEffect]:
        """A peer's hello: merge what it carries; once complete, reply with our delta (and count
        it, if we are mingling ourselves: it carried the peer's state). A client's hello gets a
        reply naming nobody, and only with `reply` (we are the one member that answers it)."""
        host = msg["hostname"]
        merge(self.revoked, msg["revoked"], now)
        if msg.get("client"):
            if not reply:
                return []
            return self._reply(host, msg["pid"], msg["round"], set(msg["revoked"]), now, [])
        if msg["chunks"] == 1:
            return self._hello_complete(host, msg, set(msg["revoked"]), now, alive)
        self._track((host, msg["round"], "hello"), msg, now, set(msg["revoked"]), [])
        return []

    def on_reply(self, msg: dict[str, Any], now: float) -> list[GossipEffect]:
        """A reply to one of our hellos (maybe of an earlier round, or to an earlier life of
        this node, since direct queues outlive a restart: merged all the same, not counted)."""
        merge(self.revoked, msg["revoked"], now)
        if msg.get("to_pid", self.s.pid) != self.s.pid:
            return []
        settled = bool(msg.get("settled", False))
        if msg["chunks"] == 1:
            return self._reply_complete(msg["hostname"], msg["round"], msg["alive"], now, settled)
        self._track((msg["hostname"], msg["round"], "reply"), msg, now, set(), msg["alive"])
        self._inbound[(msg["hostname"], msg["round"], "reply")].settled = settled
        return []

    def on_chunk(self, msg: dict[str, Any], now: float, alive: list[str]) -> list[GossipEffect]:
        """A further chunk of a hello or reply. Merged even if its header was missed (merging
        is always safe); counted towards completion only if the header was seen."""
        merge(self.revoked, msg["revoked"], now)
        key = (msg["hostname"], msg["round"], msg["of"])
        inb = self._inbound.get(key)
        if inb is None or inb.pid != msg["pid"]:
            return []
        inb.got += 1
        if msg["of"] == "hello":
            inb.seen.update(msg["revoked"])
        if inb.got < inb.chunks:
            return []
        del self._inbound[key]
        if msg["of"] == "hello":
            head = {"hostname": key[0], "pid": inb.pid, "round": key[1]}
            return self._hello_complete(key[0], head, inb.seen, now, alive)
        return self._reply_complete(key[0], key[1], inb.alive, now, inb.settled)

    def _track(
        self,
        key: tuple[str, int, str],
        msg: dict[str, Any],
        now: float,
        seen: set[str],
        alive: list[str],
    ) -> None:
        inbound = self._inbound
        for k in [k for k, v in inbound.items() if now - v.since > INBOUND_TTL]:
            del inbound[k]
        while len(inbound) >= MAX_INBOUND:
            del inbound[min(inbound, key=lambda k: inbound[k].since)]
        inbound[key] = _Inbound(msg["pid"], msg["chunks"], now, seen=seen, alive=list(alive))

    def push(self, node: str, pid: int, now: float) -> list[GossipEffect]:
        """Send a client our whole revoked set as a reply outside any round (it merges a late
        reply and counts nothing), asking it for its own (`ask`: it answers with a direct
        hello). A client hears no heartbeats, so it cannot start a resync when its digest
        differs from ours; its proxy does. The ask matters when the whole core restarted:
        then only the clients still hold what was revoked before."""
        return self._reply(node, pid, 0, set(), now, [], ask=True)

    def _hello_complete(
        self, host: str, hello: dict[str, Any], seen: set[str], now: float, alive: list[str]
    ) -> list[GossipEffect]:
        out = self._reply(host, hello["pid"], hello["round"], seen, now, alive)
        return out + self._count(host, [], now, reply=False)

    def _reply(  # noqa: PLR0917 (the reply's fields, in the order of the message)
        self,
        host: str,
        pid: int,
        rnd: int,
        seen: set[str],
        now: float,
        alive: list[str],
        ask: bool = False,
    ) -> list[GossipEffect]:
        self.revoked.purge(now)  # never ship expired ids (Celery's hello purges too)
        delta = {k: v for k, v in self.revoked.to_wire().items() if k not in seen}
        chunks = wire.split(delta, self.sync_chunk, self.sync_max)
        named = [n for n in alive if n != host][: wire.MAX_LIST]
        head = self.s.stamp(
            wire.REPLY,
            now,
            round=rnd,
            chunks=len(chunks),
            revoked=chunks[0],
            alive=named,
            settled=self.rounds_done > 0 or not self.enabled,
            to_pid=pid,
            **({"ask": True} if ask else {}),
        )
        return [
            Log.info("mingle: sync with", node=host, sent=sum(map(len, chunks))),
            Direct(host, wire.REPLY, head),
            *self._rest(host, now, rnd, "reply", chunks),
        ]

    def _reply_complete(
        self, host: str, rnd: int, named: list[str], now: float, settled: bool
    ) -> list[GossipEffect]:
        if rnd != self.active:
            return []  # a late reply, or one to a resync: merged, nothing to count
        return self._count(host, named, now, reply=True, settled=settled)
