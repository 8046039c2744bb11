"""ConfigurationServerCore: Beetle's Redis configuration server (RCS), as a pure core.

Beetle's flow (xing/beetle's REDIS_AUTO_FAILOVER.md): the RCS watches the Redis master;
after `master_retries` failed checks it pings every configured RCC with a new token, waits for
a pong from ALL of them, sends invalidate (new token), waits for client_invalidated from ALL of
them (each RCC has emptied its master file by then, so no worker uses the old master any
more), and only then promotes a replica and publishes reconfigure with the new master. A
missing answer within `client_timeout` cancels the round: nobody may still be using the old
master when a new one starts taking writes.

Decisions worth knowing before reading the code (what is safer here than Beetle, and why):

- Terms. Tokens are (term, counter) pairs; `term` comes from the election that made this RCS
  active (the shell's gossip election) and grows strictly from one active RCS to the next. A
  client accepts a token >= the highest it has seen, so once it has heard a newer RCS it
  ignores the older one, and a switch needs every client's answer under one token: two RCSes
  cannot both complete a round with the same clients after the newer one reached them. An
  active RCS that hears a higher term (from another RCS, or in a client's heartbeat: every
  client message carries the client's token) stands down at once.
- Redis-side changes are fenced. A promotion follows a completed round (every client answered
  under our token). Turning other servers into replicas (the returning old master, replicas
  of another master) is done only while our term is *confirmed*: every configured client has
  reported our term within `confirm_window`. A deposed RCS that has not heard of its
  successor (cut from the bus) stops getting such reports and stops touching Redis.
- Promotion picks the reachable replica of the old master with the largest replication offset
  (ties: configured order), as Sentinel does; Beetle took the first in configured order.
- Activation asks before it decides: a *census* (a ping round whose pongs carry each
  client's master file) tells a newly active RCS which master the workers use; the newest
  word (by token) from the census, the reconfigures heard as a standby, then its own file,
  names the master. Deciding from its own file alone, as Beetle's RCS does at start, can
  announce an old master that came back while the workers use a newer one (the simulator
  found this). If the census is incomplete and every answer is an empty file, it asks again
  rather than guess. While watching, word from the workers newer than ours that names
  another master makes the RCS determine the master again instead of announcing its own.
- A switch finishes an earlier one: if another master (promoted by a previous RCS that died
  mid-switch) is already there, it is adopted instead of promoting a second one. If the old
  master is back by the time of the switch, it is kept (the clients get it back).
- A dead master is told from a silent one (issue 20.1). The shell holds an idle connection to
  the master (`WatchServer`); a SIGKILLed redis-server's kernel closes it at once, and
  `connection_lost` checks the master right away instead of at the next tick. A check whose
  connection was *refused* (REFUSED: the host says nothing listens, the process is gone) skips
  the remaining `master_retries`: the round starts at once. Nothing else is skipped: every
  client still confirms, from its own host, that the master is unavailable before it is
  invalidated, so a master cut off from the RCS alone (a refusing firewall, a proxy) still
  causes no switch. A master that gives *no answer* (hung, SIGSTOPped, host or link down)
  keeps the deliberate checks. After a cancelled round, refusals count as ordinary failures
  until the master passes a check again, so a refusing path that the clients do not share
  cannot make a round every tick.
- The failure count resets on a successful check (Beetle's Ruby never reset it). A
  client_invalidated from an unknown id does not block the switch (Ruby compared sets).
  Unknown ids are kept at most `unknown_max` (1000), forgotten after `unknown_ttl` (24 h), and
  notified once (Go's behaviour).
- A cancelled round gives the clients their master back at once (reconfigure with the new
  token) when this RCS had announced it in this term, instead of leaving workers without Redis
  until the master passes a check again.
- invalidate names the master being invalidated; clients refuse it while that master, or the
  one in their own file, is still a master as seen from their host.

Events in (each returns the effects to perform, in order): `start`, `stop`, `set_active`,
`receive`, `timer`, `redis_info`, `redis_done`, `connection_lost`, `initiate_master_switch`
(returns `(started, effects)`), `bus_down`, `bus_up`. Effects out: failover/effects.py. See
docs/failover.md for the behaviour and docs/cores.md for the interface.

ConfigurationServerCore is the one entry point, over parts in failover/rcs/ that share one
state object (the facade is an RcsState and hands itself to each part). A part only calls the
parts above it in this list (import-linter holds the order; clients and replicas are
independent of each other), and none calls the facade:

    rcs/state.py      RcsState: configuration, tokens, requests, what the servers and the
                      workers said; asking Redis, publishing, announcing, the watched server
    rcs/clients.py    Clients: the clients' reports and files; unknown ids
    rcs/replicas.py   Replicas: other servers made replicas of the master (fenced by the term)
    rcs/switch.py     Switch: keep, adopt or promote after a completed round; finish, abort
    rcs/round.py      Round: ping and invalidate, every client's answer under one token
    rcs/watching.py   Watching: the master's checks, a dead master told from a silent one
    rcs/census.py     Census: determining the master, the workers asked first
    rcs/terms.py      Terms: activation, standing down for a newer term, other RCSes, the bus

This module routes, by explicit tables: a client message type to its handler, a timer (with
the phase it is due in) to its handler, and an answer from Redis to the part that asked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from failover import messages as m
from failover.effects import CancelTimer, FailoverEffect, Log, ServerInfo
from failover.messages import Token
from failover.rcs.census import Census
from failover.rcs.clients import Clients
from failover.rcs.replicas import Replicas
from failover.rcs.round import Round
from failover.rcs.state import (
    CENSUS,
    DETECT,
    DETECTING,
    INVALIDATING,
    NO_MASTER,
    PINGING,
    PROMOTING,
    STANDBY,
    SWITCH,
    SWITCH_PHASES,
    SWITCHING,
    TIMER_CLIENTS,
    TIMER_DETECT,
    TIMER_RECONFIGURE,
    TIMER_REDIS,
    TIMER_WATCH,
    TIMERS,
    UNKNOWN_MAX,
    UNKNOWN_TTL,
    WATCH,
    WATCHING,
    RcsState,
)
from failover.rcs.switch import Switch
from failover.rcs.terms import Terms
from failover.rcs.watching import Watching

__all__ = [
    "CENSUS",
    "DETECTING",
    "INVALIDATING",
    "NO_MASTER",
    "PINGING",
    "PROMOTING",
    "STANDBY",
    "SWITCHING",
    "SWITCH_PHASES",
    "TIMERS",
    "TIMER_CLIENTS",
    "TIMER_DETECT",
    "TIMER_RECONFIGURE",
    "TIMER_REDIS",
    "TIMER_WATCH",
    "UNKNOWN_MAX",
    "UNKNOWN_TTL",
    "WATCHING",
    "ConfigurationServerCore",
]

Step = Callable[[float], list[FailoverEffect]]
ClientHandler = Callable[[str, Token, float], list[FailoverEffect]]
AnswerHandler = Callable[[dict[str, ServerInfo | None], float], list[FailoverEffect]]


class ConfigurationServerCore(RcsState):
    """The RCS of one failover system. See the module docstring; docs/failover.md."""

    def __init__(
        self,
        system: str,
        redis_servers: Sequence[str],
        client_ids: Iterable[str],
        *,
        server_id: str = "rcs",
        master: str | None = None,
        active: bool = True,
        term: int = 1,
        master_retries: int = 3,
        master_retry_interval: float = 1.0,
        client_timeout: float = 2.0,
        client_dead_interval: float = 60.0,
        client_heartbeat_interval: float = 5.0,
        confirm_window: float | None = None,
        reconfigure_interval: float = 10.0,
        redis_timeout: float = 5.0,
        unknown_max: int = UNKNOWN_MAX,
        unknown_ttl: float = UNKNOWN_TTL,
    ) -> None:
        """The options are RcsState's. They are spelled out here because callers (the shell
        and the simulator) read this signature."""
        super().__init__(
            system,
            redis_servers,
            client_ids,
            server_id=server_id,
            master=master,
            active=active,
            term=term,
            master_retries=master_retries,
            master_retry_interval=master_retry_interval,
            client_timeout=client_timeout,
            client_dead_interval=client_dead_interval,
            client_heartbeat_interval=client_heartbeat_interval,
            confirm_window=confirm_window,
            reconfigure_interval=reconfigure_interval,
            redis_timeout=redis_timeout,
            unknown_max=unknown_max,
            unknown_ttl=unknown_ttl,
        )
        self.clients = Clients(self)
        self.replicas = Replicas(self)
        self.switch = Switch(self, self.replicas)
        self.round = Round(self, self.switch)
        self.watching = Watching(self, self.round, self.replicas)
        self.census = Census(self, self.watching, self.round)
        self.terms = Terms(self, self.census)
        self._client_routes = self._client_routing_table()
        self._timer_routes = self._timer_routing_table()
        self._answer_routes = self._answer_routing_table()

    # ---- queries ----------------------------------------------------------------------------

    def status(self, now: float | None = None) -> dict[str, Any]:
        """Beetle's status keys, then ours."""
        now = self.now if now is None else now
        self.clients.expire(now)
        return {
            "redis_master": self.master or "",
            # the master's replication offset at our last good check: what a master adopted
            # after a switch must have reached (writes after this check cannot be vouched for)
            "redis_master_offset": self.master_offsets.get(self.master or "", 0),
            "redis_master_available": self.master_available,
            "redis_slaves_available": self.slaves_available(),
            "switch_in_progress": self.switch_in_progress,
            "configured_client_ids": list(self.client_ids),
            "configured_redis_servers": list(self.servers),
            "unknown_client_ids": sorted(self.clients.unknown),
            "unresponsive_clients": self.unresponsive_clients(now),
            "unseen_client_ids": self.unseen_client_ids(),
            "system": self.system,
            "server_id": self.server_id,
            "active": self.active,
            "term": self.term,
            "highest_term": self.highest_term,
            "token": list(self.token),
            "phase": self.phase,
            "term_confirmed": self.active and self.term_confirmed(now),
            "retries": self.retries,
            "no_master_reason": self.no_master_reason,
            "switches": self.switches,
            "last_switch": dict(self.last_switch) if self.last_switch else None,
            "clients": {
                c: {
                    "last_seen_ago": (
                        round(now - self.last_seen[c], 3) if c in self.last_seen else None
                    ),
                    "term": self.reports[c].token[0] if c in self.reports else None,
                    "master": self.client_masters[c][1] if c in self.client_masters else None,
                }
                for c in self.client_ids
            },
        }

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self, now: float) -> list[FailoverEffect]:
        """Become active with the constructor's term (unless built as a standby)."""
        self.now = now
        out: list[FailoverEffect] = []
        if self.bad_file is not None:
            out.append(
                Log.warning(
                    "RCS: the master file names a server that is not configured; ignored",
                    master=self.bad_file,
                    servers=list(self.servers),
                )
            )
        if self.start_active:
            out += self.terms.activate(self.term, now)
        return out

    def stop(self, now: float) -> list[FailoverEffect]:
        self.now = now
        if self.active:
            return self.terms.standby(now, "stopped")
        return [CancelTimer(k) for k in TIMERS]

    def set_active(self, active: bool, term: int, now: float) -> list[FailoverEffect]:
        """The election made this RCS active with `term`, or another one (`active=False`).

        Activation needs a term above every term seen so far; it re-determines the master and
        finishes a switch a previous RCS left half done. Deactivation cancels a round."""
        self.now = now
        return self.terms.set_active(active, term, now)

    def bus_down(self, now: float, *, at_start: bool = False) -> list[FailoverEffect]:
        """We cannot hear the clients: what they reported no longer confirms our term (a
        successor may have taken over while we were cut off). `at_start`: the bus is still
        making its first connection, which is no outage and not worth a warning."""
        self.now = now
        return self.terms.bus_down(at_start)

    def bus_up(self, now: float) -> list[FailoverEffect]:
        self.now = now
        return self.terms.bus_up(now)

    def initiate_master_switch(
        self, now: float, master_down: bool = False
    ) -> tuple[bool, list[FailoverEffect]]:
        """Beetle's accelerated switch (HTTP /initiate_master_switch): if the latest check
        found the master unavailable, or the shell's live check just did (`master_down`, as
        Beetle checks the master when asked), start the round now instead of after the
        remaining retries. True (201) if a switch is in progress now, False (200) if none is
        needed (or this RCS is not the active one)."""
        self.now = now
        return self.round.initiate(now, master_down)

    # ---- answers from the shell -------------------------------------------------------------

    def redis_info(
        self, request_id: int, infos: Mapping[str, Any], now: float
    ) -> list[FailoverEffect]:
        """The answer to QueryRedis(request_id): {server: ServerInfo or None (unreachable)}."""
        self.now = now
        if not self.active or self.pending is None or self.pending[0] != request_id:
            return []  # an answer we no longer wait for
        purpose = self.pending[1]
        self.pending = None
        clean = self.record(infos)
        handler = self._answer_routes.get(purpose)
        return handler(clean, now) if handler is not None else []

    def redis_done(self, request_id: int, ok: bool, now: float) -> list[FailoverEffect]:
        """The answer to Promote or MakeReplica(request_id)."""
        self.now = now
        out = self.replicas.done(request_id, ok, now)
        if out is not None:
            return out
        return self.switch.promoted(request_id, ok, now)

    def connection_lost(self, server: str, now: float) -> list[FailoverEffect]:
        """The connection WatchServer held to `server` was closed by the other side: check
        the master now (a dead one answers REFUSED, and the round starts at once)."""
        self.now = now
        return self.watching.connection_lost(server, now)

    # ---- timers -----------------------------------------------------------------------------

    def timer(self, key: str, now: float, data: Any = None) -> list[FailoverEffect]:
        """A timer fired: its handler if it is due in the current phase (a timer of another
        phase is stale and does nothing)."""
        self.now = now
        if not self.active:
            return []
        handler = self._timer_routes.get((key, self.phase))
        return handler(now) if handler is not None else []

    # ---- messages ---------------------------------------------------------------------------

    def receive(self, routing_key: str, body: Any, now: float) -> list[FailoverEffect]:
        """A bus message of this failover system (from a client, or from another RCS)."""
        self.now = now
        bad = m.problem(routing_key, body, self.system)
        if bad is not None:
            return [Log.warning("RCS: dropped a bad message", why=bad)]
        name = body["type"]
        tok = m.token_of(body)
        sender = body["sender"]
        if name in m.SERVER_MESSAGES:
            if sender == self.server_id and tok[0] == self.term:
                return []  # our own, echoed by the bus
            return self.terms.from_server(name, body, tok, now)
        out = self.terms.hear(tok, f"client {sender}", now)
        if sender not in self.client_set:
            return out + self.clients.unknown_id(sender, name, now)
        self.clients.note(sender, name, body, tok, now)
        if not self.active:
            return out
        return out + self._client_routes[name](sender, tok, now)

    def _on_pong(self, cid: str, tok: Token, now: float) -> list[FailoverEffect]:
        """A pong answers the census (activation) or the round's ping, by phase."""
        if self.phase == CENSUS:
            return self.census.on_pong(cid, tok, now)
        return self.round.on_pong(cid, tok, now)

    # ---- routing ----------------------------------------------------------------------------

    def _client_routing_table(self) -> dict[str, ClientHandler]:
        """Client message type -> handler(client id, token, now), called once the client's
        report is noted and only while active (every type of m.CLIENT_MESSAGES)."""
        return {
            m.CLIENT_STARTED: self.watching.client_started,
            m.PONG: self._on_pong,
            m.CLIENT_INVALIDATED: self.round.on_invalidated,
            m.HEARTBEAT: lambda cid, tok, now: [],  # its token and file are all it says
        }

    def _timer_routing_table(self) -> dict[tuple[str, str], Step]:
        """(timer, the phase it is due in) -> handler(now)."""
        return {
            (TIMER_WATCH, WATCHING): self.watching.tick,
            (TIMER_RECONFIGURE, WATCHING): self.watching.reconfigure_due,
            (TIMER_CLIENTS, CENSUS): self.census.over,
            (TIMER_CLIENTS, PINGING): self.round.timed_out,
            (TIMER_CLIENTS, INVALIDATING): self.round.timed_out,
            (TIMER_DETECT, NO_MASTER): self.census.retry,
            (TIMER_REDIS, DETECTING): self.census.redis_timeout,
            (TIMER_REDIS, SWITCHING): self.switch.redis_timeout,
            (TIMER_REDIS, PROMOTING): self.switch.redis_timeout,
        }

    def _answer_routing_table(self) -> dict[str, AnswerHandler]:
        """What a QueryRedis was for -> the handler of its answer."""
        return {
            DETECT: self.census.on_answer,
            WATCH: self.watching.on_answer,
            SWITCH: self.switch.on_answer,
        }
