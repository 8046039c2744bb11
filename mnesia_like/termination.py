"""Termination: what a participant does when its coordinator goes before the decision.

Unprepared, it aborts (the coordinator restarts the transaction). Prepared (it voted yes), it
is in doubt and asks the other participants (`outcome_q`): "committed" -> commit, "aborted"
-> abort. Otherwise it waits for the coordinator (blocking, as 2PC and Mnesia do): a
coordinator that was only cut off or frozen may have decided and applied its own part, and
answers when it is back; one that restarted answers "unknown", which proves nothing was
decided that could still surface: abort. It asks again every `outcome_retry` s, and gives up
with a presumed abort and a warning after `outcome_timeout` s. This node answers such
questions too, from its outcomes and its own participant state.

A parallel commit's participant (prepared durably, see coordinator.py) needs no coordinator:
its question carries `pc`, every participant answers "prepared" with its proposed stamp while
it holds a prepare record (in doubt or not), and one that never heard of the transaction
refuses it from then on (it would vote no) and answers "aborted". All the others prepared ->
committed, with the newest proposal as the stamp; "committed" or "aborted" from anyone ->
that. Records found on disc at start are in doubt at once (`restored`).
"""

from __future__ import annotations

from typing import Any

from mnesia_like.effects import MnesiaEffect
from mnesia_like.participant import Participant
from mnesia_like.state import NodeState
from mnesia_like.tx import Bounded, PartTx, max_stamp, stamp_ok
from monitors.effects import Log, SetTimer


