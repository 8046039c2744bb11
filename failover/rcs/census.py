"""Census: determining the master, asking the workers before deciding.

A part of ConfigurationServerCore (failover/server_core.py). Activation asks before it
decides: a *census* (a ping round whose pongs carry each client's master file) tells a newly
active RCS which master the workers use; the newest word by token (the census, the
reconfigures heard as a standby: RcsState.evidence), else its own file, names the master, and
the servers' answers (RcsState.detect) confirm it. Deciding from its own file alone, as
Beetle's RCS does at start, can announce an old master that came back while the workers use a
newer one (the simulator found this).

If the census is incomplete and every answer is an empty file, the servers alone may settle
it (exactly one master, every other its replica); anything less clear and it asks again
rather than guess. A named master that is unreachable or a replica starts a switch (Beetle:
"should start master switch if master in file is slave"). Reads and changes RcsState; calls
watching.py and round.py.
"""

from __future__ import annotations

from failover import messages as m
from failover.effects import CancelTimer, FailoverEffect, Log, ServerInfo, SetTimer
from failover.messages import NO_TOKEN, Token
from failover.rcs.round import Round
from failover.rcs.state import (
    CENSUS,
    NO_MASTER,
    TIMER_CLIENTS,
    TIMER_DETECT,
    TIMER_REDIS,
    WATCHING,
    RcsState,
)
from failover.rcs.watching import Watching


class Census:
    """Determining the master over one RcsState."""

    def __init__(self, s: RcsState, watching: Watching, round_: Round) -> None:
        self.s = s
        self.watching = watching
        self.round = round_

    def census(self, now: float) -> list[FailoverEffect]:
        """Ping every client before deciding anything: each pong carries the master in its
        file, as of our (highest) token. An RCS that decides from its own, possibly stale,
        file alone can announce an old master that came back while the workers use a newer
        one (Beetle's restarted RCS can; our simulator found it)."""
        s = self.s
        if not s.client_ids:
            return s.detect(now)
        tok = s.new_token()
        s.phase = CENSUS
        s.round_token = tok
        s.answered = set()
        return [s.publish(m.PING, tok), SetTimer(TIMER_CLIENTS, s.client_timeout)]

    def on_pong(self, cid: str, tok: Token, now: float) -> list[FailoverEffect]:
        """A configured client's pong to the census: the last one ends it."""
        s = self.s
        if tok != s.round_token:
            return []
        s.answered.add(cid)
        if s.answered >= s.client_set:
            return [CancelTimer(TIMER_CLIENTS), *self.over(now)]
        return []

    def over(self, now: float) -> list[FailoverEffect]:
        """Every client answered, or the time is up. One file naming a master names it for
        all (files never name two masters at once); if every answer was an empty file and
        someone did not answer, that one may still use a master we cannot know: ask again."""
        s = self.s
        complete = s.answered >= s.client_set
        named = any(s.client_masters.get(c, (NO_TOKEN, None))[1] is not None for c in s.answered)
        s.round_token = None
        if complete or named:
            s.servers_only = False
            return s.detect(now)
        # Someone did not answer and every answer was an empty file. The servers alone can
        # still settle it: if exactly one is a master and every other is its replica, a silent
        # client's file can only name that master (or a server that is no master, which takes
        # no writes). Anything less clear, and we wait for the clients (a fresh deployment
        # with a client down must not stall when the servers leave no doubt).
        s.servers_only = True
        return s.detect(now)

    def retry(self, now: float) -> list[FailoverEffect]:
        """TIMER_DETECT with no master: ask the clients again if we wait for them, else the
        servers."""
        s = self.s
        if s.no_master_reason is not None and s.no_master_reason.startswith("waiting"):
            return self.census(now)
        return s.detect(now)

    def redis_timeout(self, now: float) -> list[FailoverEffect]:
        """No answer from the servers in time: ask again (logged with back-off)."""
        s = self.s
        report = s.retry_log.failure("detect", now)
        out = (
            []
            if report is None
            else [
                Log.warning(
                    f"RCS: asking the Redis servers timed out (no answer within "
                    f"{s.redis_timeout:g} s); trying again",
                    **report.fields(),
                )
            ]
        )
        return [*out, *s.detect(now)]

    def on_answer(self, infos: dict[str, ServerInfo | None], now: float) -> list[FailoverEffect]:
        """The servers' state for determining the master (RcsState.detect)."""
        out: list[FailoverEffect] = [CancelTimer(TIMER_REDIS)]
        done = self.s.retry_log.success("detect", now)
        if done is not None:
            out.append(Log.info("RCS: Redis answered again", **done.fields()))
        return [*out, *self._determined(infos, now)]

    def _determined(self, infos: dict[str, ServerInfo | None], now: float) -> list[FailoverEffect]:
        s = self.s
        masters = [x for x in s.servers if (i := infos[x]) is not None and i.is_master]
        servers_only, s.servers_only = s.servers_only, False
        hint, source = (None, "") if servers_only else s.hint()
        if hint is not None and hint in masters:
            s.master = hint
            s.retired.update(x for x in masters if x != hint)
            head = Log.info("RCS: master determined", master=hint, source=source)
            return [head, *self.watching.enter(infos, now)]
        if hint is not None:
            # Beetle: "should start master switch if master in file is slave" (or unreachable)
            s.master = hint
            s.phase = WATCHING
            state = "unreachable" if infos[hint] is None else "not a master"
            return [
                Log.warning(
                    "RCS: the master is " + state + "; starting a master switch",
                    master=hint,
                    source=source,
                ),
                *self.round.master_unavailable(now),
            ]
        if len(masters) == 1:
            x = masters[0]
            if all(y == x or ((i := infos[y]) is not None and i.replica_of(x)) for y in s.servers):
                s.master = x
                head = Log.info("RCS: master auto-detected", master=x)
                return [head, *self.watching.enter(infos, now)]
        if servers_only:
            return self._incomplete(now, infos)
        if not masters:
            why = "no server is a master"
        elif len(masters) > 1:
            why = f"several servers are masters: {masters}"
        else:
            lost = [x for x in s.servers if infos[x] is None]
            others = [x for x in s.servers if x != masters[0] and x not in lost]
            why = (
                f"{masters[0]} is the only master but {lost} cannot be reached"
                if lost
                else f"{masters[0]} is the only master but {others} are not all its replicas"
            )
        out: list[FailoverEffect] = []
        if s.no_master_reason != why:
            out += s.notify(
                f"Redis master could not be determined: {why} ({s.servers_seen(infos)})"
            )
        s.no_master_reason = why
        s.phase = NO_MASTER
        return [*out, SetTimer(TIMER_DETECT, s.master_retry_interval)]

    def _incomplete(self, now: float, infos: dict[str, ServerInfo | None]) -> list[FailoverEffect]:
        s = self.s
        missing = sorted(s.client_set - s.answered)
        out: list[FailoverEffect] = []
        if not s.census_note:
            s.census_note = True
            out += s.notify(
                f"Redis master not determined yet: no answer from clients {missing}, their "
                f"master files are empty, and the servers do not name exactly one master "
                f"({s.servers_seen(infos)})"
            )
        s.phase = NO_MASTER
        s.no_master_reason = f"waiting for clients {missing}"
        return [*out, SetTimer(TIMER_DETECT, s.master_retry_interval)]
