"""FailoverRedis: a redis-py client that only ever talks to the master the master file names.

Design (why a subclass, and why it looks like this):

- It subclasses `redis.Redis`, so every command method (`set`, `get`, `incr`, `delete`, `lock`,
  scripts, ...) exists and type checks pass, and overrides `execute_command`, through which all
  of them go. The facade's OWN connection pool refuses to connect: anything in redis-py that
  bypasses `execute_command` fails loudly instead of quietly talking to localhost:6379.
- Before each command it resolves the master from the file (one stat() when nothing changed)
  and uses one connection pool per master address. A pool whose address the file no longer
  names is disconnected and forgotten.
- Every connection is a guarded one: just before ANY bytes go out (the command, a pipeline,
  the connect handshake, WAIT) it re-reads the file and refuses to send if the file no longer
  names its server. The only window left is between that stat() and the socket write (see
  docs/failover-client.md).
- A connection failure (ConnectionError, TimeoutError), READONLY (the server became a
  replica) or MASTERDOWN is retried: re-resolve at once, and if the file still names the same
  server, retry every `retry_interval` until `failover_timeout`, then NoRedisMaster. A new
  name in the file ends the wait at once. redis-py's own retries are off: a silent reconnect to
  the same address is what this class exists to prevent.
- `wait_replicas=N` runs WAIT N on the SAME connection right after each write (WAIT counts
  acknowledgements of that connection's writes), and raises ReplicationError when fewer
  replicas acknowledged, so the caller never counts a non-durable write as done.

Not supported (they would pin one server for a long time): pubsub(), monitor(), client().
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import redis
from redis.client import Pipeline
from redis.connection import Connection, ConnectionPool, SSLConnection
from redis.exceptions import (
    AuthenticationError,
    AuthorizationError,
    BusyLoadingError,
    MasterDownError,
    ReadOnlyError,
    ResponseError,
    WatchError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from failover.errors import FailoverError, NoRedisMaster, ReplicationError
from failover.master_file import RedisMasterFile
from failover.redis_ops import no_retry, parse_address

log = logging.getLogger(__name__)

T = TypeVar("T")

_POLL = 0.05  # seconds between looks at the master file while waiting for a retry

# Errors after which the same call is tried again (on whatever the file names by then).
_RETRYABLE = (RedisConnectionError, RedisTimeoutError, ReadOnlyError, MasterDownError)
# Misconfiguration, not failover: waiting failover_timeout would only hide it.
_FATAL = (AuthenticationError, AuthorizationError)
# Errors that end a request/reply cleanly: the connection can go back to its pool.
_CLEAN = (ResponseError, FailoverError, WatchError)
# Errors that prove the command was NOT applied, whatever was sent.
_NOT_APPLIED = (ReadOnlyError, MasterDownError, BusyLoadingError)

# Commands that never change data, so need no WAIT. Anything not listed (including unknown and
# module commands, EVAL, FCALL) is treated as a write: an extra WAIT costs a round trip, a
# missing one could acknowledge a write no replica has.
_NO_WAIT_NAMES = """
    GET MGET GETRANGE SUBSTR STRLEN LCS EXISTS TYPE TTL PTTL EXPIRETIME PEXPIRETIME KEYS SCAN
    RANDOMKEY DBSIZE DUMP OBJECT TOUCH GETBIT BITCOUNT BITPOS BITFIELD_RO
    HGET HMGET HGETALL HKEYS HVALS HLEN HEXISTS HSTRLEN HSCAN HRANDFIELD HTTL HPTTL
    LRANGE LLEN LINDEX LPOS SMEMBERS SISMEMBER SMISMEMBER SCARD SRANDMEMBER SSCAN SINTER
    SINTERCARD SUNION SDIFF ZRANGE ZRANGEBYSCORE ZREVRANGE ZREVRANGEBYSCORE ZRANGEBYLEX
    ZREVRANGEBYLEX ZSCORE ZMSCORE ZCARD ZCOUNT ZLEXCOUNT ZRANK ZREVRANK ZSCAN ZRANDMEMBER
    ZINTER ZINTERCARD ZUNION ZDIFF XRANGE XREVRANGE XLEN XREAD XINFO XPENDING
    GEOPOS GEODIST GEOHASH GEORADIUS_RO GEORADIUSBYMEMBER_RO GEOSEARCH
    EVAL_RO EVALSHA_RO FCALL_RO PING ECHO TIME INFO LASTSAVE ROLE COMMAND CLIENT CONFIG
    SLOWLOG LATENCY MEMORY SCRIPT WAIT WAITAOF SELECT HELLO AUTH READONLY READWRITE
