"""redis_ops against real redis-server processes: replication info, promote, make_replica."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from failover import redis_ops
from failover.redis_ops import format_address, parse_address

Servers = Callable[..., list[Any]]

FAST_SYNC = ("--repl-diskless-sync-delay", "0")  # the default 5 s wait before a full sync


def wait_for(condition: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def link_up(replica: Any) -> bool:
    info = redis_ops.replication_info(replica.address)
    return bool(info and info["role"] == "slave" and info["master_link_status"] == "up")


# -- addresses ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:6379", ("127.0.0.1", 6379)),
        (" redis-1.internal:6380 ", ("redis-1.internal", 6380)),
        ("[::1]:7000", ("::1", 7000)),
        ("h:1", ("h", 1)),
        ("h:65535", ("h", 65535)),
    ],
)
def test_parse_address(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text) == expected
    assert parse_address(format_address(*expected)) == expected


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "no port"),
        ("redis-1", "no port"),
        ("redis-1:", "port must be"),
        ("redis-1:-5", "port must be"),
        ("redis-1:0", "port must be"),
        ("redis-1:70000", "port must be"),
        (":6379", "bad host"),
        ("::1:6379", "brackets"),
        ("[::1]6379", "expected"),
        ("a b:1", "bad host"),
        (6379, "must be a string"),
    ],
)
def test_parse_address_errors_say_what_is_wrong(text: Any, why: str) -> None:
    with pytest.raises(ValueError, match=why) as info:
        parse_address(text)
    assert '"host:port"' in str(info.value)


# -- real servers --------------------------------------------------------------------------------


@pytest.mark.redis
def test_replication_info_of_a_lone_master(redis_servers: Servers) -> None:
    (server,) = redis_servers(1)
    info = redis_ops.replication_info(server.address)
    assert info is not None
    assert info["address"] == server.address
    assert info["role"] == "master"
    assert info["connected_slaves"] == []
    assert info["master_address"] is None
    assert isinstance(info["master_repl_offset"], int)
    assert redis_ops.is_master(server.address) is True


@pytest.mark.redis
def test_unreachable_server_is_none_not_an_exception(redis_servers: Servers) -> None:
    (server,) = redis_servers(1)
    server.stop(kill=True)
    assert redis_ops.replication_info(server.address, timeout=0.2) is None
    assert redis_ops.is_master(server.address, timeout=0.2) is None
    with pytest.raises(redis.ConnectionError):
        redis_ops.promote(server.address, timeout=0.2)
    with pytest.raises(redis.ConnectionError):
        redis_ops.make_replica(server.address, "127.0.0.1:1", timeout=0.2)


@pytest.mark.redis
def test_make_replica_then_promote(redis_servers: Servers) -> None:
    master, replica = redis_servers(2, *FAST_SYNC)
    redis.Redis(port=master.port).set("before", "1")

    assert redis_ops.make_replica(replica.address, master.address) is True
    wait_for(lambda: link_up(replica), what="the replica's link to come up")
    assert redis_ops.make_replica(replica.address, master.address) is False  # already is
    assert redis_ops.is_master(replica.address) is False

    info = redis_ops.replication_info(replica.address)
    assert info is not None
    assert info["master_host"] == "127.0.0.1"
    assert info["master_port"] == master.port
    assert info["master_address"] == master.address
    assert isinstance(info["slave_repl_offset"], int)

    def replica_listed() -> dict[str, Any] | None:
        minfo = redis_ops.replication_info(master.address)
        assert minfo is not None
        online = [s for s in minfo["connected_slaves"] if s["state"] == "online"]
        return online[0] if online else None

    entry = wait_for(replica_listed, what="the master to list the replica online")
    assert entry["address"] == replica.address
    assert isinstance(entry["offset"], int) and isinstance(entry["lag"], int)
    wait_for(
        lambda: redis.Redis(port=replica.port).get("before") == b"1",
        what="the data to reach the replica",
    )

    redis_ops.promote(replica.address)
    assert redis_ops.is_master(replica.address) is True
    promoted = redis_ops.replication_info(replica.address)
    assert promoted is not None and promoted["role"] == "master"
    assert redis.Redis(port=replica.port).get("before") == b"1"
    redis.Redis(port=replica.port).set("after", "2")  # writable now
    redis_ops.promote(replica.address)  # promoting a master again is harmless


def test_a_server_cannot_replicate_itself() -> None:
    with pytest.raises(ValueError, match="itself"):
        redis_ops.make_replica("127.0.0.1:6379", "127.0.0.1:6379")
