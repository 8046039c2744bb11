"""ConfigurationClientCore: Beetle's Redis configuration client (RCC), as a pure core.

One RCC runs on every worker host. It owns that host's master file, which the workers read
before each Redis operation (reference §3, "Worker read"). It does what the RCS asks, but only
what the RCS may ask, and only what this host can vouch for:

- Start: client_started, read the master file, and keep it only if its server is still a
  master *as seen from this host*; otherwise empty it (Beetle: "clear file if master is slave
  or unavailable"). A heartbeat every `heartbeat_interval`.
- ping(token) -> pong(token) when the token is valid (Beetle's code does not check the master
  here, although its doc says so; we follow the code: the ping only asks "are you there?").
- invalidate(server, token): valid token AND this host sees the master down: `server` and the
  master in our own file are both unreachable or not masters (a query of our own view of
  Redis) -> empty the file, then client_invalidated(token). "Unreachable" is either kind: a
  refused connection (the process is gone) answers at once, no answer takes the shell's Redis
  timeout; both mean that no worker on this host can write there. The log says which. A master this host still reaches
  as a master blocks the switch: a cut between the RCS and the master must not cause one.
- reconfigure(server, token): valid token -> write the file if it differs.

A token is valid when it is >= the highest one seen, compared as (term, counter) pairs: an
older RCS is ignored once a newer one was heard. Safer than Beetle:

- every message we send carries our highest token (pong and client_invalidated: the token
  they answer), so a standby RCS knows whom the clients follow, and a deposed RCS hears that a
  newer one exists and stands down;
- the first message of a new term is followed by a heartbeat at once (the new RCS learns
  quickly that its term is confirmed), and a message with an outdated token is answered with
  a heartbeat (at most one per `outdated_reply_interval`), so an RCS that has been replaced
  learns it at once instead of at our next heartbeat;
- messages carry our master file's content, which lets a newly active RCS find the master the
  workers use;
- after a bus reconnect we send client_started again (the RCS answers with reconfigure).

Events in: `start`, `stop`, `master_file_read`, `receive`, `redis_info`, `timer`, `bus_down`,
`bus_up`. Effects out: Publish, ReadMasterFile, WriteMasterFile, QueryRedis, SetTimer,
CancelTimer, Log (failover/effects.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from failover import messages as m
from failover.effects import (
    CancelTimer,
    FailoverEffect,
    Log,
    Publish,
    QueryRedis,
    ReadMasterFile,
    ServerInfo,
    SetTimer,
    Unreachable,
    WriteMasterFile,
)
from failover.messages import NO_TOKEN, Token

TIMER_HEARTBEAT = "heartbeat"

START_CHECK = "start"
INVALIDATE_CHECK = "invalidate"


class ConfigurationClientCore:
    """The RCC of one failover system on one worker host. See the module docstring."""

    def __init__(
        self,
        system: str,
        client_id: str,
        *,
        heartbeat_interval: float = 5.0,
        outdated_reply_interval: float = 1.0,
    ) -> None:
        self.system = m.check_system(system)
        self.client_id = m.check_id("client id", client_id)
        if not heartbeat_interval > 0:
            raise ValueError(f"heartbeat_interval must be > 0, got {heartbeat_interval!r}")
        self.heartbeat_interval = heartbeat_interval
        self.outdated_reply_interval = outdated_reply_interval
        self.max_token: Token = NO_TOKEN
        self.master: str | None = None  # what our master file says (we are its only writer)
        self.file_known = False  # read it, or wrote it since we started
        self.connected = True
        self._bus_connecting = False  # bus_down(at_start=True): the first connect is pending
        self.started = False
        self.stopped = False
        self._req = 0
        # request id -> (purpose, token, servers checked, our file's master when asked)
        self._checks: dict[int, tuple[str, Token, tuple[str, ...], str | None]] = {}
        self._last_outdated_reply = float("-inf")
        self.switches = 0  # times the master file moved from one master to another
        self._last_master: str | None = None

    # ---- queries ------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "client_id": self.client_id,
            "master": self.master or "",
            "file_known": self.file_known,
            "term": self.max_token[0],
            "token": list(self.max_token),
            "connected": self.connected,
            "switches": self.switches,
        }

    # ---- lifecycle ----------------------------------------------------------------------------

    def start(self, now: float) -> list[FailoverEffect]:
        if self.started:
            return [Log.warning("RCC: start called twice; ignored")]
        self.started = True
        return [
            self._message(m.CLIENT_STARTED, self.max_token),
            ReadMasterFile(),
            SetTimer(TIMER_HEARTBEAT, self.heartbeat_interval),
        ]

    def stop(self, now: float) -> list[FailoverEffect]:
        self.stopped = True
        self._checks.clear()
        return [CancelTimer(TIMER_HEARTBEAT)]

    def bus_down(self, now: float, *, at_start: bool = False) -> list[FailoverEffect]:
        """`at_start`: the bus is still making its first connection: no outage, no warning."""
        self.connected = False
        self._bus_connecting = at_start
        return [] if at_start else [Log.warning("RCC: bus disconnected")]

    def bus_up(self, now: float) -> list[FailoverEffect]:
        if self.connected:
            return []
        self.connected = True
        text = "RCC: bus connected" if self._bus_connecting else "RCC: bus reconnected"
        self._bus_connecting = False
        if self.stopped or not self.started:
            return []
        # what the RCS sent meanwhile is lost: announce ourselves, it answers with reconfigure
        return [Log.info(text), self._message(m.CLIENT_STARTED, self.max_token)]

    # ---- helpers ------------------------------------------------------------------------------

    def _message(self, name: str, token: Token, **fields: Any) -> Publish:
        if name != m.CLIENT_INVALIDATED:
            fields.setdefault("master", self.master or "")
        body = m.build(self.system, name, self.client_id, token, **fields)
        return Publish(m.routing_key(self.system, name), body)

    def _heartbeat(self) -> Publish:
        return self._message(m.HEARTBEAT, self.max_token)

    def _check(self, purpose: str, token: Token, servers: tuple[str, ...]) -> QueryRedis:
        self._req += 1
        self._checks[self._req] = (purpose, token, servers, self.master)
        return QueryRedis(self._req, servers)

    def _write(self, server: str | None) -> WriteMasterFile:
        if server and self._last_master and server != self._last_master:
            self.switches += 1  # a new master after another one (an empty file in between)
        if server:
            self._last_master = server
        self.master = server
        self.file_known = True
        return WriteMasterFile(server)

    # ---- the master file ------------------------------------------------------------------------

    def master_file_read(self, content: str | None, now: float) -> list[FailoverEffect]:
        """The answer to ReadMasterFile: the file's master ("host:port"), or None if empty."""
        if self.stopped:
            return []
        if self.file_known:
            # we wrote the file since we asked: what was read is older than what we wrote
            return [Log.info("RCC: master file read after a write; ignored")]
        self.file_known = True
        server = (content or "").strip() or None
        if server is not None and m.server_problem(server) is not None:
            return [
                Log.warning("RCC: the master file holds no valid server; emptying it", got=server),
                self._write(None),
            ]
        self.master = server
        self._last_master = server or self._last_master
        if server is None:
            return [Log.info("RCC: the master file is empty; waiting for reconfigure")]
        return [self._check(START_CHECK, self.max_token, (server,))]

    # ---- messages ---------------------------------------------------------------------------------

    def receive(self, routing_key: str, body: Any, now: float) -> list[FailoverEffect]:
        """A bus message of this failover system; only the RCS's requests concern us."""
        if self.stopped:
            return []
        bad = m.problem(routing_key, body, self.system)
        if bad is not None:
            return [Log.warning("RCC: dropped a bad message", why=bad)]
        name = body["type"]
        if name not in (m.PING, m.INVALIDATE, m.RECONFIGURE):
            return []  # other clients' messages, notifications
        tok = m.token_of(body)
        if tok < self.max_token:
            return self._outdated(name, tok, body["sender"], now)
        new_term = tok[0] > self.max_token[0]
        self.max_token = tok
        out: list[FailoverEffect] = []
        if name == m.PING:
            out.append(self._message(m.PONG, tok))
        elif name == m.INVALIDATE:
            servers = [body["server"]]
            if self.master is not None and self.master not in servers:
                servers.append(self.master)
            out.append(self._check(INVALIDATE_CHECK, tok, tuple(servers)))
        else:
            server = body["server"]
            if server != self.master:
                out += [Log.info("RCC: new master", master=server, was=self.master)]
                out.append(self._write(server))
        if new_term:
            out.append(self._heartbeat())  # the RCS of this term learns we follow it
        return out

    def _outdated(self, name: str, tok: Token, sender: str, now: float) -> list[FailoverEffect]:
        out: list[FailoverEffect] = [
            Log.info(
                f"RCC: ignored an outdated {name}",
                sender=sender,
                token=list(tok),
                highest=list(self.max_token),
            )
        ]
        if now - self._last_outdated_reply >= self.outdated_reply_interval:
            self._last_outdated_reply = now
            out.append(self._heartbeat())  # tells an older RCS that a newer one exists
        return out

    # ---- answers from the shell --------------------------------------------------------------------

    def redis_info(
        self, request_id: int, infos: Mapping[str, Any], now: float
    ) -> list[FailoverEffect]:
        """The answer to QueryRedis: {server: ServerInfo, or None if unreachable from here}."""
        check = self._checks.pop(request_id, None)
        if check is None or self.stopped:
            return []
        purpose, tok, servers, master_then = check
        if self.master != master_then:
            return [Log.info("RCC: the master file changed during a check; dropped", check=purpose)]
        masters = [s for s in servers if isinstance(i := infos.get(s), ServerInfo) and i.is_master]
        if purpose == START_CHECK:
            if masters:
                return [Log.info("RCC: the master in the file is a master", master=self.master)]
            return [
                Log.warning(
                    "RCC: the master in the file is not a master as seen from here; emptying it",
                    master=self.master,
                ),
                self._write(None),
            ]
        if tok != self.max_token:
            return [Log.info("RCC: invalidate outdated during its check; dropped")]
        if masters:
            return [
                Log.warning(
                    "RCC: ignoring invalidate: the master is still a master as seen from here",
                    masters=masters,
                )
            ]
        seen = {s: _seen(infos.get(s)) for s in servers}
        out: list[FailoverEffect] = [
            Log.warning("RCC: invalidating the master", master=servers[0], seen=seen)
        ]
        if self.master is not None or not self.file_known:
            out.append(self._write(None))  # before the answer: the RCS may act on it at once
        out.append(self._message(m.CLIENT_INVALIDATED, tok))
        return out

    # ---- timers ---------------------------------------------------------------------------------------

    def timer(self, key: str, now: float, data: Any = None) -> list[FailoverEffect]:
        if key != TIMER_HEARTBEAT or self.stopped:
            return []
        out: list[FailoverEffect] = [SetTimer(TIMER_HEARTBEAT, self.heartbeat_interval)]
        if self.connected:
            out.append(self._heartbeat())
        return out


def _seen(info: Any) -> str:
    """How a server looked from this host, for the log: refused, no answer, or its role."""
    if isinstance(info, ServerInfo):
        return info.role if info.master is None else f"{info.role} of {info.master}"
    if isinstance(info, Unreachable) and info.refused:
        return "refused"
    return "no answer"