"""
_NO_WAIT = frozenset(_NO_WAIT_NAMES.split())

# set_once after an ambiguous failure: the key may hold OUR value from the earlier attempt.
# Then it is ours; it is rewritten (same value, same TTL) so that WAIT covers it on this
# connection. KEEPTTL needs Redis >= 6.0.
_CLAIM_AGAIN = """
local v = redis.call('GET', KEYS[1])
if not v then
  if tonumber(ARGV[2]) > 0 then
    redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
  else
    redis.call('SET', KEYS[1], ARGV[1])
  end
  return 1
end
if v == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'XX', 'KEEPTTL')
  return 1
end
return 0
"""

# Redis() keyword arguments that would defeat the routing, with the reason.
_REFUSED_KWARGS = {
    "host": "the master's address comes from the master file",
    "port": "the master's address comes from the master file",
    "unix_socket_path": "the master file names host:port addresses",
    "connection_pool": "FailoverRedis keeps one pool per master address itself",
    "single_connection_client": "a single connection would stay on one server across failovers",
    "retry": "FailoverRedis does its own retries (retry_interval, failover_timeout)",
    "retry_on_timeout": "FailoverRedis does its own retries (retry_interval, failover_timeout)",
    "retry_on_error": "FailoverRedis does its own retries (retry_interval, failover_timeout)",
    "cache": "client-side caching would serve values of a master that is gone",
    "cache_config": "client-side caching would serve values of a master that is gone",
}

_GET_CONNECTION_NEEDS_NAME = (
    inspect.signature(ConnectionPool.get_connection).parameters["command_name"].default
    is inspect.Parameter.empty
    if "command_name" in inspect.signature(ConnectionPool.get_connection).parameters
    else False
)


class _MasterMoved(RedisConnectionError):
    """Raised by a guarded connection instead of sending: the file names another server now.
    A ConnectionError subclass so redis-py cleans the connection up as after any send error."""


def _command_name(args: Iterable[Any]) -> str:
    first = next(iter(args), "")
    if isinstance(first, bytes):
        first = first.decode("ascii", errors="replace")
    return str(first).split(" ", 1)[0].upper()


def _names(master_file: RedisMasterFile, address: str) -> bool:
    """The guard: does the file still name `address`? (A function, not a bound method, so the
    pools do not keep the FailoverRedis alive.)"""
    return master_file.read() == address


class _GuardMixin:
    """Checks the master file before every send; counts sends so a failure can be told apart:
    nothing of ours sent (safe to retry) or something sent (the command may have run)."""

    def __init__(
        self, *args: Any, failover_guard: Callable[[], bool] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.failover_guard = failover_guard
        self.failover_sends = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        guard = self.failover_guard
        if guard is not None and not guard():
            where = f"{getattr(self, 'host', '?')}:{getattr(self, 'port', '?')}"
            raise _MasterMoved(f"{where} is no longer the master named by the master file")
        self.failover_sends += 1
        super().send_packed_command(command, check_health)  # type: ignore[misc]


class _GuardedConnection(_GuardMixin, Connection):
    pass


class _GuardedSSLConnection(_GuardMixin, SSLConnection):
    pass


class _NoDirectPool(ConnectionPool):
    """The facade's own pool: it exists so redis-py's machinery works (encoder, response
    callbacks), and refuses to connect, so nothing can bypass the master file."""

    def get_connection(self, *args: Any, **kwargs: Any) -> Connection:
        raise FailoverError(
            "FailoverRedis: this operation would bypass the master file (it uses the client's "
            "own connection pool); use commands, pipeline() or transaction() instead"
        )


class _Pin:
    """The `connection_pool` a pipeline sees. Pipelines here always run on a connection that
    was checked out for them; `hold` defers giving it back so WAIT can run on it after EXEC."""

    def __init__(self) -> None:
        self.pool: ConnectionPool | None = None
        self.hold = False

    def get_connection(self, *args: Any, **kwargs: Any) -> Connection:
        raise FailoverError("FailoverRedis internal error: pipeline has no pinned connection")

    def release(self, connection: Connection) -> None:
        if self.hold or self.pool is None:
            return
        pool, self.pool = self.pool, None
        pool.release(connection)


_HELD = _Pin()
_HELD.hold = True  # for one-shot pipelines: the attempt gives the connection back


def _checkout(pool: ConnectionPool) -> _GuardedConnection | _GuardedSSLConnection:
    # redis-py < 5.3 wants a command name
    conn = pool.get_connection("_") if _GET_CONNECTION_NEEDS_NAME else pool.get_connection()
    assert isinstance(conn, _GuardedConnection | _GuardedSSLConnection), "an unguarded pool"
    return conn


class _Attempt:
    """One try of one call on one master address."""

    def __init__(self, address: str, pool: ConnectionPool, after_ambiguous: bool) -> None:
        self.address = address
        self.pool = pool
        self.after_ambiguous = after_ambiguous  # an earlier try may have applied the command
        self.connection: Any = None
        self._base = 0
        self._sent = False

    def connect(self) -> Connection:
        """Check out a connected connection (the handshake is not counted as sent)."""
        conn = _checkout(self.pool)
        self.connection, self._base = conn, conn.failover_sends
        return conn

    def sent(self) -> bool:
        """Did anything of this try go out (so the command may have run)?"""
        conn = self.connection
        return self._sent if conn is None else conn.failover_sends > self._base

    def release(self, dirty: bool) -> None:
        self._sent = self.sent()
        conn, self.connection = self.connection, None
        if conn is None:
            return
        if dirty:
            conn.disconnect()  # never give a possibly half-read connection back
        self.pool.release(conn)


class FailoverRedis(redis.Redis):
    """A redis.Redis that sends each command to the master named by a RedisMasterFile.

    `master_file` is a RedisMasterFile or a path (then `system` picks the failover set).
    `failover_timeout` (Beetle's redis_failover_timeout, 180 s) bounds how long one call waits
    for a usable master; `retry_interval` (Beetle sleeps 1 s) is the pause between tries on the
    same address. `wait_replicas`/`wait_timeout`: see the module doc. Other keyword arguments
    are redis.Redis connection options (password, username, decode_responses, ssl, ...).
    """

    def __init__(
        self,
        master_file: RedisMasterFile | str,
        *,
        system: str = "system",
        db: int = 0,
        failover_timeout: float = 180.0,
        retry_interval: float = 1.0,
        wait_replicas: int = 0,
        wait_timeout: float = 1.0,
        socket_timeout: float | None = 5.0,
        socket_connect_timeout: float | None = 1.0,
        **redis_kwargs: Any,
    ) -> None:
        for name, why in _REFUSED_KWARGS.items():
            if name in redis_kwargs:
                raise TypeError(f"FailoverRedis does not take {name}=: {why}")
        if failover_timeout < 0 or retry_interval <= 0:
            raise ValueError(
                "FailoverRedis: failover_timeout must be >= 0 and retry_interval > 0 (seconds), "
                f"got {failover_timeout!r} and {retry_interval!r}"
            )
        if not isinstance(wait_replicas, int) or wait_replicas < 0:
            raise ValueError(
                f"FailoverRedis: wait_replicas must be an int >= 0, got {wait_replicas!r}"
            )
        if wait_replicas and not wait_timeout > 0:
            raise ValueError(
                f"FailoverRedis: wait_timeout must be > 0 s (WAIT 0 blocks forever), got {wait_timeout!r}"
            )
        if wait_replicas and socket_timeout is not None and socket_timeout <= wait_timeout:
            raise ValueError(
                f"FailoverRedis: socket_timeout ({socket_timeout} s) must exceed wait_timeout "
                f"({wait_timeout} s), or every WAIT would time out on the socket first"
            )
        if isinstance(master_file, RedisMasterFile):
            self.master_file = master_file
        else:
            self.master_file = RedisMasterFile(master_file, system)
        self.failover_timeout = float(failover_timeout)
        self.retry_interval = float(retry_interval)
        self.wait_replicas = wait_replicas
        self.wait_timeout = float(wait_timeout)
        self._wait_ms = max(1, round(self.wait_timeout * 1000))
        use_ssl = bool(redis_kwargs.pop("ssl", False))
        self._connection_class = _GuardedSSLConnection if use_ssl else _GuardedConnection
        self._max_connections = redis_kwargs.pop("max_connections", None)
        self._connection_kwargs: dict[str, Any] = {
            "db": db,
            "socket_timeout": socket_timeout,
            "socket_connect_timeout": socket_connect_timeout,
            **redis_kwargs,
        }
        # Build (not connect) one connection now: a misspelt option fails here, not at the
        # first command in production.
        self._connection_class(**self._pool_kwargs("127.0.0.1:6379"))
        self._pools: dict[str, ConnectionPool] = {}
        self._lock = threading.Lock()
        super().__init__(connection_pool=_NoDirectPool(retry=no_retry(), **self._connection_kwargs))

    def __repr__(self) -> str:
        return (
            f"FailoverRedis({self.master_file!r}, failover_timeout={self.failover_timeout}, "
            f"wait_replicas={self.wait_replicas})"
        )

    @property
    def current_master(self) -> str | None:
        """What the file names now ("host:port" or None); the next command goes there."""
        return self.master_file.read()

    # -- pools -------------------------------------------------------------------------------

    def _pool_kwargs(self, address: str) -> dict[str, Any]:
        host, port = parse_address(address)
        return {
            **self._connection_kwargs,
            "host": host,
            "port": port,
            "retry": no_retry(),
            "failover_guard": functools.partial(_names, self.master_file, address),
        }

    def _pool_for(self, address: str) -> ConnectionPool:
        """The pool of `address`, made on first use; pools of other addresses are dropped."""
        with self._lock:
            pool = self._pools.get(address)
            if pool is not None:
                return pool
            retired = list(self._pools.values())
            pool = ConnectionPool(
                connection_class=self._connection_class,
                max_connections=self._max_connections,
                **self._pool_kwargs(address),
            )
            self._pools = {address: pool}
        for old in retired:
            old.disconnect(inuse_connections=False)  # in-use ones are closed on release
        return pool

    def _retire_all(self) -> None:
        with self._lock:
            retired, self._pools = list(self._pools.values()), {}
        for old in retired:
            old.disconnect(inuse_connections=False)

    def _give_back(self, attempt: _Attempt, dirty: bool) -> None:
        attempt.release(dirty)
        if self._pools.get(attempt.address) is not attempt.pool:
            attempt.pool.disconnect(inuse_connections=False)  # retired while we used it

    def close(self) -> None:
        """Disconnect from every server; the client stays usable (pools are made again)."""
        lock = getattr(self, "_lock", None)
        if lock is not None:
            self._retire_all()
        super().close()

    # -- the retry loop ----------------------------------------------------------------------

    def _run(self, what: str, call: Callable[[_Attempt], T]) -> T:
        """Run `call` on the current master until it works, a non-failover error escapes, or
        `failover_timeout` has passed (then NoRedisMaster)."""
        start = time.monotonic()
        deadline = start + self.failover_timeout
        ambiguous = False
        last_error: BaseException | None = None
        failures = 0
        while True:
            address = self.master_file.read()
            if address is None:
                self._retire_all()
                last_error = None
                if failures == 0:
                    log.warning(
                        "FailoverRedis: %s names no master; %s waits up to %.1f s",
                        self.master_file.path,
                        what,
                        self.failover_timeout,
                    )
            else:
                attempt = _Attempt(address, self._pool_for(address), ambiguous)
                dirty = True  # until we know the connection ended a clean request/reply
                try:
                    result = call(attempt)
                    dirty = False
                    return result
                except _FATAL:
                    raise
                except _CLEAN as exc:
                    dirty = False  # a reply came back whole; the connection is fine
                    if not isinstance(exc, _RETRYABLE):
                        raise
                    last_error = exc
                except _RETRYABLE as exc:
                    last_error = exc
                finally:
                    self._give_back(attempt, dirty)
                if attempt.sent() and not isinstance(last_error, _NOT_APPLIED):
                    ambiguous = True
                if not isinstance(last_error, _MasterMoved):
                    log.log(
                        logging.WARNING if failures == 0 else logging.INFO,
                        "FailoverRedis: %s on %s failed (%s); retrying until a master "
                        "answers or %.1f s have passed",
                        what,
                        address,
                        last_error,
                        self.failover_timeout,
                    )
            failures += 1
            now = time.monotonic()
            if now >= deadline:
                raise NoRedisMaster(str(self.master_file.path), now - start, address, last_error)
            self._pause(address, min(deadline, now + self.retry_interval))

    def _pause(self, address: str | None, until: float) -> None:
        """Sleep until `until`, but return as soon as the file names a different master."""
        while True:
            now = time.monotonic()
            if now >= until:
                return
            current = self.master_file.read()
            if current is not None and current != address:
                return
            time.sleep(min(_POLL, until - now))

    def _wait_for_master(self) -> str:
        """The named master, waiting up to failover_timeout for the file to name one."""
        start = time.monotonic()
        while True:
            address = self.master_file.read()
            if address is not None:
                return address
            now = time.monotonic()
            if now >= start + self.failover_timeout:
                raise NoRedisMaster(str(self.master_file.path), now - start, None, None)
            self._pause(None, min(start + self.failover_timeout, now + self.retry_interval))

    # -- one command -------------------------------------------------------------------------

    def execute_command(self, *args: Any, **options: Any) -> Any:
        """Send one command to the master the file names (see the class doc for retries)."""
        return self._run(_command_name(args), lambda attempt: self._once(attempt, args, options))

    def _once(self, attempt: _Attempt, args: tuple[Any, ...], options: dict[str, Any]) -> Any:
        """One round trip: the command, and WAIT after it on the same connection if needed."""
        conn = attempt.connect()
        pipe = Pipeline(_HELD, self.response_callbacks, False, None)  # type: ignore[arg-type]
        pipe.connection = conn
        wait = self._needs_wait([args])
        pipe.pipeline_execute_command(*args, **options)
        if wait:
            pipe.pipeline_execute_command("WAIT", self.wait_replicas, self._wait_ms)
        results = pipe.execute(raise_on_error=False)
        if isinstance(results[0], Exception):
            raise results[0]
        if wait:
            self._check_wait(attempt.address, _command_name(args), results[1])
        return results[0]

    def _needs_wait(self, commands: Iterable[tuple[Any, ...]]) -> bool:
        return self.wait_replicas > 0 and any(_command_name(a) not in _NO_WAIT for a in commands)

    def _check_wait(self, address: str, command: str, acked: Any) -> None:
        if isinstance(acked, Exception):
            raise ReplicationError(address, command, self.wait_replicas, None, str(acked))
        if int(acked) < self.wait_replicas:
            raise ReplicationError(address, command, self.wait_replicas, int(acked))

    def _wait_on(self, conn: Connection, address: str, command: str) -> None:
        """WAIT on `conn` after a pipeline or transaction (WAIT inside MULTI cannot block)."""
        conn.send_command("WAIT", self.wait_replicas, self._wait_ms)
        try:
            acked = conn.read_response()
        except ResponseError as exc:
            acked = exc
        self._check_wait(address, command, acked)

    # -- claims ------------------------------------------------------------------------------

    def set_once(self, key: Any, value: Any, ex: int | None = None) -> bool:
        """Claim `key`: SET key value NX [EX ex], with WAIT when wait_replicas > 0.

        True means the key is ours and (with wait_replicas) that many replicas have it. False
        means someone else holds it. `value` should identify the claimant (worker id + message
        id): when a try failed after it was sent, the retry takes a key that already holds
        exactly `value` as our own earlier claim, instead of reporting it as someone else's.
        """
        if ex is not None and (not isinstance(ex, int) or ex <= 0):
            raise ValueError(f"set_once: ex must be a positive int (seconds), got {ex!r}")

        def claim(attempt: _Attempt) -> bool:
            if attempt.after_ambiguous:
                args: tuple[Any, ...] = ("EVAL", _CLAIM_AGAIN, 1, key, value, ex or 0)
            else:
                args = ("SET", key, value, "NX", *(("EX", ex) if ex else ()))
            return bool(self._once(attempt, args, {}))

        return self._run("SET NX", claim)

    # -- pipelines and transactions ----------------------------------------------------------

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> FailoverPipeline:
        """A pipeline whose execute() follows the master file like a single command."""
        return FailoverPipeline(self, transaction, shard_hint)

    def transaction(self, func: Callable[[Pipeline], Any], *watches: Any, **kwargs: Any) -> Any:
        """redis-py's WATCH/MULTI/EXEC helper, re-run from the start after a failover error
        (`func` is already written to be re-run: redis-py re-runs it on WatchError)."""
        return self._run(
            "transaction", lambda _attempt: redis.Redis.transaction(self, func, *watches, **kwargs)
        )

    # -- what is refused ---------------------------------------------------------------------

    def pubsub(self, **kwargs: Any) -> Any:
        raise NotImplementedError(
            "FailoverRedis.pubsub(): a subscription would stay on one server across a "
            "failover; subscribe with a plain redis.Redis to current_master and re-subscribe "
            "when it changes"
        )

    def monitor(self) -> Any:
        raise NotImplementedError("FailoverRedis.monitor(): use a plain redis.Redis")

    def client(self) -> Any:
        raise NotImplementedError(
            "FailoverRedis.client(): a single connection would stay on one server across a failover"
        )


class FailoverPipeline(Pipeline):
    """A redis-py Pipeline for FailoverRedis.

    Without WATCH, execute() is one call of the failover loop: the buffered commands are sent
    to the current master and, after a failover error, sent again whole (a MULTI/EXEC block
    either ran or not; a plain pipeline may have partly run, like a command that timed out).
    With WATCH, the pipeline is pinned to the master that took the WATCH and is not retried
    (a watch means nothing on another server): errors come out as redis-py raises them, and
    FailoverRedis.transaction() re-runs the whole function.
    """

    def __init__(self, owner: FailoverRedis, transaction: bool, shard_hint: Any) -> None:
        self._pin = _Pin()
        self._owner = owner
        self._address: str | None = None
        super().__init__(self._pin, owner.response_callbacks, transaction, shard_hint)  # type: ignore[arg-type]

    def immediate_execute_command(self, *args: Any, **options: Any) -> Any:
        if self.connection is None:  # WATCH: pin a connection to the current master
            address = self._owner._wait_for_master()
            pool = self._owner._pool_for(address)
            self.connection = _checkout(pool)
            self._pin.pool, self._address = pool, address
        return super().immediate_execute_command(*args, **options)

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        if self.watching or self.connection is not None:
            return self._execute_pinned(raise_on_error)
        stack = list(self.command_stack)
        if not stack:
            return []
        scripts, explicit = set(self.scripts), self.explicit_transaction

        def attempt(att: _Attempt) -> list[Any]:
            self.command_stack, self.scripts = list(stack), set(scripts)
            self.explicit_transaction = explicit
            self._pin.hold = True  # the attempt gives the connection back
            try:
                self.connection = att.connect()
                return self._run_batch(att.address, raise_on_error)
            finally:
                self._pin.hold = False

        try:
            return self._owner._run("pipeline", attempt)
        finally:
            self.reset()

    def _execute_pinned(self, raise_on_error: bool) -> list[Any]:
        pool, conn, address = self._pin.pool, self.connection, self._address or "?"
        self._pin.hold = True
        try:
            return self._run_batch(address, raise_on_error, conn)
        finally:
            self._pin.hold = False
            self.connection = None
            if pool is not None and conn is not None:
                pool.release(conn)
            self._pin.pool = self._address = None

    def _run_batch(self, address: str, raise_on_error: bool, conn: Any = None) -> list[Any]:
        conn = conn or self.connection
        wait = self._owner._needs_wait(args for args, _ in self.command_stack)
        # redis-py's Pipeline sets `transaction` (a bool) over Redis.transaction (a method)
        multi = self.__dict__.get("transaction") or self.explicit_transaction
        what = "MULTI/EXEC" if multi else "pipeline"
        results = Pipeline.execute(self, raise_on_error)  # releases nothing: the pin holds
        for item in results:
            if isinstance(item, ReadOnlyError | MasterDownError):
                raise item  # the server is a replica now: a failover error, not a result
        if wait:
            self._owner._wait_on(conn, address, what)
        return results
