"""ConfigurationServerCore: Beetle's Redis configuration server (RCS), as a pure core.

Beetle's flow (xing/beetle's REDIS_AUTO_FAILOVER.md): the RCS watches the Redis master;
after `master_retries` failed checks it pings every configured RCC with a new token, waits for
a pong from ALL of them, sends invalidate (new token), waits for client_invalidated from ALL of
them (each RCC has emptied its master file by then, so no worker uses the old master any
more), and only then promotes a replica and publishes reconfigure with the new master. A
missing answer within `client_timeout` cancels the round: nobody may still be using the old
master when a new one starts taking writes.

What is safer here, and why:

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
(returns `(started, effects)`), `bus_down`, `bus_up`. Effects out: failover/effects.py.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from failover import messages as m
from failover.effects import (
    CancelTimer,
    FailoverEffect,
    Log,
    MakeReplica,
    Notify,
    Promote,
    Publish,
    QueryRedis,
    ServerInfo,
    SetMaster,
    SetTimer,
    Unreachable,
    WatchServer,
)
from failover.messages import NO_TOKEN, Token
from monitors.retry_log import RetryBackoff

TIMER_WATCH = "watch"  # the next check of the master
TIMER_CLIENTS = "client_timeout"  # the ping or invalidate round's deadline
TIMER_RECONFIGURE = "reconfigure"  # the periodic reconfigure for late clients
TIMER_REDIS = "redis"  # an answer to a detect/switch query or a promotion is overdue
TIMER_DETECT = "detect"  # try again to determine the master
TIMERS = (TIMER_WATCH, TIMER_CLIENTS, TIMER_RECONFIGURE, TIMER_REDIS, TIMER_DETECT)

UNKNOWN_MAX = 1000  # Go's cap (Ruby: 20)
UNKNOWN_TTL = 86400.0  # Go forgets unknown ids after 24 h

# phases
STANDBY = "standby"
CENSUS = "census"  # activation: asking every client which master its file names
DETECTING = "detecting"
NO_MASTER = "no_master"
WATCHING = "watching"
PINGING = "pinging"
INVALIDATING = "invalidating"
SWITCHING = "switching"
PROMOTING = "promoting"
SWITCH_PHASES = frozenset({PINGING, INVALIDATING, SWITCHING, PROMOTING})


@dataclass(frozen=True)
class _Report:
    """The last message of a configured client: its token and when we got it (our clock)."""

    token: Token
    at: float


def _check_config(
    system: str, servers: Sequence[str], client_ids: Iterable[str]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    m.check_system(system)
    if isinstance(servers, str):
        raise ValueError(f"redis_servers must be a list of 'host:port' strings, got {servers!r}")
    servers = tuple(servers)
    if len(servers) < 2:
        raise ValueError(
            f"a failover set needs at least 2 Redis servers (a master and a replica), got "
            f"{list(servers)}"
        )
    for s in servers:
        m.check_server(s)
    dups = sorted({s for s in servers if servers.count(s) > 1})
    if dups:
        raise ValueError(f"Redis servers listed more than once: {dups}")
    if isinstance(client_ids, str):
        raise ValueError(f"client_ids must be a list of strings, got {client_ids!r}")
    ids = tuple(client_ids)
    for c in ids:
        m.check_id("client id", c)
    dup_ids = sorted({c for c in ids if ids.count(c) > 1})
    if dup_ids:
        raise ValueError(f"client ids listed more than once: {dup_ids}")
    return servers, ids


class ConfigurationServerCore:
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
        self.servers, self.client_ids = _check_config(system, redis_servers, client_ids)
        self.system = system
        self.server_id = m.check_id("server id", server_id)
        if master_retries < 1:
            raise ValueError(f"master_retries must be >= 1, got {master_retries}")
        for name, v in (
            ("master_retry_interval", master_retry_interval),
            ("client_timeout", client_timeout),
            ("client_heartbeat_interval", client_heartbeat_interval),
            ("reconfigure_interval", reconfigure_interval),
            ("redis_timeout", redis_timeout),
        ):
            if not v > 0:
                raise ValueError(f"{name} must be > 0, got {v!r}")
        if not isinstance(term, int) or term < 0:
            raise ValueError(f"term must be an integer >= 0, got {term!r}")
        self.master_retries = master_retries
        self.master_retry_interval = master_retry_interval
        self.client_timeout = client_timeout
        self.client_dead_interval = client_dead_interval
        self.client_heartbeat_interval = client_heartbeat_interval
        self.confirm_window = (
            confirm_window if confirm_window is not None else 3 * client_heartbeat_interval
        )
        self.reconfigure_interval = reconfigure_interval
        self.redis_timeout = redis_timeout
        self.unknown_max = max(1, unknown_max)
        self.unknown_ttl = unknown_ttl
        self._clients = frozenset(self.client_ids)
        self._order = {s: i for i, s in enumerate(self.servers)}

        self.file_master: str | None = None
        self._bad_file: str | None = None
        if master:
            if master in self._order:
                self.file_master = master
            else:
                self._bad_file = master

        self._start_active = active
        self._init_state(term)

    def _init_state(self, term: int) -> None:
        """Everything the core learns while it runs (the constructor holds the config)."""
        self.active = False
        self.term = term
        self.counter = 0
        self._used_term = 0  # the highest term we have been active with
        self.max_heard: Token = NO_TOKEN
        self.phase = STANDBY
        self.connected = True
        self._bus_connecting = False  # bus_down(at_start=True): the first connect is pending
        self.now = 0.0

        self.master: str | None = None
        self.master_available = False
        self.retries = 0
        self.refused: set[str] = set()  # servers whose host refused the last query
        self._fast = True  # a refusal may skip the retries (off after a cancelled round)
        self._watched_server: str | None = None  # what WatchServer holds a connection to
        self._watch_lost_at: float | None = None  # when that connection was lost
        self.infos: dict[str, ServerInfo | None] = {}
        self.last_role: dict[str, str] = {}
        self.replids: dict[str, str] = {}  # the replication id each server had as a master
        self.master_offsets: dict[str, int] = {}  # ... and its offset then
        self.retired: set[str] = set()  # masters replaced: never adopted again while masters
        self.announced: str | None = None  # what we announced with reconfigure in this term
        self.heard: tuple[Token, str] | None = None  # the newest reconfigure anyone sent
        self.no_master_reason: str | None = None
        self._census_note = False
        self._servers_only = False  # an incomplete census of empty files: trust no hint
        # switches this RCS completed, and the last one: from, to, when, and how long since
        # the master was first found unavailable (for metrics and the management page)
        self.switches = 0
        self.last_switch: dict[str, Any] | None = None
        self._unavailable_since: float | None = None

        self._req = 0
        self._pending: tuple[int, str] | None = None  # (request id, purpose)
        self._promoting: str | None = None
        self._round_token: Token | None = None
        self._answered: set[str] = set()
        self._replicating: dict[str, tuple[str, float]] = {}  # server -> (master, when asked)
        self._replica_reqs: dict[int, str] = {}
        # Retries that can fail for as long as an outage lasts log with back-off (first
        # failure, one line per back-off step with a count, the recovery): monitors/retry_log.
        self._retry_log = RetryBackoff()

        self.last_seen: dict[str, float] = {}
        self.reports: dict[str, _Report] = {}
        # client -> (token of the message that told us, its master file: None if empty)
        self.client_masters: dict[str, tuple[Token, str | None]] = {}
        self.unknown: OrderedDict[str, float] = OrderedDict()

    # ---- queries ------------------------------------------------------------------------------

    @property
    def token(self) -> Token:
        return (self.term, self.counter)

    @property
    def highest_term(self) -> int:
        """The highest term heard on the bus or used here: the next election must give more."""
        return max(self.max_heard[0], self._used_term)

    @property
    def switch_in_progress(self) -> bool:
        return self.phase in SWITCH_PHASES

    def term_confirmed(self, now: float) -> bool:
        """Every configured client reported our term within `confirm_window` (vacuously true
        without clients): we may change Redis beyond a promotion."""
        for cid in self.client_ids:
            r = self.reports.get(cid)
            if r is None or r.token[0] != self.term or now - r.at > self.confirm_window:
                return False
        return True

    def slaves_available(self) -> list[str]:
        if self.master is None:
            return []
        return [
            s
            for s in self.servers
            if s != self.master
            and (i := self.infos.get(s)) is not None
            and i.replica_of(self.master)
        ]

    def unresponsive_clients(self, now: float) -> list[str]:
        """Configured clients seen, but not within `client_dead_interval`."""
        return sorted(
            c
            for c in self.client_ids
            if c in self.last_seen and now - self.last_seen[c] > self.client_dead_interval
        )

    def unseen_client_ids(self) -> list[str]:
        return sorted(c for c in self.client_ids if c not in self.last_seen)

    def status(self, now: float | None = None) -> dict[str, Any]:
        """Beetle's status keys, then ours."""
        now = self.now if now is None else now
        self._expire_unknown(now)
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
            "unknown_client_ids": sorted(self.unknown),
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

    # ---- lifecycle ----------------------------------------------------------------------------

    def start(self, now: float) -> list[FailoverEffect]:
        """Become active with the constructor's term (unless built as a standby)."""
        self.now = now
        out: list[FailoverEffect] = []
        if self._bad_file is not None:
            out.append(
                Log.warning(
                    "RCS: the master file names a server that is not configured; ignored",
                    master=self._bad_file,
                    servers=list(self.servers),
                )
            )
        if self._start_active:
            out += self._activate(self.term, now)
        return out

    def stop(self, now: float) -> list[FailoverEffect]:
        self.now = now
        if self.active:
            return self._standby(now, "stopped")
        return [CancelTimer(k) for k in TIMERS]

    def set_active(self, active: bool, term: int, now: float) -> list[FailoverEffect]:
        """The election made this RCS active with `term`, or another one (`active=False`).

        Activation needs a term above every term seen so far; it re-determines the master and
        finishes a switch a previous RCS left half done. Deactivation cancels a round."""
        self.now = now
        if not active:
            return self._standby(now, "deactivated") if self.active else []
        if self.active and term == self.term:
            return []
        highest = self.highest_term
        if not isinstance(term, int) or term <= highest:
            return [
                Log.error(
                    "RCS: refusing to become active with a term not above every term seen",
                    term=term,
                    highest=highest,
                )
            ]
        out: list[FailoverEffect] = self._standby(now, "a new term") if self.active else []
        return out + self._activate(term, now)

    def _activate(self, term: int, now: float) -> list[FailoverEffect]:
        self.active = True
        self.term = term
        self._used_term = max(self._used_term, term)
        # Beetle starts tokens at a millisecond timestamp, so that a restarted RCS that keeps
        # its term (a shell without elections) still outranks the tokens it sent before.
        self.counter = max(self.counter + 1, int(now * 1000))
        self.max_heard = max(self.max_heard, self.token)
        self.announced = None
        self.retries = 0
        self.master_available = False
        self._census_note = False
        return [Log.info("RCS: active", term=term, token=list(self.token)), *self._census(now)]

    def _standby(self, now: float, why: str) -> list[FailoverEffect]:
        was_switching = self.switch_in_progress
        self.active = False
        self.phase = STANDBY
        self._pending = None
        self._promoting = None
        self._round_token = None
        self._answered = set()
        self.master_available = False
        out: list[FailoverEffect] = [*(CancelTimer(k) for k in TIMERS), *self._watch(None)]
        text = "RCS: standing by" + (
            " (a master switch round was cancelled)" if was_switching else ""
        )
        return [*out, Log.warning(text, why=why, term=self.term)]

    def bus_down(self, now: float, *, at_start: bool = False) -> list[FailoverEffect]:
        """We cannot hear the clients: what they reported no longer confirms our term (a
        successor may have taken over while we were cut off). `at_start`: the bus is still
        making its first connection, which is no outage and not worth a warning."""
        self.now = now
        self.connected = False
        self.reports.clear()
        self._bus_connecting = at_start
        return [] if at_start else [Log.warning("RCS: bus disconnected")]

    def bus_up(self, now: float) -> list[FailoverEffect]:
        self.now = now
        if self.connected:
            return []
        self.connected = True
        text = "RCS: bus connected" if self._bus_connecting else "RCS: bus reconnected"
        self._bus_connecting = False
        out: list[FailoverEffect] = [Log.info(text)]
        if self.active and self.phase == WATCHING and self.master_available:
            out += self._announce(now)
        elif self.active and self.phase == CENSUS and self._round_token is not None:
            # The census ping went out while the bus was down: always so at start on a real
            # broker, whose connection the shell makes in the background. Ask again under the
            # same token (a pong is counted once per client), or the census would only time
            # out and the master be determined from the servers alone.
            out.append(self._publish(m.PING, self._round_token))
        return out

    # ---- helpers ---------------------------------------------------------------------------------

    def _new_token(self) -> Token:
        self.counter += 1
        self.max_heard = max(self.max_heard, self.token)
        return self.token

    def _next_req(self) -> int:
        self._req += 1
        return self._req

    def _query(self, purpose: str) -> QueryRedis:
        req = self._next_req()
        self._pending = (req, purpose)
        return QueryRedis(req, self.servers)

    def _notify(self, text: str, **fields: Any) -> list[FailoverEffect]:
        """A system notification from the active RCS; a standby only logs (it must not speak
        for the system)."""
        if self.active:
            return [Notify(text)]  # the shell logs it, publishes it and keeps it
        return [Log.info(text, **fields)]

    def _publish(self, name: str, token: Token, **fields: Any) -> Publish:
        body = m.build(self.system, name, self.server_id, token, **fields)
        return Publish(m.routing_key(self.system, name), body)

    def _best(self, candidates: Iterable[str], infos: Mapping[str, ServerInfo | None]) -> str:
        """The largest replication offset; ties go to the first in configured order."""

        def key(s: str) -> tuple[int, int]:
            info = infos.get(s)
            return (info.offset if info is not None else -1, -self._order[s])

        return max(candidates, key=key)

    def _record(self, infos: Mapping[str, Any]) -> dict[str, ServerInfo | None]:
        clean: dict[str, ServerInfo | None] = {}
        self.refused = {
            s for s in self.servers if isinstance(i := infos.get(s), Unreachable) and i.refused
        }
        for s in self.servers:
            i = infos.get(s)
            clean[s] = i if isinstance(i, ServerInfo) else None
            if clean[s] is not None:
                self.last_role[s] = clean[s].role  # type: ignore[union-attr]
                if clean[s].is_master and clean[s].replid:  # type: ignore[union-attr]
                    self.replids[s] = clean[s].replid  # type: ignore[union-attr]
                    self.master_offsets[s] = clean[s].offset  # type: ignore[union-attr]
                if not clean[s].is_master:  # type: ignore[union-attr]
                    self.retired.discard(s)  # demoted: a later promotion of it is legitimate
        self.infos = clean
        return clean

    def _evidence(self) -> tuple[Token, str, str] | None:
        """The newest word on which master the workers use: (token, server, source).

        A reconfigure we heard (or sent) names its server as of its token; a client's message
        names the master in its file as of the client's token. The highest token wins: a
        client report sent before the last reconfigure is older news than that reconfigure,
        however many clients sent it (the simulator found a standby that trusted such reports
        and later announced the old master again)."""
        best: tuple[Token, str, str] | None = None
        if self.heard is not None and self.heard[1] in self._order:
            best = (self.heard[0], self.heard[1], "newest reconfigure")
        for c in self.client_ids:
            said = self.client_masters.get(c)
            if said is not None and said[1] in self._order and (best is None or said[0] > best[0]):
                best = (said[0], said[1], f"master file of {c}")
        return best

    def _hint(self) -> tuple[str | None, str]:
        """Who the master should be, before looking at Redis: the newest evidence, else our
        own master file."""
        ev = self._evidence()
        if ev is not None:
            return ev[1], ev[2]
        if self.file_master is not None:
            return self.file_master, "master file"
        return None, ""

    # ---- determining the master -------------------------------------------------------------------

    def _census(self, now: float) -> list[FailoverEffect]:
        """Ping every client before deciding anything: each pong carries the master in its
        file, as of our (highest) token. An RCS that decides from its own, possibly stale,
        file alone can announce an old master that came back while the workers use a newer
        one (Beetle's restarted RCS can; our simulator found it)."""
        if not self.client_ids:
            return self._detect(now)
        tok = self._new_token()
        self.phase = CENSUS
        self._round_token = tok
        self._answered = set()
        return [self._publish(m.PING, tok), SetTimer(TIMER_CLIENTS, self.client_timeout)]

    def _census_over(self, now: float) -> list[FailoverEffect]:
        """Every client answered, or the time is up. One file naming a master names it for
        all (files never name two masters at once); if every answer was an empty file and
        someone did not answer, that one may still use a master we cannot know: ask again."""
        complete = self._answered >= self._clients
        named = any(
            self.client_masters.get(c, (NO_TOKEN, None))[1] is not None for c in self._answered
        )
        self._round_token = None
        if complete or named:
            self._servers_only = False
            return self._detect(now)
        # Someone did not answer and every answer was an empty file. The servers alone can
        # still settle it: if exactly one is a master and every other is its replica, a silent
        # client's file can only name that master (or a server that is no master, which takes
        # no writes). Anything less clear, and we wait for the clients (a fresh deployment
        # with a client down must not stall when the servers leave no doubt).
        self._servers_only = True
        return self._detect(now)

    def _census_incomplete(
        self, now: float, infos: dict[str, ServerInfo | None]
    ) -> list[FailoverEffect]:
        missing = sorted(self._clients - self._answered)
        out: list[FailoverEffect] = []
        if not self._census_note:
            self._census_note = True
            out += self._notify(
                f"Redis master not determined yet: no answer from clients {missing}, their "
                f"master files are empty, and the servers do not name exactly one master "
                f"({self._servers_seen(infos)})"
            )
        self.phase = NO_MASTER
        self.no_master_reason = f"waiting for clients {missing}"
        return [*out, SetTimer(TIMER_DETECT, self.master_retry_interval)]

    def _detect(self, now: float) -> list[FailoverEffect]:
        self.phase = DETECTING
        return [self._query("detect"), SetTimer(TIMER_REDIS, self.redis_timeout)]

    def _determined(self, infos: dict[str, ServerInfo | None], now: float) -> list[FailoverEffect]:
        masters = [s for s in self.servers if (i := infos[s]) is not None and i.is_master]
        servers_only, self._servers_only = self._servers_only, False
        hint, source = (None, "") if servers_only else self._hint()
        if hint is not None and hint in masters:
            self.master = hint
            self.retired.update(x for x in masters if x != hint)
            head = Log.info("RCS: master determined", master=hint, source=source)
            return [head, *self._watching(infos, now)]
        if hint is not None:
            # Beetle: "should start master switch if master in file is slave" (or unreachable)
            self.master = hint
            self.phase = WATCHING
            state = "unreachable" if infos[hint] is None else "not a master"
            return [
                Log.warning(
                    "RCS: the master is " + state + "; starting a master switch",
                    master=hint,
                    source=source,
                ),
                *self._master_unavailable(now),
            ]
        if len(masters) == 1:
            x = masters[0]
            if all(
                s == x or ((i := infos[s]) is not None and i.replica_of(x)) for s in self.servers
            ):
                self.master = x
                head = Log.info("RCS: master auto-detected", master=x)
                return [head, *self._watching(infos, now)]
        if servers_only:
            return self._census_incomplete(now, infos)
        if not masters:
            why = "no server is a master"
        elif len(masters) > 1:
            why = f"several servers are masters: {masters}"
        else:
            lost = [s for s in self.servers if infos[s] is None]
            others = [s for s in self.servers if s != masters[0] and s not in lost]
            why = (
                f"{masters[0]} is the only master but {lost} cannot be reached"
                if lost
                else f"{masters[0]} is the only master but {others} are not all its replicas"
            )
        out: list[FailoverEffect] = []
        if self.no_master_reason != why:
            out += self._notify(
                f"Redis master could not be determined: {why} ({self._servers_seen(infos)})"
            )
        self.no_master_reason = why
        self.phase = NO_MASTER
        return [*out, SetTimer(TIMER_DETECT, self.master_retry_interval)]

    def _servers_seen(self, infos: dict[str, ServerInfo | None]) -> str:
        """What each server answered, for a log line a newcomer can act on: "connection
        refused" (nothing listens: not started, or gone), "no answer in time" (hung, a lost
        link, or an error reply), or its role."""
        seen = []
        for s in self.servers:
            info = infos.get(s)
            if info is not None:
                what = info.role if info.master is None else f"{info.role} of {info.master}"
            elif s in self.refused:
                what = "connection refused"
            else:
                what = f"no answer in time ({self.redis_timeout:g} s)"
            seen.append(f"{s}: {what}")
        return "; ".join(seen)

    def _watching(self, infos: dict[str, ServerInfo | None], now: float) -> list[FailoverEffect]:
        """The master is a reachable master: watch it, announce it, tidy the others."""
        assert self.master is not None
        self.phase = WATCHING
        self.no_master_reason = None
        self.retries = 0
        self.master_available = True
        self._unavailable_since = None
        self._fast = True
        return [
            SetMaster(self.master),
            *self._announce(now),
            SetTimer(TIMER_WATCH, self.master_retry_interval),
            *self._watch(self.master),
            *self._reconcile(infos, now),
        ]

    def _watch(self, server: str | None) -> list[FailoverEffect]:
        """Hold a connection to `server` (None: to nothing), unless that is done already."""
        if server == self._watched_server and self._watch_lost_at is None:
            return []
        self._watched_server = server
        self._watch_lost_at = None
        return [WatchServer(server)]

    def connection_lost(self, server: str, now: float) -> list[FailoverEffect]:
        """The connection WatchServer held to `server` was closed by the other side: check
        the master now (a dead one answers REFUSED, and the round starts at once)."""
        self.now = now
        if server != self._watched_server or self._watch_lost_at is not None:
            return []
        self._watch_lost_at = now
        if not self.active or self.phase != WATCHING or server != self.master:
            return []
        return [
            Log.info("RCS: the master closed our connection; checking it now", master=server),
            self._query("watch"),
        ]

    def _announce(self, now: float) -> list[FailoverEffect]:
        assert self.master is not None
        self.announced = self.master
        self.heard = (self.token, self.master)
        return [
            self._publish(m.RECONFIGURE, self.token, server=self.master),
            SetTimer(TIMER_RECONFIGURE, self.reconfigure_interval),
        ]

    def _reconcile(
        self, infos: Mapping[str, ServerInfo | None], now: float
    ) -> list[FailoverEffect]:
        """Make every other reachable server a replica of the master (Beetle's slave_of!),
        only while our term is confirmed: a deposed RCS must not demote its successor's
        master."""
        master = self.master
        if master is None or not self.term_confirmed(now):
            return []
        out: list[FailoverEffect] = []
        for s in self.servers:
            i = infos.get(s)
            if s == master or i is None or i.replica_of(master):
                continue
            asked = self._replicating.get(s)
            if asked is not None and asked[0] == master and now - asked[1] < self._replica_retry:
                continue
            req = self._next_req()
            self._replicating[s] = (master, now)
            self._replica_reqs[req] = s
            if i.is_master:
                self.retired.add(s)
                out += self._notify(
                    f"Redis server '{s}' is a master too: making it a replica of '{master}'"
                )
            else:
                out.append(
                    Log.info("RCS: making a replica follow the master", server=s, was=i.master)
                )
            out.append(MakeReplica(req, s, master))
        return out

    @property
    def _replica_retry(self) -> float:
        return max(5 * self.master_retry_interval, self.redis_timeout)

    # ---- watching -------------------------------------------------------------------------------

    def _watch_tick(self, now: float) -> list[FailoverEffect]:
        out: list[FailoverEffect] = []
        if self._pending is not None and self._pending[1] == "watch":
            out += self._master_failed(now, "no answer to the last check")
            if self.phase != WATCHING:
                return out
        return [*out, self._query("watch"), SetTimer(TIMER_WATCH, self.master_retry_interval)]

    def _watched(self, infos: dict[str, ServerInfo | None], now: float) -> list[FailoverEffect]:
        assert self.master is not None
        ev = self._evidence()
        if ev is not None and ev[1] != self.master:
            # The workers use another master than ours (we started from stale news, or the
            # clients learnt of a switch we missed). Announcing ours would move them away
            # from theirs without a round: determine the master again, from their word.
            return [
                Log.warning(
                    "RCS: the workers follow another master; determining the master again",
                    ours=self.master,
                    theirs=ev[1],
                    source=ev[2],
                ),
                *self._detect(now),
            ]
        info = infos[self.master]
        if info is not None and info.is_master:
            came_back = not self.master_available
            self.retries = 0
            self.master_available = True
            self._unavailable_since = None
            self._fast = True
            out: list[FailoverEffect] = []
            if came_back:
                out.append(Log.info("RCS: master available", master=self.master))
            if came_back or self.announced != self.master:
                out += self._announce(now)
            lost = self._watch_lost_at
            if lost is not None and now - lost >= self.master_retry_interval:
                out += self._watch(self.master)  # not at once: a server that keeps closing
            return out + self._reconcile(infos, now)  # connections must not make a busy loop
        if info is None and self.master in self.refused and self._fast:
            return self._master_refused(now)
        if info is None:
            why = "connection refused" if self.master in self.refused else "no answer in time"
        else:
            why = f"a {info.role}, following {info.master}"
        return self._master_failed(now, why)

    def _master_refused(self, now: float) -> list[FailoverEffect]:
        """The master's host refused the connection: the process is gone. Skip the remaining
        retries (they would only wait); the clients still confirm before anything changes."""
        self.master_available = False
        self.retries = self.master_retries
        return [
            Log.warning(
                "RCS: master check refused (the process is gone); asking the clients now",
                master=self.master,
            ),
            *self._master_unavailable(now),
        ]

    def _master_failed(self, now: float, why: str) -> list[FailoverEffect]:
        self.master_available = False
        self.retries += 1
        out: list[FailoverEffect] = [
            Log.warning(
                "RCS: master check failed",
                master=self.master,
                why=why,
                retries=self.retries,
                of=self.master_retries,
            )
        ]
        if self.retries >= self.master_retries:
            out += self._master_unavailable(now)
        return out

    def initiate_master_switch(
        self, now: float, master_down: bool = False
    ) -> tuple[bool, list[FailoverEffect]]:
        """Beetle's accelerated switch (HTTP /initiate_master_switch): if the latest check
        found the master unavailable, or the shell's live check just did (`master_down`, as
        Beetle checks the master when asked), start the round now instead of after the
        remaining retries. True (201) if a switch is in progress now, False (200) if none is
        needed (or this RCS is not the active one)."""
        self.now = now
        if not self.active:
            return False, [Log.info("RCS: not active; master switch not initiated")]
        if self.switch_in_progress:
            return True, []
        if self.phase == WATCHING and (master_down or not self.master_available):
            return True, self._notify("Master switch initiated") + self._master_unavailable(now)
        return False, []

    # ---- the round: ping, invalidate ------------------------------------------------------------------

    def _master_unavailable(self, now: float) -> list[FailoverEffect]:
        if self._unavailable_since is None:
            self._unavailable_since = now
        self._pending = None
        self.master_available = False
        out: list[FailoverEffect] = [CancelTimer(TIMER_WATCH), CancelTimer(TIMER_RECONFIGURE)]
        out += self._watch(None)
        out += self._notify(f"Redis master '{self.master}' not available")
        if not self.client_ids:
            return out + self._switch(now)
        tok = self._new_token()
        self.phase = PINGING
        self._round_token = tok
        self._answered = set()
        return [
            *out,
            self._publish(m.PING, tok),
            SetTimer(TIMER_CLIENTS, self.client_timeout),
        ]

    def _invalidate(self, now: float) -> list[FailoverEffect]:
        assert self.master is not None
        tok = self._new_token()
        self.phase = INVALIDATING
        self._round_token = tok
        self._answered = set()
        return [
            Log.info("RCS: every client answered ping; invalidating", master=self.master),
            self._publish(m.INVALIDATE, tok, server=self.master),
            SetTimer(TIMER_CLIENTS, self.client_timeout),
        ]

    def _cancel_round(self, now: float) -> list[FailoverEffect]:
        what = "pong" if self.phase == PINGING else "client_invalidated"
        answered = sorted(self._answered)
        missing = sorted(self._clients - self._answered)
        self._new_token()  # late answers of this round no longer count
        self.phase = WATCHING
        self._round_token = None
        self._answered = set()
        self.retries = 0
        self._fast = False  # the clients see what we do not: back to the deliberate checks
        out = self._notify(
            f"Redis master switch cancelled: no {what} from {missing} within "
            f"{self.client_timeout} s (answered: {answered})"
        )
        if self.announced is not None and self.announced == self.master:
            out += self._announce(now)  # the clients that emptied their file get it back
        return [*out, SetTimer(TIMER_WATCH, self.master_retry_interval)]

    # ---- the switch ---------------------------------------------------------------------------

    def _switch(self, now: float) -> list[FailoverEffect]:
        self.phase = SWITCHING
        self._round_token = None
        return [self._query("switch"), SetTimer(TIMER_REDIS, self.redis_timeout)]

    def _switch_info(self, infos: dict[str, ServerInfo | None], now: float) -> list[FailoverEffect]:
        old = self.master
        assert old is not None
        oi = infos[old]
        if oi is not None and oi.is_master:
            head = Log.info("RCS: the master is back; keeping it", master=old)
            return [head, *self._finish(old, infos, now)]
        adopt = [
            s
            for s in self.servers
            if s != old
            and s not in self.retired
            and (i := infos[s]) is not None
            and i.is_master
            and self._continues(i, old)
        ]
        if adopt:
            new = self._best(adopt, infos)
            self.retired.update(s for s in adopt if s != new)
            head = Log.warning(
                "RCS: a master is already there (an earlier switch); adopting it", master=new
            )
            return [head, *self._finish(new, infos, now)]
        candidates = [
            s
            for s in self.servers
            if s != old and (i := infos[s]) is not None and i.replica_of(old)
        ]
        if candidates:
            return self._promote(self._best(candidates, infos), now)
        out = self._notify(
            f"Redis master could not be switched, no slave available to become new master, "
            f"promoting old master '{old}'"
        )
        if oi is not None:  # reachable, but a replica: make it a master again
            return out + self._promote(old, now)
        if self.last_role.get(old, "master") == "master":
            return out + self._finish(old, infos, now, available=False)
        # last seen as a replica: announcing it would send the workers' writes to a replica
        return out + self._abort_switch(now, f"'{old}' was last seen as a replica")

    def _continues(self, info: ServerInfo, old: str) -> bool:
        """Whether a master carries on the old master's data: a replica promoted by an earlier
        RCS keeps the old replication id as its replid2, and has at least the data the old
        master had at our last good check. A server that restarted empty (a new id), or from
        an old RDB of its days as a replica (the old id, but an offset from back then), has
        not; adopting it would lose the data, and wipe the old master when that one came back
        as its replica. Without ids (unknown, or the simulator), any master qualifies."""
        known = self.replids.get(old, "")
        if not known or not info.replid:
            return True
        same_history = known in (info.replid, info.replid2)
        return same_history and info.offset >= self.master_offsets.get(old, 0)

    def _promote(self, server: str, now: float) -> list[FailoverEffect]:
        req = self._next_req()
        self._pending = (req, "promote")
        self._promoting = server
        self.phase = PROMOTING
        info = self.infos.get(server)
        return [
            Log.warning(
                "RCS: promoting", server=server, offset=info.offset if info is not None else None
            ),
            Promote(req, server),
            SetTimer(TIMER_REDIS, self.redis_timeout),
        ]

    def _finish(
        self,
        new: str,
        infos: dict[str, ServerInfo | None],
        now: float,
        *,
        available: bool = True,
    ) -> list[FailoverEffect]:
        old = self.master
        out: list[FailoverEffect] = [CancelTimer(TIMER_REDIS)]
        if new != old:
            if old is not None:
                self.retired.add(old)
                began = self._unavailable_since if self._unavailable_since is not None else now
                self.switches += 1
                self.last_switch = {"from": old, "to": new, "at": now, "took": now - began}
            self.retired.discard(new)
            out += self._notify(f"Setting redis master to '{new}' (was '{old}')")
        self.master = new
        self.master_available = available
        if available:
            self._unavailable_since = None
            prev = infos.get(new)
            infos = {**infos, new: ServerInfo("master", None, prev.offset if prev else 0)}
            self.infos = infos
        self.phase = WATCHING
        self.retries = 0
        self._fast = True
        self._pending = None
        self._promoting = None
        return [
            *out,
            SetMaster(new),
            *self._announce(now),
            SetTimer(TIMER_WATCH, self.master_retry_interval),
            *(self._watch(new) if available else []),
            *(self._reconcile(infos, now) if available else []),
        ]

    def _abort_switch(self, now: float, why: str) -> list[FailoverEffect]:
        """The switch could not be done; the clients' files stay empty until the master
        passes a check again (then it is announced) or the next round."""
        self.phase = WATCHING
        self.retries = 0
        self.master_available = False
        self._pending = None
        self._promoting = None
        return [
            CancelTimer(TIMER_REDIS),
            *self._notify(f"Redis master switch failed: {why}"),
            SetTimer(TIMER_WATCH, self.master_retry_interval),
        ]

    # ---- answers from the shell -------------------------------------------------------------------

    def redis_info(
        self, request_id: int, infos: Mapping[str, Any], now: float
    ) -> list[FailoverEffect]:
        """The answer to QueryRedis(request_id): {server: ServerInfo or None (unreachable)}."""
        self.now = now
        if not self.active or self._pending is None or self._pending[0] != request_id:
            return []  # an answer we no longer wait for
        purpose = self._pending[1]
        self._pending = None
        clean = self._record(infos)
        if purpose == "detect":
            out: list[FailoverEffect] = [CancelTimer(TIMER_REDIS)]
            done = self._retry_log.success("detect", now)
            if done is not None:
                out.append(Log.info("RCS: Redis answered again", **done.fields()))
            return [*out, *self._determined(clean, now)]
        if purpose == "watch":
            return self._watched(clean, now) if self.phase == WATCHING else []
        if purpose == "switch":
            return [CancelTimer(TIMER_REDIS), *self._switch_info(clean, now)]
        return []

    def redis_done(self, request_id: int, ok: bool, now: float) -> list[FailoverEffect]:
        """The answer to Promote or MakeReplica(request_id)."""
        self.now = now
        server = self._replica_reqs.pop(request_id, None)
        if server is not None:
            if ok:
                done = self._retry_log.success(("replica", server), now)
                if done is None:
                    return []
                return [Log.info("RCS: making a replica worked", server=server, **done.fields())]
            self._replicating.pop(server, None)
            report = self._retry_log.failure(("replica", server), now)
            if report is None:
                return []
            return [Log.warning("RCS: making a replica failed", server=server, **report.fields())]
        if not self.active or self._pending != (request_id, "promote"):
            return []
        target = self._promoting
        assert target is not None
        if ok:
            return self._finish(target, dict(self.infos), now)
        return self._abort_switch(now, f"promoting '{target}' failed")

    # ---- timers -----------------------------------------------------------------------------------

    def timer(self, key: str, now: float, data: Any = None) -> list[FailoverEffect]:
        self.now = now
        if not self.active:
            return []
        if key == TIMER_WATCH and self.phase == WATCHING:
            return self._watch_tick(now)
        if key == TIMER_CLIENTS and self.phase in (PINGING, INVALIDATING):
            return self._cancel_round(now)
        if key == TIMER_CLIENTS and self.phase == CENSUS:
            return self._census_over(now)
        if key == TIMER_RECONFIGURE and self.phase == WATCHING:
            if self.master_available:
                return self._announce(now)
            return [SetTimer(TIMER_RECONFIGURE, self.reconfigure_interval)]
        if key == TIMER_DETECT and self.phase == NO_MASTER:
            if self.no_master_reason is not None and self.no_master_reason.startswith("waiting"):
                return self._census(now)
            return self._detect(now)
        if key == TIMER_REDIS:
            if self.phase == DETECTING:
                report = self._retry_log.failure("detect", now)
                out = (
                    []
                    if report is None
                    else [
                        Log.warning(
                            f"RCS: asking the Redis servers timed out (no answer within "
                            f"{self.redis_timeout:g} s); trying again",
                            **report.fields(),
                        )
                    ]
                )
                return [*out, *self._detect(now)]
            if self.phase in (SWITCHING, PROMOTING):
                return self._abort_switch(now, "no answer from Redis in time")
        return []

    # ---- messages -----------------------------------------------------------------------------------

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
            return self._from_server(name, body, tok, now)
        return self._from_client(name, sender, body, tok, now)

    def _heard(self, tok: Token, who: str, now: float) -> list[FailoverEffect]:
        self.max_heard = max(self.max_heard, tok)
        if self.active and tok[0] > self.term:
            return self._notify(
                f"RCS {self.server_id}: a newer configuration server is active (term {tok[0]}, "
                f"heard from {who}); standing down"
            ) + self._standby(now, f"term {tok[0]} > {self.term}")
        return []

    def _from_server(
        self, name: str, body: dict[str, Any], tok: Token, now: float
    ) -> list[FailoverEffect]:
        sender = body["sender"]
        out = self._heard(tok, f"RCS {sender}", now)
        if name == m.RECONFIGURE and (self.heard is None or tok >= self.heard[0]):
            server = body["server"]
            prev = self.heard[1] if self.heard is not None else None
            if prev is not None and prev != server:
                self.retired.add(prev)
            self.retired.discard(server)
            self.heard = (tok, server)
        if self.active and tok[0] == self.term and sender != self.server_id:
            out.append(Log.error("RCS: another configuration server uses our term", other=sender))
        return out

    def _from_client(
        self, name: str, cid: str, body: dict[str, Any], tok: Token, now: float
    ) -> list[FailoverEffect]:
        out = self._heard(tok, f"client {cid}", now)
        if cid not in self._clients:
            return out + self._unknown(cid, name, now)
        self.last_seen[cid] = now
        self.reports[cid] = _Report(tok, now)
        if "master" in body:
            self.client_masters[cid] = (tok, body["master"] or None)
        elif name == m.CLIENT_INVALIDATED:
            self.client_masters[cid] = (tok, None)  # it emptied its file
        if not self.active:
            return out
        if name == m.CLIENT_STARTED:
            # a late or restarted client: tell it the master now, not at the next period
            if self.phase == WATCHING and self.master_available and self.announced == self.master:
                out.append(self._publish(m.RECONFIGURE, self.token, server=self.master))
            return out
        if name == m.PONG and self.phase == CENSUS and tok == self._round_token:
            self._answered.add(cid)
            if self._answered >= self._clients:
                return [*out, CancelTimer(TIMER_CLIENTS), *self._census_over(now)]
            return out
        waits_for = {m.PONG: PINGING, m.CLIENT_INVALIDATED: INVALIDATING}.get(name)
        if waits_for is None or self.phase != waits_for or tok != self._round_token:
            return out  # a heartbeat, or an answer to another (older) request
        self._answered.add(cid)
        if self._answered >= self._clients:
            nxt = self._invalidate(now) if name == m.PONG else self._switch(now)
            out += [CancelTimer(TIMER_CLIENTS), *nxt]
        return out

    def _unknown(self, cid: str, name: str, now: float) -> list[FailoverEffect]:
        """A client id we were not configured with. Its pongs and client_invalidated count
        for nothing; it is remembered (bounded, expiring) for the status page."""
        self._expire_unknown(now)
        first = cid not in self.unknown
        self.unknown[cid] = now
        self.unknown.move_to_end(cid)
        while len(self.unknown) > self.unknown_max:
            self.unknown.popitem(last=False)
        if first:
            return self._notify(f"Received {name} message from unknown id '{cid}'")
        return []

    def _expire_unknown(self, now: float) -> None:
        while self.unknown:
            cid, seen = next(iter(self.unknown.items()))
            if now - seen <= self.unknown_ttl:
                break
            del self.unknown[cid]