class Termination:
    """The termination protocol of 2PC (see the module docstring)."""

    def __init__(
        self,
        state: NodeState,
        participant: Participant,
        outcomes: Bounded,
        *,
        outcome_retry: float,
        outcome_timeout: float,
    ) -> None:
        self.s = state
        self.participant = participant
        self.outcomes = outcomes
        self.outcome_retry = outcome_retry
        self.outcome_timeout = outcome_timeout

    def coordinator_down(self, node: str) -> list[MnesiaEffect]:
        """`node` is gone: abort what it coordinated that we did not vote on, and start
        asking about what we did."""
        out: list[MnesiaEffect] = []
        for tid, part in list(self.participant.txs.items()):
            if part.coord != node:
                # A participant we lose may be alive and hold the commit: no conclusion; it
                # answers when it is back (a restarted one answers "unknown").
                continue
            if not part.prepared:
                out += self.participant.release(tid, "aborted")
            elif part.doubt_since is None:
                part.doubt_since = self.s.now
                out += [
                    Log.warning(
                        "transaction in doubt: its coordinator went down after we voted yes; "
                        "asking the other participants",
                        tid=tid,
                        coordinator=node,
                    )
                ]
                out += self._ask_outcome(tid, part)
        return out

    def restored(self, now: float) -> list[MnesiaEffect]:
        """At start: the prepare records found on disc are in doubt; ask about them (the
        first questions go once the timer fires, when peers may be connected)."""
        out: list[MnesiaEffect] = []
        for tid in self.participant.restored():
            part = self.participant.txs[tid]
            part.doubt_since = now
            out.append(
                Log.warning(
                    "transaction in doubt after a restart: its prepare record is on disc; "
                    "asking the other participants",
                    tid=tid,
                    coordinator=part.coord,
                )
            )
            out.append(SetTimer(f"outcome:{tid}", self.outcome_retry))
        return out

    def _ask_outcome(self, tid: str, part: PartTx) -> list[MnesiaEffect]:
        out: list[MnesiaEffect] = [SetTimer(f"outcome:{tid}", self.outcome_retry)]
        extra = {"pc": True} if part.parallel else {}
        for n in sorted(self._others_of(part) | {part.coord}):
            if n == self.s.node:
                continue  # a restored record of a transaction we coordinated
            if n in self.s.connected and part.answers.get(n) not in (
                "doubt",
                "unknown",
                "prepared",
            ):
                out.append(self.s.send(n, "outcome_q", tid=tid, **extra))
        return out

    def _others_of(self, part: PartTx) -> set[str]:
        nodes = {n for ns in part.parts.values() for n in ns}
        return nodes - {self.s.node, part.coord}

    def on_outcome_q(self, sender: str, m: dict[str, Any], now: float) -> list[MnesiaEffect]:
        tid = m["tid"]
        state = self.outcomes.get(tid)
        if state == "forgotten":
            state = "unknown"
        if state is None:
            part = self.participant.txs.get(tid)
            if part is not None and part.parallel and part.prepared:
                # a prepare record: a fact that decides with the others', in doubt or not
                return [
                    self.s.send(sender, "outcome_r", tid=tid, state="prepared", p=part.proposal)
                ]
            if part is None and m.get("pc") is True and tid not in self.participant.dead:
                # Never heard of it: refuse it from now on (a prepare still on its way gets
                # a no vote), so "aborted" is true (parallel commit: no record, no commit).
                self.participant.dead.put(tid, True)
                self.outcomes.put(tid, "aborted")
                return [self.s.send(sender, "outcome_r", tid=tid, state="aborted")]
            if part is None:
                state = "aborted" if tid in self.participant.dead else "unknown"
            elif not part.prepared:
                # We never voted, so no commit was decided; vote no from now on.
                return [
                    *self.participant.release(tid, "aborted"),
                    self.s.send(sender, "outcome_r", tid=tid, state="aborted"),
                ]
            elif part.doubt_since is not None:
                state = "doubt"  # we lost the coordinator too: no commit can reach us now
            else:
                state = "prepared"  # the coordinator may still tell us
        if state == "committed" and tid in self.s.stamps:
            # the decision's stamp, which the asker applies the commit with
            stamp = self.s.stamps[tid]
            return [self.s.send(sender, "outcome_r", tid=tid, state=state, stamp=stamp)]
        return [self.s.send(sender, "outcome_r", tid=tid, state=state)]

    def on_outcome_r(self, sender: str, m: dict[str, Any], now: float) -> list[MnesiaEffect]:
        tid = m["tid"]
        part = self.participant.txs.get(tid)
        if part is None or part.doubt_since is None:
            return []
        state = m["state"]
        if state == "committed":
            # The replica set of the prepare is stale: a replica of it may have reloaded its
            # tables since (an autoheal loser, the coordinator itself, drops its copy and
            # copies it back from one of us, who had not applied this yet). Forward to every
            # replica active now; apply-by-stamp makes a duplicate harmless.
            part.parts = {}
            part.stamp = m.get("stamp")
            return [
                Log.info("transaction in doubt resolved: committed", tid=tid, by=sender),
                *self.participant.apply_commit(tid, part),
            ]
        if state == "aborted":
            return [
                Log.info("transaction in doubt resolved: aborted", tid=tid, by=sender),
                *self.participant.release(tid, "aborted"),
            ]
        if part.parallel:
            if state == "prepared" and stamp_ok(m.get("p")):
                part.answers[sender] = "prepared"
                part.proposals[sender] = m["p"]
                return self._maybe_all_prepared(tid, part)
            part.answers[sender] = state
            return []
        if state == "unknown" and sender == part.coord:
            state = "gone"  # the coordinator restarted: it can send nothing any more
        part.answers[sender] = state
        return self._maybe_resolve(tid, part)

    def _maybe_all_prepared(self, tid: str, part: PartTx) -> list[MnesiaEffect]:
        """Parallel commit: every other participant holds a prepare record -> committed."""
        others = {n for ns in part.parts.values() for n in ns} - {self.s.node}
        if not others <= {n for n, a in part.answers.items() if a == "prepared"}:
            return []
        proposals = [part.proposals[n] for n in others]
        if part.proposal is not None:
            proposals.append(part.proposal)
        part.stamp = max_stamp(proposals)
        self.s.clock = max(self.s.clock, part.stamp[0])
        self.outcomes.put(tid, "committed")
        self.s.stamps.put(tid, part.stamp)
        part.parts = {}  # stale replica sets: forward to every replica active now
        return [
            Log.info("transaction in doubt resolved: every participant prepared", tid=tid),
            *self.participant.apply_commit(tid, part),
        ]

    def _maybe_resolve(self, tid: str, part: PartTx) -> list[MnesiaEffect]:
        # Only the coordinator's restart proves that no commit was decided that could still
        # surface: a coordinator that is merely cut off (or frozen) may have decided, and will
        # apply its own part and answer "committed" when it is back. So we wait for it.
        if part.answers.get(part.coord) == "gone":
            return [
                Log.info(
                    "transaction in doubt aborted: its coordinator restarted and none of us "
                    "got the commit",
                    tid=tid,
                ),
                *self.participant.release(tid, "aborted"),
            ]
        return []

    def outcome_timer(self, tid: str, now: float) -> list[MnesiaEffect]:
        part = self.participant.txs.get(tid)
        if part is None or part.doubt_since is None:
            return []
        if part.parallel:
            done = self._maybe_all_prepared(tid, part)  # no other participant: ours decides
            if done:
                return done
        if now - part.doubt_since >= self.outcome_timeout:
            return [
                Log.warning(
                    "transaction in doubt for too long: presumed aborted (a participant that is "
                    "unreachable may have committed it)",
                    tid=tid,
                    waited=round(now - part.doubt_since, 3),
                ),
                *self.participant.release(tid, "aborted"),
            ]
        # answers of nodes that may since have learnt something are asked again
        keep = ("doubt", "unknown", "gone", "prepared")
        part.answers = {n: s for n, s in part.answers.items() if s in keep}
        return self._ask_outcome(tid, part)
