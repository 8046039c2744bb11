"""RcsState: what one configuration server (RCS) knows, shared by the parts of its core.

The facade (failover/server_core.py) is an RcsState and hands itself to its parts
(failover/rcs/*.py) as their one state object; the parts read and change it, and call only the
parts below them. Besides the configuration and what the core learns while it runs, this module
holds the few helpers every part needs: tokens, request ids, asking the servers (`query`,
`detect`), speaking on the bus (`publish`, `notify`, `announce`), the connection WatchServer
holds (`watch`), recording an answer from Redis (`record`), and the word on which master the
workers use (`evidence`, `hint`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from failover import messages as m
from failover.effects import (
    FailoverEffect,
    Log,
    Notify,
    Publish,
    QueryRedis,
    ServerInfo,
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

# what a pending request to Redis is for: the answer goes to the part that asked
DETECT = "detect"  # which server is the master (census.py)
WATCH = "watch"  # the periodic check of the master (watching.py)
SWITCH = "switch"  # the servers' state for a switch (switch.py)
PROMOTE = "promote"  # a Promote (switch.py)


@dataclass(frozen=True)
class Report:
    """The last message of a configured client: its token and when we got it (our clock)."""

    token: Token
    at: float


def check_config(
    system: str, servers: Sequence[str], client_ids: Iterable[str]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The servers and client ids as tuples, or ValueError saying what is wrong."""
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


