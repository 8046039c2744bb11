"""Clients: what the configured clients (RCCs) report, and the ids nobody configured.

A part of ConfigurationServerCore (failover/server_core.py). Every client message carries the
client's token and most carry its master file: `note` keeps both, for the fences
(`RcsState.term_confirmed`) and for the word on which master the workers use
(`RcsState.evidence`). An id we were not configured with counts for nothing; it is remembered,
bounded (`unknown_max`, 1000) and expiring (`unknown_ttl`, 24 h), and notified once (Go's
behaviour), for the status page. Reads and changes RcsState; calls no other part.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from failover import messages as m
from failover.effects import FailoverEffect
from failover.messages import Token
from failover.rcs.state import RcsState, Report


class Clients:
    """Client reports and unknown ids over one RcsState."""

    def __init__(self, s: RcsState) -> None:
        self.s = s
        self.unknown: OrderedDict[str, float] = OrderedDict()  # id -> last heard

    def note(self, cid: str, name: str, body: dict[str, Any], tok: Token, now: float) -> None:
        """A message of the configured client `cid`: when, under which token, which file."""
        s = self.s
        s.last_seen[cid] = now
        s.reports[cid] = Report(tok, now)
        if "master" in body:
            s.client_masters[cid] = (tok, body["master"] or None)
        elif name == m.CLIENT_INVALIDATED:
            s.client_masters[cid] = (tok, None)  # it emptied its file

    def unknown_id(self, cid: str, name: str, now: float) -> list[FailoverEffect]:
        """A client id we were not configured with. Its pongs and client_invalidated count
        for nothing; it is remembered (bounded, expiring) for the status page."""
        self.expire(now)
        first = cid not in self.unknown
        self.unknown[cid] = now
        self.unknown.move_to_end(cid)
        while len(self.unknown) > self.s.unknown_max:
            self.unknown.popitem(last=False)
        if first:
            return self.s.notify(f"Received {name} message from unknown id '{cid}'")
        return []

    def expire(self, now: float) -> None:
        """Forget the unknown ids not heard from within `unknown_ttl`."""
        while self.unknown:
            cid, seen = next(iter(self.unknown.items()))
            if now - seen <= self.s.unknown_ttl:
                break
            del self.unknown[cid]
