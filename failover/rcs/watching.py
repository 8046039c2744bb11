"""Watching: checking the master, and telling a dead master from a silent one.

A part of ConfigurationServerCore (failover/server_core.py). While the master is known, it is
checked every `master_retry_interval`; `master_retries` failed checks in a row (a success
resets the count; Beetle's Ruby never reset it) make it unavailable, and round.py takes over.

A dead master is told from a silent one (issue 20.1): the shell holds an idle connection to the
master (WatchServer); a SIGKILLed redis-server's kernel closes it at once, and
`connection_lost` checks the master right away instead of at the next tick. A check whose
connection was *refused* (the process is gone) skips the remaining retries; nothing else is
skipped: every client still confirms, from its own host, that the master is unavailable before
it is invalidated. A master that gives no answer (hung, SIGSTOPped, host or link down) keeps
the deliberate checks, and after a cancelled round refusals count as ordinary failures until
the master passes a check again (`RcsState.fast`), so a refusing path the clients do not share
cannot make a round every tick.

While watching, word from the workers newer than ours that names another master makes the RCS
determine the master again (RcsState.detect) instead of announcing its own. Reads and changes
RcsState; calls round.py and replicas.py.
"""

from __future__ import annotations

from failover import messages as m
from failover.effects import FailoverEffect, Log, ServerInfo, SetMaster, SetTimer
from failover.messages import Token
from failover.rcs.replicas import Replicas
from failover.rcs.round import Round
from failover.rcs.state import (
    TIMER_RECONFIGURE,
    TIMER_WATCH,
    WATCH,
    WATCHING,
    RcsState,
)


class Watching:
    """The master's checks over one RcsState."""

    def __init__(self, s: RcsState, round_: Round, replicas: Replicas) -> None:
        self.s = s
        self.round = round_
        self.replicas = replicas

    def enter(self, infos: dict[str, ServerInfo | None], now: float) -> list[FailoverEffect]:
        """The master is a reachable master: watch it, announce it, tidy the others."""
        s = self.s
        assert s.master is not None
        s.phase = WATCHING
        s.no_master_reason = None
        s.retries = 0
        s.master_available = True
        s.unavailable_since = None
        s.fast = True
        return [
            SetMaster(s.master),
            *s.announce(now),
            SetTimer(TIMER_WATCH, s.master_retry_interval),
            *s.watch(s.master),
            *self.replicas.reconcile(infos, now),
        ]

    def tick(self, now: float) -> list[FailoverEffect]:
        """TIMER_WATCH: check the master again (an unanswered check counts as failed)."""
        s = self.s
        out: list[FailoverEffect] = []
        if s.pending is not None and s.pending[1] == WATCH:
            out += self._failed(now, "no answer to the last check")
            if s.phase != WATCHING:
                return out
        return [*out, s.query(WATCH), SetTimer(TIMER_WATCH, s.master_retry_interval)]

    def reconfigure_due(self, now: float) -> list[FailoverEffect]:
        """TIMER_RECONFIGURE: announce the master again, for clients that missed it."""
        s = self.s
        if s.master_available:
            return s.announce(now)
        return [SetTimer(TIMER_RECONFIGURE, s.reconfigure_interval)]

    def client_started(self, cid: str, tok: Token, now: float) -> list[FailoverEffect]:
        """A late or restarted client: tell it the master now, not at the next period."""
        s = self.s
        if s.phase == WATCHING and s.master_available and s.announced == s.master:
            return [s.publish(m.RECONFIGURE, s.token, server=s.master)]
        return []

    def connection_lost(self, server: str, now: float) -> list[FailoverEffect]:
        """The connection WatchServer held to `server` was closed by the other side: check
        the master now (a dead one answers REFUSED, and the round starts at once)."""
        s = self.s
        if server != s.watched_server or s.watch_lost_at is not None:
            return []
        s.watch_lost_at = now
        if not s.active or s.phase != WATCHING or server != s.master:
            return []
        return [
            Log.info("RCS: the master closed our connection; checking it now", master=server),
            s.query(WATCH),
        ]

    def on_answer(self, infos: dict[str, ServerInfo | None], now: float) -> list[FailoverEffect]:
        """The servers' state at a check (RcsState.query(WATCH))."""
        s = self.s
        if s.phase != WATCHING:
            return []
        assert s.master is not None
        ev = s.evidence()
        if ev is not None and ev[1] != s.master:
            # The workers use another master than ours (we started from stale news, or the
            # clients learnt of a switch we missed). Announcing ours would move them away
            # from theirs without a round: determine the master again, from their word.
            return [
                Log.warning(
                    "RCS: the workers follow another master; determining the master again",
                    ours=s.master,
                    theirs=ev[1],
                    source=ev[2],
                ),
                *s.detect(now),
            ]
        info = infos[s.master]
        if info is not None and info.is_master:
            came_back = not s.master_available
            s.retries = 0
            s.master_available = True
            s.unavailable_since = None
            s.fast = True
            out: list[FailoverEffect] = []
            if came_back:
                out.append(Log.info("RCS: master available", master=s.master))
            if came_back or s.announced != s.master:
                out += s.announce(now)
            lost = s.watch_lost_at
            if lost is not None and now - lost >= s.master_retry_interval:
                out += s.watch(s.master)  # not at once: a server that keeps closing
            return out + self.replicas.reconcile(infos, now)  # connections must not busy-loop
        if info is None and s.master in s.refused and s.fast:
            return self._refused(now)
        if info is None:
            why = "connection refused" if s.master in s.refused else "no answer in time"
        else:
            why = f"a {info.role}, following {info.master}"
        return self._failed(now, why)

    def _refused(self, now: float) -> list[FailoverEffect]:
        """The master's host refused the connection: the process is gone. Skip the remaining
        retries (they would only wait); the clients still confirm before anything changes."""
        s = self.s
        s.master_available = False
        s.retries = s.master_retries
        return [
            Log.warning(
                "RCS: master check refused (the process is gone); asking the clients now",
                master=s.master,
            ),
            *self.round.master_unavailable(now),
        ]

    def _failed(self, now: float, why: str) -> list[FailoverEffect]:
        s = self.s
        s.master_available = False
        s.retries += 1
        out: list[FailoverEffect] = [
            Log.warning(
                "RCS: master check failed",
                master=s.master,
                why=why,
                retries=s.retries,
                of=s.master_retries,
            )
        ]
        if s.retries >= s.master_retries:
            out += self.round.master_unavailable(now)
        return out
