"""Small Redis operations shared by the failover client and the RCS/RCC shells.

Every call opens its own short-lived connection with short timeouts and NO redis-py retries:
a configuration server that asks "is this server a master?" must get an answer (or None) in
about `timeout` seconds, never hang behind a dead host or a retry policy it did not choose.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 1.0  # seconds, for connect and for each reply

_EXAMPLE = '"host:port", e.g. "127.0.0.1:6379" or "[::1]:6379"'


def parse_address(address: str) -> tuple[str, int]:
    """Split "host:port" into (host, port); IPv6 hosts go in brackets ("[::1]:6379").

    Raises ValueError naming the bad value and the expected form: addresses come from files
    and command lines, where "what exactly is wrong" is the useful answer.
    """
    if not isinstance(address, str):
        raise ValueError(f"Redis address must be a string {_EXAMPLE}, got {address!r}")
    text = address.strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ValueError(f"invalid Redis address {address!r}: expected {_EXAMPLE}")
        port_text = rest[1:]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise ValueError(f"invalid Redis address {address!r}: no port; expected {_EXAMPLE}")
        if ":" in host:
            raise ValueError(
                f"invalid Redis address {address!r}: an IPv6 host must be in brackets; "
                f"expected {_EXAMPLE}"
            )
    if not host or any(c.isspace() or c in "/[]" for c in host):
        raise ValueError(f"invalid Redis address {address!r}: bad host; expected {_EXAMPLE}")
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(
            f"invalid Redis address {address!r}: port must be a number 1..65535; "
            f"expected {_EXAMPLE}"
        )
    return host, int(port_text)


def format_address(host: str, port: int) -> str:
    """The inverse of parse_address: "host:port", with brackets around an IPv6 host."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def no_retry() -> Retry:
    """A redis-py retry policy that never retries (redis-py >= 6 retries 3 times by default):
    the failover code decides when and WHERE to retry, and a silent reconnect to the same
    address is exactly what it must not have."""
    return Retry(NoBackoff(), 0)


def _client(address: str, timeout: float) -> redis.Redis:
    host, port = parse_address(address)
    return redis.Redis(
        host=host,
        port=port,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=no_retry(),
        decode_responses=True,
        single_connection_client=True,
    )


REFUSED = "refused"  # the host refused the connection: nothing listens (the process is gone)
NO_ANSWER = "no answer"  # no answer in time, a reset, or an error reply


def replication_info(address: str, timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any] | None:
    """INFO replication of one server, normalised; None if it cannot be asked.

    Keys: address, role ("master" or "slave", as Redis says), master_host, master_port,
    master_address, master_link_status ("up"/"down"), slave_repl_offset (replicas),
    master_repl_offset, master_replid, and connected_slaves: a list of dicts with address,
    ip, port, state, offset and lag. Keys a role does not have are None. `raw` holds
    redis-py's parsed INFO section for anything else.

    None means unreachable, or an answer that was an error (LOADING, auth, ...), which is
    logged: for choosing a master both mean "not usable now". `probe_replication` also says
    which kind of unreachable.
    """
    info = probe_replication(address, timeout)
    return info if isinstance(info, dict) else None


def probe_replication(address: str, timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any] | str:
    """replication_info's dict, or why there is none: REFUSED when the connection was refused
    (the server's host says nothing listens on the port: a dead process, not a hung one or a
    lost link), NO_ANSWER for everything else (timeout, reset, an error reply)."""
    try:
        with _client(address, timeout) as client:
            raw = client.info("replication")
    except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
        log.debug("replication_info(%s): unreachable: %s", address, exc)
        return REFUSED if _refused(exc) else NO_ANSWER
    except RedisError as exc:
        log.warning("replication_info(%s): the server answered with an error: %s", address, exc)
        return NO_ANSWER
    return _normalise(address, raw)


def _refused(exc: BaseException) -> bool:
    """Whether a connect failed with ECONNREFUSED (redis-py wraps it in its ConnectionError,
    keeping the OSError as the context)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, ConnectionRefusedError):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _normalise(address: str, raw: dict[str, Any]) -> dict[str, Any]:
    host = raw.get("master_host")
    port = _int_or_none(raw.get("master_port"))
    slaves = []
    for index in range(_int_or_none(raw.get("connected_slaves")) or 0):
        entry = raw.get(f"slave{index}")
        if not isinstance(entry, dict):
            continue
        ip, sport = entry.get("ip"), _int_or_none(entry.get("port"))
        slaves.append(
            {
                "address": format_address(str(ip), sport) if ip and sport else None,
                "ip": ip,
                "port": sport,
                "state": entry.get("state"),
                "offset": _int_or_none(entry.get("offset")),
                "lag": _int_or_none(entry.get("lag")),
            }
        )
    return {
        "address": address,
        "role": raw.get("role"),
        "master_host": host,
        "master_port": port,
        "master_address": format_address(str(host), port) if host and port else None,
        "master_link_status": raw.get("master_link_status"),
        "slave_repl_offset": _int_or_none(raw.get("slave_repl_offset")),
        "master_repl_offset": _int_or_none(raw.get("master_repl_offset")),
        "master_replid": raw.get("master_replid"),
        "connected_slaves": slaves,
        "raw": raw,
    }


def is_master(address: str, timeout: float = DEFAULT_TIMEOUT) -> bool | None:
    """True if the server says role:master, False if it is a replica, None if unreachable."""
    info = replication_info(address, timeout)
    if info is None:
        return None
    return info["role"] == "master"


def promote(address: str, timeout: float = DEFAULT_TIMEOUT) -> None:
    """Make the server a master: REPLICAOF NO ONE (Beetle's SLAVEOF NO ONE).

    Raises redis.RedisError (ConnectionError, TimeoutError, ResponseError) when it could not
    be done: the caller is switching masters and must know that the switch did not happen.
    """
    log.warning("promoting %s to master (REPLICAOF NO ONE)", address)
    with _client(address, timeout) as client:
        client.replicaof("NO", "ONE")


def make_replica(address: str, master_address: str, timeout: float = DEFAULT_TIMEOUT) -> bool:
    """Make `address` a replica of `master_address` (REPLICAOF host port).

    Returns False, and sends nothing, if it already is one (a REPLICAOF to the same master is
    harmless in Redis, but the RCS repeats this every round and the log should stay quiet);
    True if it sent REPLICAOF. Raises redis.RedisError if the server cannot be reached or
    refuses, and ValueError for a bad address or a server asked to replicate itself.
    """
    host, port = parse_address(master_address)
    if parse_address(address) == (host, port):
        raise ValueError(f"make_replica: {address} cannot be a replica of itself")
    with _client(address, timeout) as client:
        raw = client.info("replication")
        if (
            raw.get("role") == "slave"
            and raw.get("master_host") == host
            and _int_or_none(raw.get("master_port")) == port
        ):
            return False
        log.warning(
            "making %s a replica of %s (REPLICAOF %s %s)", address, master_address, host, port
        )
        client.replicaof(host, port)
    return True
