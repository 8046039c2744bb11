"""Round: Beetle's ping and invalidate round, which must complete before any switch.

A part of ConfigurationServerCore (failover/server_core.py). The master is unavailable: ping
every configured client under a new token and wait for a pong from ALL of them; then send
invalidate (naming the master) under another token and wait for client_invalidated from ALL
of them (each has emptied its master file: no worker uses the old master any more); only then
hand over to switch.py. A missing answer within `client_timeout` cancels the round, and the
clients that emptied their file get the master back at once if we had announced it in this
term. An answer counts only under the round's own token, so a late answer to an older round,
or one meant for another RCS, never completes this one. Reads and changes RcsState; calls
switch.py.
"""

from __future__ import annotations

from collections.abc import Callable

from failover import messages as m
from failover.effects import CancelTimer, FailoverEffect, Log, SetTimer
from failover.messages import Token
from failover.rcs.state import (
    INVALIDATING,
    PINGING,
    TIMER_CLIENTS,
    TIMER_RECONFIGURE,
    TIMER_WATCH,
    WATCHING,
    RcsState,
)
from failover.rcs.switch import Switch


class Round:
    """The ping and invalidate round over one RcsState."""

    def __init__(self, s: RcsState, switch: Switch) -> None:
        self.s = s
        self.switch = switch

    def master_unavailable(self, now: float) -> list[FailoverEffect]:
        """The master failed its checks (or was refused, or a switch was asked for): ping."""
        s = self.s
        if s.unavailable_since is None:
            s.unavailable_since = now
        s.pending = None
        s.master_available = False
        out: list[FailoverEffect] = [CancelTimer(TIMER_WATCH), CancelTimer(TIMER_RECONFIGURE)]
        out += s.watch(None)
        out += s.notify(f"Redis master '{s.master}' not available")
        if not s.client_ids:
            return out + self.switch.start(now)
        tok = s.new_token()
        s.phase = PINGING
        s.round_token = tok
        s.answered = set()
        return [
            *out,
            s.publish(m.PING, tok),
            SetTimer(TIMER_CLIENTS, s.client_timeout),
        ]

    def initiate(self, now: float, master_down: bool) -> tuple[bool, list[FailoverEffect]]:
        """Beetle's accelerated switch (see ConfigurationServerCore.initiate_master_switch)."""
        s = self.s
        if not s.active:
            return False, [Log.info("RCS: not active; master switch not initiated")]
        if s.switch_in_progress:
            return True, []
        if s.phase == WATCHING and (master_down or not s.master_available):
            return True, s.notify("Master switch initiated") + self.master_unavailable(now)
        return False, []

    def on_pong(self, cid: str, tok: Token, now: float) -> list[FailoverEffect]:
        """A configured client answered a ping: the last pong of the round invalidates."""
        if self.s.phase != PINGING or tok != self.s.round_token:
            return []  # an answer to another (older) request
        return self._answered(cid, now, self.invalidate)

    def on_invalidated(self, cid: str, tok: Token, now: float) -> list[FailoverEffect]:
        """A configured client emptied its file: the last one of the round switches."""
        if self.s.phase != INVALIDATING or tok != self.s.round_token:
            return []
        return self._answered(cid, now, self.switch.start)

    def _answered(
        self, cid: str, now: float, then: Callable[[float], list[FailoverEffect]]
    ) -> list[FailoverEffect]:
        """Count `cid`'s answer; once every client answered, stop the clock and go on."""
        s = self.s
        s.answered.add(cid)
        if s.answered >= s.client_set:
            return [CancelTimer(TIMER_CLIENTS), *then(now)]
        return []

    def invalidate(self, now: float) -> list[FailoverEffect]:
        """Every client answered the ping: tell them to stop using the master."""
        s = self.s
        assert s.master is not None
        tok = s.new_token()
        s.phase = INVALIDATING
        s.round_token = tok
        s.answered = set()
        return [
            Log.info("RCS: every client answered ping; invalidating", master=s.master),
            s.publish(m.INVALIDATE, tok, server=s.master),
            SetTimer(TIMER_CLIENTS, s.client_timeout),
        ]

    def timed_out(self, now: float) -> list[FailoverEffect]:
        """`client_timeout` passed without every answer: cancel the round."""
        s = self.s
        what = "pong" if s.phase == PINGING else "client_invalidated"
        answered = sorted(s.answered)
        missing = sorted(s.client_set - s.answered)
        s.new_token()  # late answers of this round no longer count
        s.phase = WATCHING
        s.round_token = None
        s.answered = set()
        s.retries = 0
        s.fast = False  # the clients see what we do not: back to the deliberate checks
        out = s.notify(
            f"Redis master switch cancelled: no {what} from {missing} within "
            f"{s.client_timeout} s (answered: {answered})"
        )
        if s.announced is not None and s.announced == s.master:
            out += s.announce(now)  # the clients that emptied their file get it back
        return [*out, SetTimer(TIMER_WATCH, s.master_retry_interval)]
