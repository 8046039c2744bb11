"""ConfigurationServer (RCS) and ConfigurationClient (RCC): actor shells around the cores.

The cores decide (server_core.py, client_core.py); these Processes do the I/O:

- the bus: every message of the failover system (`failover.<system>.#`) is told to the
  process and fed to the core; `Publish`/`Direct` go out on the bus; bus state changes become
  `bus_down`/`bus_up`;
- Redis: `QueryRedis`, `Promote` and `MakeReplica` run on a small thread pool (a Redis call
  blocks, and the process must keep answering) with short timeouts, and their answers are
  told back as events, matched by request id;
- files: `WriteMasterFile`/`ReadMasterFile` (the RCC's master file, what FailoverRedis on this
  host reads) and `SetMaster` (the RCS's own record) through RedisMasterFile, atomically, in
  order with the other effects;
- `Notify`: a warning in the log (the core publishes the system_notification itself).

The RCS can be one of several candidates: `elector` (a Gossip ref) runs an election among the
candidates of the system; the winner becomes active with the election's term, and a standby
re-runs the election when the active one is lost, leaves, or stops answering. Only a node
whose node monitor is not paused stands (Gossip never lets a paused node win). Without an
elector, the RCS is active alone, as Beetle's is.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from failover import messages as m
from failover import redis_ops
from failover.client_core import ConfigurationClientCore
from failover.effects import (
    NO_ANSWER,
    REFUSED,
    MakeReplica,
    Notify,
    Promote,
    QueryRedis,
    ReadMasterFile,
    ServerInfo,
    SetMaster,
    Unreachable,
    WatchServer,
    WriteMasterFile,
)
from failover.http_status import StatusServer
from failover.master_file import RedisMasterFile
from failover.server_core import ConfigurationServerCore
from failover.server_watch import ServerWatch
from monitors.bus import Bus, BusError, connect_bus
from monitors.core_interface import BusCore
from monitors.core_shell import BusCoreShell, BusIn
from monitors.effects import perform_all
from monitors.gossip.effects import Direct, Publish
from monitors.node_monitor.shell import NodeEvent
from monitors.retry_log import RetryLog
from monitors.shell_effects import ShellEffects
from monitors.tls import TlsContexts, TlsFiles

__all__ = ["ConfigurationClient", "ConfigurationServer"]

log = logging.getLogger("failover")

REDIS_TIMEOUT = 1.0  # per Redis call from a shell: a dead server must not hold up a round


@dataclass(frozen=True)
class _RedisInfo:
    request_id: int
    infos: dict[str, ServerInfo | Unreachable]


@dataclass(frozen=True)
class _ConnectionLost:
    watch: ServerWatch


@dataclass(frozen=True)
class _RedisDone:
    request_id: int
    ok: bool


@dataclass(frozen=True)
class _Won:
    """The gossip election for `term` chose this RCS."""

    term: int


_ELECTION_CHECK = "election-check"


@dataclass(frozen=True)
class _ElectionOver:
    pass


_FROM_ACTIVE = (m.PING, m.INVALIDATE, m.RECONFIGURE)


def _ask(address: str) -> ServerInfo | Unreachable:
    try:
        info = redis_ops.probe_replication(address, timeout=REDIS_TIMEOUT)
    except Exception as exc:  # a bad answer counts as unreachable, with a reason
        log.debug("failover: INFO replication on %s failed: %s", address, exc)
        return NO_ANSWER
    if isinstance(info, dict):
        return ServerInfo.from_info(info)
    return REFUSED if info == redis_ops.REFUSED else NO_ANSWER


def _query(servers: Sequence[str], routes: dict[str, str]) -> dict[str, ServerInfo | Unreachable]:
    """Every server at once: hung servers cost one REDIS_TIMEOUT in all, not one each (an
    RCC's answer to invalidate must beat the RCS's client_timeout). `routes` maps a server
    to the address this host reaches it at."""
    addresses = [routes.get(s, s) for s in servers]
    if len(servers) == 1:
        return {servers[0]: _ask(addresses[0])}
    with concurrent.futures.ThreadPoolExecutor(len(servers)) as pool:
        return dict(zip(servers, pool.map(_ask, addresses), strict=True))


def _version() -> str:
    try:
        from importlib.metadata import version

        return f"rabbitry {version('rabbitry')}"
    except Exception:  # not installed as a distribution
        return "rabbitry"


def _redacted(bus: Any) -> str:
    """The bus URL without its password (the status page is unauthenticated)."""
    if not isinstance(bus, str):
        return getattr(bus, "url", None) or type(bus).__name__
    head, sep, rest = bus.partition("://")
    if sep and "@" in rest:
        userinfo, _, host = rest.rpartition("@")
        user = userinfo.split(":", 1)[0]
        return f"{head}://{user}:***@{host}" if ":" in userinfo else bus
    return bus


class _RedisCore(BusCore, Protocol):
    """A failover core: a bus core that asks the Redis servers (QueryRedis), and may be
    told that the bus is still making its first connection."""

    def bus_down(self, now: float, *, at_start: bool = False) -> Sequence[object]: ...

    def redis_info(
        self, request_id: int, infos: Mapping[str, Any], now: float
    ) -> Sequence[object]: ...


R = TypeVar("R", bound=_RedisCore)


class _FailoverShell(BusCoreShell[R]):
    """What the RCS and RCC shells share: bus, timers, Redis pool, effects."""

    def __init__(
        self,
        bus: str | Bus,
        system: str,
        node: str,
        exchange: str,
        redis_addresses: dict[str, str] | None = None,
    ) -> None:
        super().__init__()
        # how THIS host reaches each server, when not at its name: a fault proxy on one
        # host's path only (the RCS's, say) models a cut the other hosts do not share
        self._routes = dict(redis_addresses or {})
        for server, address in self._routes.items():
            m.check_server(server)
            redis_ops.parse_address(address)
        self._watch: ServerWatch | None = None
        self._bus_spec = bus
        self.system = m.check_system(system)
        self.node = node
        self._exchange = exchange
        self.bus: Bus | None = None
        self._own_bus = False
        self._subscription: Any = None
        # SetTimer, CancelTimer and Log (this core talks over the bus, not dist)
        self._effects = ShellEffects(self, self._timers, log, f"failover {self.system}")
        self._pool = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="failover-redis")
        self._retries = RetryLog(log)  # Redis calls that keep failing: logged with back-off
        self.route(_RedisInfo, self._on_redis_info)

    # -- lifecycle

    def _connect(self) -> None:
        if isinstance(self._bus_spec, str):
            self.bus = connect_bus(
                self._bus_spec, self.node, exchange=self._exchange, connect_timeout=None
            )
            self._own_bus = True
        else:
            self.bus = self._bus_spec
        self._subscription = self.bus.subscribe(m.pattern(self.system), self._on_bus_message)
        self.bus.add_state_listener(self._on_bus_state)
        # A bus given as a URL connects in the background (connect_timeout=None), so it is
        # usually not connected yet. Tell the core it starts disconnected, as the gossip shell
        # does: what the core sends at start is dropped by the bus, and the bus_up that follows
        # makes an RCC announce itself again (client_started). Without this, a new RCC with an
        # empty file waited for the RCS's periodic reconfigure (reconfigure_interval). Checked
        # after adding the listener: a connection made meanwhile still arrives as a bus_up.
        if not self.bus.connected and self.core is not None:
            self._perform(self.core.bus_down(time.time(), at_start=True))

    def _shutdown(self) -> None:
        self._timers.clear()
        self._set_watch(None)
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._subscription is not None:
            with contextlib.suppress(Exception):
                self._subscription.cancel()
        if self.bus is not None:
            with contextlib.suppress(Exception):
                self.bus.remove_state_listener(self._on_bus_state)
            if self._own_bus:
                with contextlib.suppress(Exception):
                    self.bus.close()

    def on_failure(self, *_exc_info: Any) -> None:
        self._shutdown()

    def on_kill(self) -> None:
        self._shutdown()

    # -- inputs: BusCoreShell's (monitors/core_shell.py): bus messages, the bus's state and
    # timers; and the answers of the Redis pool

    def _tell_quietly(self, message: Any) -> None:
        with contextlib.suppress(Exception):
            self.actor_ref.tell(message)

    def _on_redis_info(self, message: _RedisInfo, now: float) -> None:
        self._perform(self._core().redis_info(message.request_id, message.infos, now))

    # -- effects

    def _perform(self, effects: Iterable[Any]) -> None:
        perform_all(effects, self._perform_one, log, f"failover {self.system}")

    def _perform_one(self, effect: Any) -> None:
        if self._effects.perform(effect):
            return
        kind = type(effect)
        if kind is Publish or kind is Direct:
            assert self.bus is not None
            try:
                if kind is Publish:
                    self.bus.publish(effect.routing_key, effect.body)
                else:
                    self.bus.send(effect.node, effect.routing_key, effect.body)
            except BusError as exc:  # the protocol's timeouts and periodic resends cover it
                log.info("failover %s: bus send failed: %s", self.system, exc)
        elif kind is Notify:
            log.warning("failover %s: %s", self.system, effect.text)
            self._notified(effect.text)
        elif kind is QueryRedis:
            routes = self._routes
            self._submit(lambda: _RedisInfo(effect.request_id, _query(effect.servers, routes)))
        elif kind is Promote:
            address = self._routes.get(effect.server, effect.server)
            self._submit(lambda: self._redis_call(effect.request_id, redis_ops.promote, address))
        elif kind is MakeReplica:
            address = self._routes.get(effect.server, effect.server)
            self._submit(
                lambda: self._redis_call(
                    effect.request_id, redis_ops.make_replica, address, effect.master
                )
            )
        elif kind is WatchServer:
            self._set_watch(effect.server)
        else:
            self._perform_file(effect)

    def _perform_file(self, effect: Any) -> None:
        log.error("failover %s: unknown effect %r dropped", self.system, effect)

    def _set_watch(self, server: str | None) -> None:
        old, self._watch = self._watch, None
        if old is not None:
            old.close()
        if server is not None:
            address = self._routes.get(server, server)
            lost = self._watch_lost
            self._watch = ServerWatch(server, address, lost, REDIS_TIMEOUT).start()

    def _watch_lost(self, watch: ServerWatch) -> None:  # on the watch's thread: only tell
        self._tell_quietly(_ConnectionLost(watch))

    def _notified(self, text: str) -> None:
        pass

    def _submit(self, job: Any) -> None:
        def run() -> None:
            try:
                answer = job()
            except Exception:
                log.exception("failover %s: a Redis job failed", self.system)
                return
            self._tell_quietly(answer)

        self._pool.submit(run)

    def _redis_call(self, request_id: int, fn: Any, *args: Any) -> _RedisDone:
        key = (fn.__name__, args)
        try:
            fn(*args)
        except Exception as exc:
            self._retries.failure(
                key,
                "failover %s: %s%s failed: %s",
                self.system,
                fn.__name__,
                args,
                exc,
                level=logging.WARNING,
            )
            return _RedisDone(request_id, False)
        self._retries.success(key, "failover %s: %s%s worked", self.system, fn.__name__, args)
        return _RedisDone(request_id, True)


def _tls_contexts(tls: Mapping[str, str]) -> TlsContexts:
    """The contexts for `tls` ({certfile, keyfile, cafile}); a bad one fails at construction,
    in the caller's thread, naming the key (TlsFileError)."""
    missing = [k for k in ("certfile", "keyfile", "cafile") if not tls.get(k)]
    if missing or set(tls) - {"certfile", "keyfile", "cafile"}:
        raise ValueError(
            f"tls: expected {{certfile, keyfile, cafile}} (paths to PEM files); got {dict(tls)!r}"
        )
    return TlsContexts(TlsFiles(Path(tls["certfile"]), Path(tls["keyfile"]), Path(tls["cafile"])))


