"""ElectionCore: Celery's worker-elect leader election, made to agree and to finish.

Celery: `election(id, topic, action)` broadcasts worker-elect stamped with the sender's clock;
every node pushes `(clock, "host.pid", topic, action)` on a heap and broadcasts an ack; the
node that asked decides once it has as many acks as there are alive workers, and the lowest
`(clock, "host.pid")` runs the topic's handler. Its weak spots: acks are counted per election
id, not per proposal, so with several proposers a node can decide before it has seen every
proposal and two nodes may pick different winners; a participant that dies before acking
blocks the election until it is noticed lost, and nothing bounds it; only the proposers learn
the result; a node cut off from the others can elect itself.

Here:

- Every node that calls `election(id, ...)` makes a *proposal*: a fresh clock, its
  "host.pid", the topic and action, and whether it stands as a *candidate* (not while paused).
  Every node records every proposal it hears of and acks each one to its proposer only
  (Direct), naming it (`to`, `to_clock`); the ack also carries the lowest candidate the acker
  knows (`best`). Acks are not broadcast: with N nodes asking at once, broadcast acks made
  N x N messages reach N nodes each, and the storm cost N^3 deliveries.
- A candidate proposer decides when every node it believes alive has acked ITS proposal, or
  has sent it a candidacy of its own; the winner is the lowest `(clock, "host.pid")` among the
  candidates it knows, from proposals and from the `best` of acks. Non-candidates, paused
  nodes and nodes that did not ask never decide. The decider broadcasts worker-elect-result
  when it won, or while some node may not decide by itself (see _maybe_decide); everyone
  adopts it, and a node that asks about a decided id gets the result directly.
- Why every decider picks the same winner: let m be the lowest candidate and D a decider. D
  waits for m's ack to D's proposal. If m proposed before sending that ack, the ack's `best`
  is m (or lower: impossible), so D knows m; if m proposed after receiving D's proposal, m's
  clock is above D's and m is not the lowest. If D has m's candidacy from m itself, D knows m
  without its ack, and m never proposes again (a candidacy stands), so waiting for m's ack
  adds nothing: when every node asks at once (a storm), each decides as soon as it has the
  others' proposals, one broadcast round, instead of after N x N acks. Only a candidacy
  heard since m was last seen gone counts (a restarted m is a new proposer). This needs m in
  D's alive view, so proposals wait until mingle is done (a node then knows the alive ones,
  and its clock is above theirs).
- A candidacy, once heard of, stands: a node that dies or is lost keeps its proposal (dropping
  it would let a late decider pick another winner than an early one, and the action could run
  twice: our simulator found exactly that). The price is Celery's: if the lowest candidate
  dies before it runs the action, the election is decided for a dead node and the action does
  not run (ElectionDecided names it; the application may elect again under a new id). At most
  once, never twice, as long as some live node remembers the result: results live in memory,
  and a node that asked while cut off and comes back after every node that knew the result
  has restarted decides afresh (docs/gossip.md, Gaps).
- Conflicting results, possible only when messages were lost around a cut, are settled the
  same way everywhere: the lowest `(winner_clock, "host.pid")` is kept and re-announced, with
  a warning.
- A participant that dies does not block: the alive set is re-read whenever a node is lost or
  leaves; a retry timer resends our proposal every `retry` s, a node that joins gets it
  directly, a bus reconnect resends our proposals and acks (what was sent around the cut may
  be lost), and at the deadline the caller gets ElectionFailed with the reason.
- Clients (executors, issue 26) never decide and never ack: they hear only results. A client's
  proposal (`client: true`) goes to the core members, and exactly one of them, the client's
  *proxy* (chosen by GossipCore), stands for it: a proposal of the proxy's own, with the
  proxy's clock, carrying `for: [client, pid]`. The core then decides among its own proposals
  as above, waiting only for core members, and a result with `for` names the client as the
  winner everywhere (ElectionDecided) and runs the action there. Client proposals are never
  recorded as candidacies: their clocks are not ordered against the core's proposals (a client
  does not hear them), so the agreement argument above would not hold for them.
- A paused node (its node monitor paused it: the minority side) neither stands nor decides; it
  still acks. A proposer paused after it proposed keeps its candidacy (withdrawing it could
  make deciders disagree); if it wins, it runs the action when it resumes. A paused proposer
  that resumes before a result proposes again, as a candidate.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from monitors.effects import CancelTimer, Log, SetTimer
from monitors.gossip import wire
from monitors.gossip.effects import (
    Direct,
    ElectionDecided,
    ElectionFailed,
    GossipEffect,
    Publish,
    RunElection,
)
from monitors.gossip.wire import Stamper

TIMER_PREFIX = "election:"


@dataclass(frozen=True)
class Proposal:
    """One node's bid in an election (Celery's heap entry). `hint`: known only from an ack's
    `best`, so without its action (the winner runs its own)."""

    clock: int
    hostname: str
    pid: int
    candidate: bool
    topic: str
    action: Any = None
    hint: bool = False
    for_: tuple[str, int] | None = None  # the client a proxy stands for (it wins for it)

    @property
    def member(self) -> str:
        return wire.member_id(self.hostname, self.pid)

    @property
    def key(self) -> tuple[int, str]:
        return (self.clock, self.member)


@dataclass(frozen=True)
class Result:
    """A decided election: `winner` (node name) with its pid and proposal clock."""

    id: str
    topic: str
    action: Any
    winner: str
    winner_pid: int
    winner_clock: int
    at: float = 0.0  # our wall clock when we learnt it (for expiry)
    for_: tuple[str, int] | None = None  # the client the winning proxy stood for

    @property
    def key(self) -> tuple[int, str]:
        return (self.winner_clock, wire.member_id(self.winner, self.winner_pid))

    @property
    def elected(self) -> tuple[str, int]:
        """Who runs the action: the client a proxy stood for, else the winner itself."""
        return self.for_ if self.for_ is not None else (self.winner, self.winner_pid)


@dataclass
class _Election:
    id: str
    touched: float
    proposals: dict[str, Proposal] = field(default_factory=dict)  # "host.pid" -> proposal
    own: Proposal | None = None  # ours, once made (it stands, like everyone's)
    acks: set[str] = field(default_factory=set)  # hostnames that acked `own`
    # hostnames whose candidacy we received from them (since they were last seen gone): as
    # good as their ack for deciding (see ElectionCore._maybe_decide)
    heard: set[str] = field(default_factory=set)
    topic: str = ""
    action: Any = None
    deadline: float | None = None  # set while we ask (the caller waits until then)
    next_retry: float = 0.0
    attempts: int = 0
    deferred: bool = False  # asked before we were ready: the proposal waits
    proxy_for: tuple[str, int] | None = None  # we stand for this client (see _stand_for)

    @property
    def asking(self) -> bool:
        return self.deadline is not None

    def record(self, p: Proposal) -> None:
        """Keep what we learn: a candidacy stands (the lowest one, per member), a real
        proposal replaces a hint of it, a candidate replaces a non-candidate."""
        old = self.proposals.get(p.member)
        if (
            old is None
            or (p.candidate and not old.candidate)
            or (p.candidate == old.candidate and p.key < old.key)
            or (old.hint and not p.hint and p.key == old.key)
        ):
            self.proposals[p.member] = p

    def best(self) -> Proposal | None:
        cands = [p for p in self.proposals.values() if p.candidate]
        return min(cands, key=lambda p: p.key) if cands else None


class ElectionCore:
    """Elections on one node. Every method returns the effects to perform, in order.

    Events in: `election(id, topic, action, now, timeout=None)`, `on_elect(msg, now)`,
    `on_ack(msg, now)`, `on_result(msg, now)`, `timer(key, now)`, `node_joined(node, now)`,
    `node_gone(node, now)`, `set_paused(paused, now)`, `set_ready(ready, now, resend)`,
    `expire(now)`, `stop(now)`. Effects out: Publish/Direct of worker.elect,
    worker.elect.ack and worker.elect.result; RunElection; ElectionDecided; ElectionFailed;
    SetTimer/CancelTimer of "election:<id>"; Log.
    """

    def __init__(
        self,
        stamper: Stamper,
        *,
        retry: float = 3.0,
        attempts: int = 5,
        forget: float = 120.0,
        max_pending: int = 1000,
        results_max: int = 10000,
        results_ttl: float = 3600.0,
        client: bool = False,
    ) -> None:
        self.s = stamper
        self.client = client  # an executor: proposes through the core, never decides or acks
        self.retry = retry
        self.attempts = max(1, attempts)
        self.forget = forget
        self.max_pending = max_pending
        self.results_max = results_max
        self.results_ttl = results_ttl
        self.alive: set[str] = set()  # other nodes we believe alive (gossip's view)
        self.paused = False
        self.ready = False  # mingle done and the bus up: we may propose and decide
        self.pending: dict[str, _Election] = {}
        self.results: OrderedDict[str, Result] = OrderedDict()
        self.owed: dict[str, Result] = {}  # won while paused: run on resume
        self.ran: set[str] = set()  # ids whose action we ran (bounded with results)

    # ---- asking ---------------------------------------------------------------------------------

    def election(
        self, eid: str, topic: str, action: Any, now: float, timeout: float | None = None
    ) -> list[GossipEffect]:
        """Ask the cluster to elect one node to run `topic`'s handler with `action`.

        The answer is ElectionDecided (on every node) or ElectionFailed (here) within
        `timeout` seconds (default: retry x attempts)."""
        r = self.results.get(eid)
        if r is not None:
            return [
                Log.info("election already decided", id=eid, winner=r.elected[0]),
                ElectionDecided(eid, r.elected[0], r.topic),
            ]
        e = self.pending.get(eid)
        if e is None:
            if len(self.pending) >= self.max_pending:
                return [ElectionFailed(eid, f"too many elections in progress ({self.max_pending})")]
            e = self.pending[eid] = _Election(eid, now)
        limit = self.retry * self.attempts if timeout is None else max(timeout, 0.0)
        if e.asking:
            e.deadline = max(e.deadline or now, now + limit)
            return [Log.info("election already in progress", id=eid), *self._arm(e, now)]
        e.topic, e.action, e.touched = topic, action, now
        e.deadline = now + limit
        e.attempts = 0
        if not self.ready:
            e.deferred = True
            return [Log.info("election waits for mingle and the bus", id=eid), *self._arm(e, now)]
        return self._propose(e, now)

    def _propose(self, e: _Election, now: float) -> list[GossipEffect]:
        """Publish our proposal: the standing one if it is a candidacy (or we cannot stand
        now), else a fresh one with a new clock."""
        own = e.own
        if own is None or (not own.candidate and not self.paused):
            me = self.s
            clock = me.clock.forward()
            own = Proposal(
                clock, me.hostname, me.pid, not self.paused, e.topic, e.action, for_=e.proxy_for
            )
            e.own = own
            e.acks = set()
            e.record(own)
        e.deferred = False
        e.attempts += 1
        e.next_retry = now + self.retry
        out: list[GossipEffect] = [
            Log.info("election: proposing", id=e.id, clock=own.clock, candidate=own.candidate),
            Publish(wire.ELECT, self._elect_msg(own, e.id, now)),
            *self._arm(e, now),
        ]
        return out + self._maybe_decide(e, now)

    def _elect_msg(self, p: Proposal, eid: str, now: float) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if self.client:
            extra["client"] = True
        if p.for_ is not None:
            extra["for"] = list(p.for_)
        return self.s.stamp(
            wire.ELECT,
            now,
            clock=p.clock,
            id=eid,
            topic=p.topic,
            action=p.action,
            candidate=p.candidate,
            **extra,
        )

    def _ack(self, e: _Election, p: Proposal, now: float) -> Direct:
        """The ack goes to the proposer only: only it counts it, and the `best` it carries
        matters only to it (the agreement argument in the module docstring is about acks to
        a decider). Celery broadcasts every ack, so all N x N of a storm reach all N nodes."""
        fields: dict[str, Any] = {"id": e.id, "to": p.member, "to_clock": p.clock}
        best = e.best()
        if best is not None:
            fields["best"] = [best.clock, best.hostname, best.pid]
            fields["best_topic"] = best.topic
            if best.for_ is not None:
                fields["best_for"] = list(best.for_)
        return Direct(p.hostname, wire.ELECT_ACK, self.s.stamp(wire.ELECT_ACK, now, **fields))

    def _arm(self, e: _Election, now: float) -> list[GossipEffect]:
        if e.deadline is None:
            return []
        at = e.deadline if e.deferred or e.own is None else min(e.next_retry, e.deadline)
        return [SetTimer(TIMER_PREFIX + e.id, max(at - now, 0.0))]

    def timer(self, key: str, now: float) -> list[GossipEffect]:
        """The retry/deadline timer of an election we asked for."""
        e = self.pending.get(key[len(TIMER_PREFIX) :])
        if e is None or e.deadline is None:
            return []
        if now >= e.deadline:
            return self._fail(e, self._why(e))
        if e.deferred or e.own is None:
            return self._arm(e, now)
        e.attempts += 1
        e.next_retry = now + self.retry
        missing = sorted(self.alive - e.acks)
        return [
            Log.info("election: resending proposal", id=e.id, attempt=e.attempts, waiting=missing),
            Publish(wire.ELECT, self._elect_msg(e.own, e.id, now)),
            *self._arm(e, now),
        ]

    def _why(self, e: _Election) -> str:
        if e.deferred:
            return "not ready (mingle not done or bus down) until the deadline"
        own = e.own
        if own is not None and not own.candidate:
            if e.best() is None:
                return "no candidate: every proposer was paused"
            return "no result from the candidates before the deadline"
        if self.paused:
            return "paused: a paused node does not decide"
        missing = sorted(self.alive - e.acks)
        return f"no result after {e.attempts} attempts; no ack from {missing}"

    def _fail(self, e: _Election, reason: str) -> list[GossipEffect]:
        e.deadline = None  # our proposal still stands; we no longer decide
        e.deferred = False
        e.touched = max(e.touched, e.next_retry)
        return [
            CancelTimer(TIMER_PREFIX + e.id),
            Log.warning("election failed", id=e.id, reason=reason),
            ElectionFailed(e.id, reason),
        ]

    # ---- messages from other nodes ----------------------------------------------------------------

    def on_elect(self, msg: dict[str, Any], now: float, proxy: bool = False) -> list[GossipEffect]:
        """A proposal: record it and ack it (or tell its sender the result, if decided). A
        client's proposal is not recorded: with `proxy` (we are its proxy) we stand for it."""
        eid, host = msg["id"], msg["hostname"]
        r = self.results.get(eid)
        if r is not None:
            return [Direct(host, wire.ELECT_RESULT, self._result_msg(r, now))]
        if msg.get("client"):
            if not proxy or self.client or not msg["candidate"]:
                return []
            return self._stand_for(eid, msg, now)
        e = self.pending.get(eid)
        if e is None:
            if len(self.pending) >= self.max_pending:
                return [Log.warning("election dropped: too many in progress", id=eid, node=host)]
            e = self.pending[eid] = _Election(eid, now)
        p = Proposal(
            msg["clock"],
            host,
            msg["pid"],
            msg["candidate"],
            msg["topic"],
            msg.get("action"),
            for_=_member(msg.get("for")),
        )
        e.record(p)
        if p.candidate:
            e.heard.add(host)
        e.touched = now
        if e.asking and e.own is not None and e.own.candidate:
            # Our own candidacy (sent, and resent while we ask) counts for the proposer as
            # our ack would: in a storm this saves N x (N - 1) acks.
            return self._maybe_decide(e, now)
        return [self._ack(e, p, now), *self._maybe_decide(e, now)]

    def on_ack(self, msg: dict[str, Any], now: float) -> list[GossipEffect]:
        """An ack. Its `best` is knowledge whoever it is for; it counts towards a decision
        only if it names our standing proposal (Celery counts any ack for the id)."""
        e = self.pending.get(msg["id"])
        if e is None:
            return []
        best = msg.get("best")
        if best is not None:
            hint = Proposal(
                best[0],
                best[1],
                best[2],
                True,
                msg["best_topic"],
                hint=True,
                for_=_member(msg.get("best_for")),
            )
            e.record(hint)
        own = e.own
        if own is None or msg["to"] != own.member or msg["to_clock"] != own.clock:
            return []  # for another proposal, or an older one of ours
        e.acks.add(msg["hostname"])
        return self._maybe_decide(e, now)

    def on_result(self, msg: dict[str, Any], now: float) -> list[GossipEffect]:
        r = Result(
            msg["id"],
            msg["topic"],
            msg.get("action"),
            msg["winner"],
            msg["winner_pid"],
            msg["winner_clock"],
            now,
            for_=_member(msg.get("for")),
        )
        return self._adopt(r, now)

    def _stand_for(self, eid: str, msg: dict[str, Any], now: float) -> list[GossipEffect]:
        """Stand, as a client's proxy, for `msg`'s client: our own proposal, which the core
        decides on as on any other, with `for` naming the client. If we already have a
        proposal under this id it stands instead (one proposal per member and id)."""
        e = self.pending.get(eid)
        if e is not None and e.own is not None:
            return []
        if e is None:
            if len(self.pending) >= self.max_pending:
                return [Log.warning("election dropped: too many in progress", id=eid)]
            e = self.pending[eid] = _Election(eid, now)
        e.topic, e.action, e.touched = msg["topic"], msg.get("action"), now
        e.deadline = now + self.retry * self.attempts
        e.attempts = 0
        e.proxy_for = (msg["hostname"], msg["pid"])
        if not self.ready:
            e.deferred = True
            return self._arm(e, now)
        return self._propose(e, now)

    # ---- deciding -------------------------------------------------------------------------------

    def _maybe_decide(self, e: _Election, now: float) -> list[GossipEffect]:
        own = e.own
        if self.client:
            return []  # the core decides; we hear the result
        if not e.asking or own is None or not own.candidate or self.paused or not self.ready:
            return []
        if self.alive - e.acks - e.heard:
            return []
        best = e.best()
        assert best is not None  # our own candidacy is among them
        r = Result(
            e.id, best.topic, best.action, best.hostname, best.pid, best.clock, now, best.for_
        )
        out: list[GossipEffect] = [
            Log.info("election decided", id=e.id, winner=best.member, acks=sorted(e.acks))
        ]
        if best.key == own.key or self.alive - e.heard:
            # The winner tells everyone; so does any decider while some node may not decide
            # by itself. When every other node stands (a storm), each decides alone, and N
            # identical results to N nodes would only add N x N deliveries.
            out.append(Publish(wire.ELECT_RESULT, self._result_msg(r, now)))
        return out + self._adopt(r, now)

    def _result_msg(self, r: Result, now: float) -> dict[str, Any]:
        extra: dict[str, Any] = {"for": list(r.for_)} if r.for_ is not None else {}
        return self.s.stamp(
            wire.ELECT_RESULT,
            now,
            id=r.id,
            topic=r.topic,
            action=r.action,
            winner=r.winner,
            winner_pid=r.winner_pid,
            winner_clock=r.winner_clock,
            **extra,
        )

    def _adopt(self, r: Result, now: float) -> list[GossipEffect]:
        old = self.results.get(r.id)
        out: list[GossipEffect] = []
        if old is not None:
            if old.key == r.key:
                return []
            if old.key < r.key:
                # Everyone keeps the lowest: tell the sender's audience ours.
                return [
                    Log.warning("conflicting election result ignored", id=r.id, kept=old.winner),
                    Publish(wire.ELECT_RESULT, self._result_msg(old, now)),
                ]
            out.append(
                Log.warning("conflicting election result adopted", id=r.id, dropped=old.winner)
            )
        e = self.pending.pop(r.id, None)
        if e is not None and e.own is not None and e.own.key == r.key:
            r = Result(
                r.id,
                e.own.topic,
                e.own.action,
                r.winner,
                r.winner_pid,
                r.winner_clock,
                for_=e.own.for_,
            )
        r = Result(r.id, r.topic, r.action, r.winner, r.winner_pid, r.winner_clock, now, r.for_)
        self.results[r.id] = r
        self.results.move_to_end(r.id)
        while len(self.results) > self.results_max:
            gone, _ = self.results.popitem(last=False)
            self.ran.discard(gone)
        if e is not None and e.asking:
            out.append(CancelTimer(TIMER_PREFIX + r.id))
        elected, elected_pid = r.elected
        out.append(ElectionDecided(r.id, elected, r.topic))
        if elected == self.s.hostname and elected_pid == self.s.pid:
            out += self._run(r)
        else:
            self.owed.pop(r.id, None)
            out.append(Log.info("node elected", id=r.id, winner=elected))
        return out

    def _run(self, r: Result) -> list[GossipEffect]:
        if r.id in self.ran:
            return []
        if self.paused:
            self.owed[r.id] = r
            return [Log.warning("won an election while paused; will run on resume", id=r.id)]
        self.ran.add(r.id)
        self.owed.pop(r.id, None)
        return [Log.info("I won the election", id=r.id), RunElection(r.topic, r.action, r.id)]

    def _recheck(self, now: float) -> list[GossipEffect]:
        out: list[GossipEffect] = []
        for e in list(self.pending.values()):
            if e.id in self.pending:
                out += self._maybe_decide(e, now)
        return out

    # ---- what gossip tells us ---------------------------------------------------------------------

    def node_joined(self, node: str, now: float) -> list[GossipEffect]:
        """`node` is alive now: wait for its ack too, and send it our standing proposals (it may
        have missed them)."""
        self.alive.add(node)
        if not self.ready:
            return []
        return [
            Direct(node, wire.ELECT, self._elect_msg(e.own, e.id, now))
            for e in self.pending.values()
            if e.own is not None
        ]

    def node_gone(self, node: str, now: float) -> list[GossipEffect]:
        """`node` left or was lost: nobody waits for its ack any more (its proposals stand)."""
        self.alive.discard(node)
        for e in self.pending.values():
            e.acks.discard(node)
            e.heard.discard(node)  # a restart of it is a new proposer, unheard
        return self._recheck(now)

    def set_paused(self, paused: bool, now: float) -> list[GossipEffect]:
        """The node monitor paused (minority side) or resumed this node."""
        if paused == self.paused:
            return []
        self.paused = paused
        if paused:
            return [Log.info("elections: paused; not standing, not deciding")]
        out: list[GossipEffect] = [Log.info("elections: resumed")]
        for r in list(self.owed.values()):
            out += self._run(r)
        if self.ready:
            for e in list(self.pending.values()):
                if e.asking and e.own is not None and not e.own.candidate:
                    out += self._propose(e, now)  # stand now
        return out + self._recheck(now)

    def set_ready(self, ready: bool, now: float, *, resend: bool = False) -> list[GossipEffect]:
        """Mingle done and bus up (ready) or not. With `resend` (after a bus reconnect: what we
        sent around the cut may be lost) our proposals go out again, then our acks."""
        self.ready = ready
        if not ready:
            return []
        out: list[GossipEffect] = []
        for e in list(self.pending.values()):
            if e.deferred and e.asking:
                out += self._propose(e, now)
                continue
            if not resend:
                continue
            if e.own is not None:
                out.append(Publish(wire.ELECT, self._elect_msg(e.own, e.id, now)))
            out += [
                self._ack(e, p, now)
                for p in list(e.proposals.values())
                if p.hostname != self.s.hostname and not p.hint
            ]
        return out + self._recheck(now)

    def expire(self, now: float) -> list[GossipEffect]:
        """Forget elections nobody asked us about for `forget` s, and results past their ttl."""
        for eid in [
            k for k, e in self.pending.items() if not e.asking and now - e.touched > self.forget
        ]:
            del self.pending[eid]
        while self.results:
            eid, r = next(iter(self.results.items()))
            if now - r.at <= self.results_ttl:
                break
            del self.results[eid]
            self.ran.discard(eid)
        return []

    def stop(self, now: float) -> list[GossipEffect]:
        out: list[GossipEffect] = []
        for e in list(self.pending.values()):
            if e.asking:
                out += self._fail(e, "stopped")
        return out

    def status(self) -> dict[str, Any]:
        return {
            "pending": sorted(self.pending),
            "asking": sorted(k for k, e in self.pending.items() if e.asking),
            # per election we ask: the alive nodes we still need an ack or a candidacy from
            "waiting_for": {
                k: sorted(self.alive - e.acks - e.heard)
                for k, e in self.pending.items()
                if e.asking
            },
            "decided": len(self.results),
            "paused": self.paused,
            # the last few decided, newest first, for the management page
            "last": [
                {"id": r.id, "topic": r.topic, "winner": r.elected[0], "at": r.at}
                for r in list(self.results.values())[-5:][::-1]
            ],
        }


def _member(value: Any) -> tuple[str, int] | None:
    """A validated wire `[name, pid]` (wire.py checked its shape), or None."""
    return (value[0], value[1]) if isinstance(value, list) else None