class RcsState:
    """One RCS's configuration, what it has learnt, and the helpers its parts share."""

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
        self.servers, self.client_ids = check_config(system, redis_servers, client_ids)
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
        self.client_set = frozenset(self.client_ids)
        self.order = {s: i for i, s in enumerate(self.servers)}  # configured order

        self.file_master: str | None = None
        self.bad_file: str | None = None  # a master file naming a server not configured
        if master:
            if master in self.order:
                self.file_master = master
            else:
                self.bad_file = master
        self.start_active = active
        self._init_learnt(term)

    def _init_learnt(self, term: int) -> None:
        """Everything the core learns while it runs (the constructor holds the config)."""
        self.active = False
        self.term = term
        self.counter = 0
        self.used_term = 0  # the highest term we have been active with
        self.max_heard: Token = NO_TOKEN
        self.phase = STANDBY
        self.connected = True
        self.bus_connecting = False  # bus_down(at_start=True): the first connect is pending
        self.now = 0.0

        self.master: str | None = None
        self.master_available = False
        self.retries = 0
        self.refused: set[str] = set()  # servers whose host refused the last query
        self.fast = True  # a refusal may skip the retries (off after a cancelled round)
        self.watched_server: str | None = None  # what WatchServer holds a connection to
        self.watch_lost_at: float | None = None  # when that connection was lost
        self.infos: dict[str, ServerInfo | None] = {}
        self.last_role: dict[str, str] = {}
        self.replids: dict[str, str] = {}  # the replication id each server had as a master
        self.master_offsets: dict[str, int] = {}  # ... and its offset then
        self.retired: set[str] = set()  # masters replaced: never adopted again while masters
        self.announced: str | None = None  # what we announced with reconfigure in this term
        self.heard: tuple[Token, str] | None = None  # the newest reconfigure anyone sent
        self.no_master_reason: str | None = None
        self.census_note = False  # the incomplete census was notified once
        self.servers_only = False  # an incomplete census of empty files: trust no hint
        # switches this RCS completed, and the last one: from, to, when, and how long since
        # the master was first found unavailable (for metrics and the management page)
        self.switches = 0
        self.last_switch: dict[str, Any] | None = None
        self.unavailable_since: float | None = None

        self.req = 0
        self.pending: tuple[int, str] | None = None  # (request id, purpose)
        self.promoting: str | None = None
        self.round_token: Token | None = None  # the census or round being answered
        self.answered: set[str] = set()  # the clients that answered it
        # Retries that can fail for as long as an outage lasts log with back-off (first
        # failure, one line per back-off step with a count, the recovery): monitors/retry_log.
        self.retry_log = RetryBackoff()

        self.last_seen: dict[str, float] = {}
        self.reports: dict[str, Report] = {}
        # client -> (token of the message that told us, its master file: None if empty)
        self.client_masters: dict[str, tuple[Token, str | None]] = {}

    # ---- queries ----------------------------------------------------------------------------

    @property
    def token(self) -> Token:
        return (self.term, self.counter)

    @property
    def highest_term(self) -> int:
        """The highest term heard on the bus or used here: the next election must give more."""
        return max(self.max_heard[0], self.used_term)

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

    # ---- tokens, requests, the bus ----------------------------------------------------------

    def new_token(self) -> Token:
        self.counter += 1
        self.max_heard = max(self.max_heard, self.token)
        return self.token

    def next_req(self) -> int:
        self.req += 1
        return self.req

    def query(self, purpose: str) -> QueryRedis:
        """Ask every server for its state; the answer goes to the part `purpose` names."""
        req = self.next_req()
        self.pending = (req, purpose)
        return QueryRedis(req, self.servers)

    def detect(self, now: float) -> list[FailoverEffect]:
        """Determine the master (again) from the servers' answers (census.py takes them)."""
        self.phase = DETECTING
        return [self.query(DETECT), SetTimer(TIMER_REDIS, self.redis_timeout)]

    def notify(self, text: str, **fields: Any) -> list[FailoverEffect]:
        """A system notification from the active RCS; a standby only logs (it must not speak
        for the system)."""
        if self.active:
            return [Notify(text)]  # the shell logs it, publishes it and keeps it
        return [Log.info(text, **fields)]

    def publish(self, name: str, token: Token, **fields: Any) -> Publish:
        body = m.build(self.system, name, self.server_id, token, **fields)
        return Publish(m.routing_key(self.system, name), body)

    def announce(self, now: float) -> list[FailoverEffect]:
        """reconfigure with our master, now and every `reconfigure_interval`."""
        assert self.master is not None
        self.announced = self.master
        self.heard = (self.token, self.master)
        return [
            self.publish(m.RECONFIGURE, self.token, server=self.master),
            SetTimer(TIMER_RECONFIGURE, self.reconfigure_interval),
        ]

    def watch(self, server: str | None) -> list[FailoverEffect]:
        """Hold a connection to `server` (None: to nothing), unless that is done already."""
        if server == self.watched_server and self.watch_lost_at is None:
            return []
        self.watched_server = server
        self.watch_lost_at = None
        return [WatchServer(server)]

    # ---- what the servers and the workers say -----------------------------------------------

    def best(self, candidates: Iterable[str], infos: Mapping[str, ServerInfo | None]) -> str:
        """The largest replication offset; ties go to the first in configured order."""

        def key(s: str) -> tuple[int, int]:
            info = infos.get(s)
            return (info.offset if info is not None else -1, -self.order[s])

        return max(candidates, key=key)

    def record(self, infos: Mapping[str, Any]) -> dict[str, ServerInfo | None]:
        """Take in the servers' answers: {server: ServerInfo, or None if it did not answer}."""
        clean: dict[str, ServerInfo | None] = {}
        self.refused = {
            s for s in self.servers if isinstance(i := infos.get(s), Unreachable) and i.refused
        }
        for s in self.servers:
            i = infos.get(s)
            info = i if isinstance(i, ServerInfo) else None
            clean[s] = info
            if info is not None:
                self.last_role[s] = info.role
                if info.is_master and info.replid:
                    self.replids[s] = info.replid
                    self.master_offsets[s] = info.offset
                if not info.is_master:
                    self.retired.discard(s)  # demoted: a later promotion of it is legitimate
        self.infos = clean
        return clean

    def evidence(self) -> tuple[Token, str, str] | None:
        """The newest word on which master the workers use: (token, server, source).

        A reconfigure we heard (or sent) names its server as of its token; a client's message
        names the master in its file as of the client's token. The highest token wins: a
        client report sent before the last reconfigure is older news than that reconfigure,
        however many clients sent it (the simulator found a standby that trusted such reports
        and later announced the old master again)."""
        best: tuple[Token, str, str] | None = None
        if self.heard is not None and self.heard[1] in self.order:
            best = (self.heard[0], self.heard[1], "newest reconfigure")
        for c in self.client_ids:
            said = self.client_masters.get(c)
            if said is not None and said[1] in self.order and (best is None or said[0] > best[0]):
                best = (said[0], said[1], f"master file of {c}")
        return best

    def hint(self) -> tuple[str | None, str]:
        """Who the master should be, before looking at Redis: the newest evidence, else our
        own master file."""
        ev = self.evidence()
        if ev is not None:
            return ev[1], ev[2]
        if self.file_master is not None:
            return self.file_master, "master file"
        return None, ""

    def servers_seen(self, infos: dict[str, ServerInfo | None]) -> str:
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