class ConfigurationServer(_FailoverShell[ConfigurationServerCore]):
    """The RCS of one failover system (Beetle's RedisConfigurationServer), supervised.

    `master_file`: the RCS's own record of the master, to start from after a restart.
    `http`: "host:port" of the status page (Beetle's, port 0 for any); None for none.
    `elector`: a Gossip ref to elect the active RCS among several candidates; None: active.
    `tls`: {certfile, keyfile, cafile} (a node's `tls:` section): the status page is HTTPS.
    `redis_addresses`: {server: "host:port"} for servers this host reaches at another address
    than their name (a fault proxy on this host's path only); the names stay the identities.
    Other keyword options go to ConfigurationServerCore (master_retries, master_retry_interval,
    client_timeout, ...).
    """

    def __init__(
        self,
        bus: str | Bus,
        system: str,
        redis_servers: Sequence[str],
        client_ids: Iterable[str],
        *,
        node: str | None = None,
        master_file: str | Path | None = None,
        http: str | None = None,
        http_token: str | None = None,
        elector: Any = None,
        monitor: Any = None,
        takeover_after: float | None = None,
        exchange: str = "rabbitry",
        tls: Mapping[str, str] | None = None,
        redis_addresses: dict[str, str] | None = None,
        **core_options: Any,
    ) -> None:
        server_id = core_options.pop("server_id", None) or (node or f"rcs-{system}")
        super().__init__(bus, system, node or server_id, exchange, redis_addresses)
        self._servers = list(redis_servers)
        self._client_ids = list(client_ids)
        self._server_id = server_id
        self._file = RedisMasterFile(master_file, system) if master_file else None
        self._http_spec = http
        self._http_token = http_token
        self._http: StatusServer | None = None
        self._tls = _tls_contexts(tls) if tls is not None else None
        self._elector = elector
        self._monitor = monitor
        # a standby stands for election when no active RCS has spoken for this long (the
        # active one re-sends reconfigure every reconfigure_interval)
        self._takeover_after = takeover_after or 3 * float(
            core_options.get("reconfigure_interval", 10.0)
        )
        self._last_active_heard = time.time()
        self._electing = False
        self._paused = False
        self._core_options = core_options
        self.notifications: list[tuple[float, str]] = []
        self.route(_RedisDone, self._on_redis_done)
        self.route(_ConnectionLost, self._on_connection_lost)
        self.route(_Won, self._on_won)
        self.route(_ElectionOver, self._on_election_over)
        self.route(NodeEvent, self._on_node_event)
        client_timeout = float(core_options.get("client_timeout", 2.0))
        if client_timeout <= REDIS_TIMEOUT + 0.5:
            # each RCC checks the master (up to REDIS_TIMEOUT on a hung one) before it
            # answers invalidate: a shorter wait cancels every round against a hung master
            log.warning(
                "failover %s: client_timeout %.2f s leaves the clients no time to check a hung "
                "master (up to %.1f s); use more than %.1f s",
                system,
                client_timeout,
                REDIS_TIMEOUT,
                REDIS_TIMEOUT + 0.5,
            )
        # constructing the core checks the configuration (fewer than 2 servers, ...) now, in
        # the caller's thread, so that a bad config fails `start()` with its message
        ConfigurationServerCore(system, self._servers, self._client_ids, **core_options)

    def on_start(self) -> None:
        master = self._file.read() if self._file is not None else None
        self.core = ConfigurationServerCore(
            self.system,
            self._servers,
            self._client_ids,
            server_id=self._server_id,
            master=master,
            active=self._elector is None,
            **self._core_options,
        )
        self._connect()
        if self._http_spec:
            host, _, port_text = self._http_spec.rpartition(":")
            if not port_text.isdigit():
                raise ValueError(f"http: expected host:port, got {self._http_spec!r}")
            host, port = host.strip("[]") or "127.0.0.1", int(port_text)  # port 0: any
            self._http = StatusServer(
                host,
                port,
                self._status_from_http,
                self._switch_from_http,
                tls=self._tls.https_server if self._tls is not None else None,
                switch_token=self._http_token,
            )
            self._http.start()
            scheme = "https" if self._tls is not None else "http"
            log.info(
                "failover %s: status page on %s://%s:%d/", self.system, scheme, *self._http.address
            )
        self._perform(self.core.start(time.time()))
        if self._monitor is not None:
            monitor = self._monitor.proxy()
            monitor.subscribe(self.actor_ref).get(timeout=10)
            self._paused = bool(monitor.is_paused().get(timeout=10))
        if self._elector is not None:
            topic = self._topic
            ref = self.actor_ref
            self._elector.proxy().register_election_handler(
                topic, lambda action: ref.tell(_Won(int(action["term"])))
            ).get(timeout=10)
            self.send_after(0.0, _ELECTION_CHECK)

    @property
    def _topic(self) -> str:
        return f"rcs.{self.system}"

    def on_stop(self) -> None:
        if self.core is not None:
            with contextlib.suppress(Exception):
                self._perform(self.core.stop(time.time()))
        if self._http is not None:
            self._http.close()
        if self._monitor is not None:
            with contextlib.suppress(Exception):
                self._monitor.proxy().unsubscribe(self.actor_ref)
        self._shutdown()

    # -- elections among RCS candidates (with an elector)

    # -- inputs beyond the bus's (BusCoreShell): Redis, the watch, elections, the node monitor

    def on_bus_message(self, message: BusIn, now: float) -> None:
        body = message.body
        if (
            isinstance(body, dict)
            and body.get("type") in _FROM_ACTIVE
            and body.get("sender") != self._server_id
        ):
            self._last_active_heard = now  # an active RCS (another one) is alive
        super().on_bus_message(message, now)

    def _on_redis_done(self, message: _RedisDone, now: float) -> None:
        self._perform(self._core().redis_done(message.request_id, message.ok, now))

    def _on_connection_lost(self, message: _ConnectionLost, now: float) -> None:
        if message.watch is self._watch:
            self._perform(self._core().connection_lost(message.watch.server, now))

    def on_other(self, message: Any, now: float) -> Any:
        if message == _ELECTION_CHECK:
            self._maybe_stand(now)
            self.send_after(1.0, _ELECTION_CHECK)
            return None
        return super().on_other(message, now)

    def _on_election_over(self, message: _ElectionOver, now: float) -> None:
        self._electing = False

    def _on_won(self, message: _Won, now: float) -> None:
        core = self._core()
        self._electing = False
        if self._paused:
            log.warning(
                "failover %s: won term %d while paused; not acting", self.system, message.term
            )
        elif message.term > core.highest_term or not core.active:
            log.warning("failover %s: this RCS is active now (term %d)", self.system, message.term)
            self._perform(core.set_active(True, message.term, now))

    def _on_node_event(self, message: NodeEvent, now: float) -> None:
        """The node monitor's decisions: a paused node (a minority) stands by."""
        core = self._core()
        if message.event == "paused":
            self._paused = True
            if core.active:
                log.warning("failover %s: the node paused (minority): standing by", self.system)
                self._perform(core.set_active(False, core.term, now))
        elif message.event == "resumed":
            self._paused = False

    def _maybe_stand(self, now: float) -> None:
        core = self.core
        assert core is not None
        if core.active or self._paused or self._electing:
            return
        if now - self._last_active_heard < self._takeover_after:
            return
        term = core.highest_term + 1
        self._electing = True
        eid = f"rcs:{self.system}:{term}"
        elector, ref = self._elector, self.actor_ref

        def run() -> None:
            from monitors.gossip import ElectionError, elect

            try:
                winner = elect(elector, eid, self._topic, {"term": term}, timeout=10.0)
                log.info("failover %s: %s is the active RCS for term %d", self.system, winner, term)
            except ElectionError as exc:
                log.warning(
                    "failover %s: RCS election for term %d failed: %s", self.system, term, exc
                )
            with contextlib.suppress(Exception):
                ref.tell(_ElectionOver())

        self._last_active_heard = now  # give the winner time to speak before standing again
        threading.Thread(target=run, name=f"rcs-election-{term}", daemon=True).start()

    # -- the API (through the actor)

    def status(self) -> dict[str, Any]:
        assert self.core is not None
        status = dict(self.core.status(time.time()))
        status["notifications"] = [text for _, text in self.notifications[-20:]]
        # Beetle's remaining keys: its version (ours) and the brokers (the bus, no password)
        status.setdefault("beetle_version", _version())
        status.setdefault("configured_brokers", [_redacted(self._bus_spec)])
        return status

    def initiate_master_switch(self, master_down: bool = False) -> bool:
        """Beetle's accelerated switch: True if a switch started (the master is down).
        `master_down`: a live check (see `check_and_switch`) just found it down."""
        assert self.core is not None
        started, effects = self.core.initiate_master_switch(time.time(), master_down)
        self._perform(effects)
        return started

    def set_active(self, active: bool, term: int) -> None:
        """Made active (with the election's term) or deposed; see the module docstring."""
        assert self.core is not None
        self._perform(self.core.set_active(active, term, time.time()))

    def http_address(self) -> tuple[str, int] | None:
        return self._http.address if self._http is not None else None

    # -- http (its own threads: through the actor)

    def _status_from_http(self) -> dict[str, Any]:
        return self.actor_ref.proxy().status().get(timeout=5)

    def _switch_from_http(self) -> bool:
        """Check the master now, as Beetle does when asked (on the HTTP thread: a dead server
        takes up to the Redis timeout), then let the core decide."""
        master = self._status_from_http().get("redis_master")
        down = isinstance(master, str) and bool(master) and redis_ops.is_master(master) is not True
        return self.actor_ref.proxy().initiate_master_switch(down).get(timeout=5)

    # -- effects

    def _perform_file(self, effect: Any) -> None:
        if type(effect) is SetMaster:
            if self._file is not None:
                self._file.write(effect.server)
        else:
            super()._perform_file(effect)

    def _notified(self, text: str) -> None:
        """Keep it for the status page, and publish Beetle's system_notification."""
        self.notifications.append((time.time(), text))
        del self.notifications[:-100]
        if self.bus is not None and self.core is not None:
            name = "system_notification"
            body = m.build(self.system, name, self._server_id, self.core.token, message=text)
            with contextlib.suppress(BusError):
                self.bus.publish(m.routing_key(self.system, name), body)


