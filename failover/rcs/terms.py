"""Terms: becoming active with a term, standing down for a newer one, and the bus.

A part of ConfigurationServerCore (failover/server_core.py). Tokens are (term, counter) pairs;
`term` comes from the election that made this RCS active (the shell's gossip election) and
grows strictly from one active RCS to the next. A client accepts a token >= the highest it has
seen, so once it has heard a newer RCS it ignores the older one, and a switch needs every
client's answer under one token: two RCSes cannot both complete a round with the same clients
after the newer one reached them. An active RCS that hears a higher term (from another RCS, or
in a client's message: every one carries the client's token) stands down at once (`hear`).

Activation needs a term above every term seen, and starts with a census (census.py). Losing
the bus forgets what the clients reported: it no longer confirms our term, since a successor
may have taken over meanwhile. Reads and changes RcsState; calls census.py.
"""

from __future__ import annotations

from typing import Any

from failover import messages as m
from failover.effects import CancelTimer, FailoverEffect, Log
from failover.messages import Token
from failover.rcs.census import Census
from failover.rcs.state import CENSUS, STANDBY, TIMERS, WATCHING, RcsState


class Terms:
    """Activation, standing down, other RCSes and the bus, over one RcsState."""

    def __init__(self, s: RcsState, census: Census) -> None:
        self.s = s
        self.census = census

    def set_active(self, active: bool, term: int, now: float) -> list[FailoverEffect]:
        """See ConfigurationServerCore.set_active."""
        s = self.s
        if not active:
            return self.standby(now, "deactivated") if s.active else []
        if s.active and term == s.term:
            return []
        highest = s.highest_term
        if not isinstance(term, int) or term <= highest:
            return [
                Log.error(
                    "RCS: refusing to become active with a term not above every term seen",
                    term=term,
                    highest=highest,
                )
            ]
        out: list[FailoverEffect] = self.standby(now, "a new term") if s.active else []
        return out + self.activate(term, now)

    def activate(self, term: int, now: float) -> list[FailoverEffect]:
        s = self.s
        s.active = True
        s.term = term
        s.used_term = max(s.used_term, term)
        # Beetle starts tokens at a millisecond timestamp, so that a restarted RCS that keeps
        # its term (a shell without elections) still outranks the tokens it sent before.
        s.counter = max(s.counter + 1, int(now * 1000))
        s.max_heard = max(s.max_heard, s.token)
        s.announced = None
        s.retries = 0
        s.master_available = False
        s.census_note = False
        return [Log.info("RCS: active", term=term, token=list(s.token)), *self.census.census(now)]

    def standby(self, now: float, why: str) -> list[FailoverEffect]:
        s = self.s
        was_switching = s.switch_in_progress
        s.active = False
        s.phase = STANDBY
        s.pending = None
        s.promoting = None
        s.round_token = None
        s.answered = set()
        s.master_available = False
        out: list[FailoverEffect] = [*(CancelTimer(k) for k in TIMERS), *s.watch(None)]
        text = "RCS: standing by" + (
            " (a master switch round was cancelled)" if was_switching else ""
        )
        return [*out, Log.warning(text, why=why, term=s.term)]

    def hear(self, tok: Token, who: str, now: float) -> list[FailoverEffect]:
        """A token on the bus: remember the highest; a higher term than ours deposes us."""
        s = self.s
        s.max_heard = max(s.max_heard, tok)
        if s.active and tok[0] > s.term:
            return s.notify(
                f"RCS {s.server_id}: a newer configuration server is active (term {tok[0]}, "
                f"heard from {who}); standing down"
            ) + self.standby(now, f"term {tok[0]} > {s.term}")
        return []

    def from_server(
        self, name: str, body: dict[str, Any], tok: Token, now: float
    ) -> list[FailoverEffect]:
        """Another RCS's message (ours, echoed, never gets here): its term, its reconfigure."""
        s = self.s
        sender = body["sender"]
        out = self.hear(tok, f"RCS {sender}", now)
        if name == m.RECONFIGURE and (s.heard is None or tok >= s.heard[0]):
            server = body["server"]
            prev = s.heard[1] if s.heard is not None else None
            if prev is not None and prev != server:
                s.retired.add(prev)
            s.retired.discard(server)
            s.heard = (tok, server)
        if s.active and tok[0] == s.term and sender != s.server_id:
            out.append(Log.error("RCS: another configuration server uses our term", other=sender))
        return out

    def bus_down(self, at_start: bool) -> list[FailoverEffect]:
        """See ConfigurationServerCore.bus_down."""
        s = self.s
        s.connected = False
        s.reports.clear()
        s.bus_connecting = at_start
        return [] if at_start else [Log.warning("RCS: bus disconnected")]

    def bus_up(self, now: float) -> list[FailoverEffect]:
        s = self.s
        if s.connected:
            return []
        s.connected = True
        text = "RCS: bus connected" if s.bus_connecting else "RCS: bus reconnected"
        s.bus_connecting = False
        out: list[FailoverEffect] = [Log.info(text)]
        if s.active and s.phase == WATCHING and s.master_available:
            out += s.announce(now)
        elif s.active and s.phase == CENSUS and s.round_token is not None:
            # The census ping went out while the bus was down: always so at start on a real
            # broker, whose connection the shell makes in the background. Ask again under the
            # same token (a pong is counted once per client), or the census would only time
            # out and the master be determined from the servers alone.
            out.append(s.publish(m.PING, s.round_token))
        return out