class ConfigurationClient(_FailoverShell[ConfigurationClientCore]):
    """The RCC of one failover system on one worker host (Beetle's
    RedisConfigurationClient): keeps this host's master file, which FailoverRedis reads."""

    def __init__(
        self,
        bus: str | Bus,
        system: str,
        client_id: str,
        master_file: str | Path,
        *,
        exchange: str = "rabbitry",
        multi_set: bool = False,
        redis_addresses: dict[str, str] | None = None,
        **core_options: Any,
    ) -> None:
        super().__init__(bus, system, client_id, exchange, redis_addresses)
        self.client_id = m.check_id("client id", client_id)
        # multi_set: the file is shared by the RCCs of several failover sets on this host and
        # holds one `system/host:port` line each (Beetle >= 2.3); a plain `host:port` line
        # would apply to every set
        self._file = RedisMasterFile(master_file, system, multi_set=multi_set)
        self._core_options = core_options
        ConfigurationClientCore(system, client_id, **core_options)  # check the options now

    def on_start(self) -> None:
        self.core = ConfigurationClientCore(self.system, self.client_id, **self._core_options)
        self._connect()
        self._perform(self.core.start(time.time()))

    def on_stop(self) -> None:
        if self.core is not None:
            with contextlib.suppress(Exception):
                self._perform(self.core.stop(time.time()))
        self._shutdown()

    def status(self) -> dict[str, Any]:
        assert self.core is not None
        return {**self.core.status(), "master_file": str(self._file.path)}

    def _perform_file(self, effect: Any) -> None:
        kind = type(effect)
        if kind is WriteMasterFile:
            self._file.write(effect.server)
        elif kind is ReadMasterFile:
            core = self.core
            assert core is not None  # effects come from the core, so it exists
            self._perform(core.master_file_read(self._file.read(), time.time()))
        else:
            super()._perform_file(effect)
