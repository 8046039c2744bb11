"""Beetle's feature scenarios (xing/beetle features/redis_auto_failover.feature), end to end.

Real redis-server processes on free ports, the RCS and RCC actor shells on a bus (`memory://`,
and for the successful switch also a real Redis and a real RabbitMQ bus), the clients' master
files real files, and a "beetle handler" (FailoverRedis reading a client's file). Each test
waits on conditions, never on fixed sleeps, and asserts no timings.

Beetle's scenario names are kept in the test names and docstrings; where our RCS decides
differently from Beetle's by design (docs/failover.md, "What is safer than Beetle"), the
docstring says so.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from failover import (
    ConfigurationClient,
    ConfigurationServer,
    FailoverRedis,
    RedisMasterFile,
    redis_ops,
)
from failover import messages as m
from failover.http_status import BEETLE_KEYS
from monitors.bus import Bus, connect_bus
from tests.failover.fast import FAST_RCC, FAST_RCS
from tests.services import RedisServer, require_amqp, require_redis
from tests.waiting import wait_until

pytestmark = pytest.mark.slow

WAIT = 30.0  # seconds; only reached when something hung
REDIS_ARGS = ("--repl-diskless-sync-delay", "0")  # a replica syncs at once, not after 5 s
PERSISTENT = (*REDIS_ARGS, "--appendonly", "yes", "--appendfsync", "always")


# ---------------------------------------------------------------------------------- helpers


def info(server: RedisServer | str) -> dict[str, Any]:
    """INFO replication of a server ({} if unreachable)."""
    address = server if isinstance(server, str) else server.address
    return redis_ops.replication_info(address) or {}


def is_master(server: RedisServer) -> bool:
    return info(server).get("role") == "master"


def replicates(replica: RedisServer, master: RedisServer) -> bool:
    """`replica` is a replica of `master` with its link up."""
    i = info(replica)
    return (
        i.get("role") == "slave"
        and i.get("master_address") == master.address
        and i.get("master_link_status") == "up"
    )


def direct(server: RedisServer) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=5)


class Notifications:
    """Beetle's system_notification messages, as a listener on the bus hears them."""

    def __init__(self, bus: Bus, system: str) -> None:
        self.texts: list[str] = []
        self._lock = threading.Lock()
        bus.subscribe(m.routing_key(system, m.SYSTEM_NOTIFICATION), self._on)

    def _on(self, message: Any) -> None:
        with self._lock:
            self.texts.append(str(message.body.get("message")))

    def count(self, fragment: str) -> int:
        with self._lock:
            return sum(fragment in text for text in self.texts)

    def seen(self, fragment: str) -> bool:
        return self.count(fragment) > 0


@dataclass
class Beetle:
    """Everything one scenario started; the fixture stops it all afterwards."""

    make_servers: Callable[..., list[RedisServer]]
    tmp: Path
    bus: str
    exchange: str
    refs: list[Any] = field(default_factory=list)
    buses: list[Bus] = field(default_factory=list)

    def servers(self, n: int) -> list[RedisServer]:
        return self.make_servers(n, *REDIS_ARGS)

    def replicate(self, replica: RedisServer, master: RedisServer) -> None:
        redis_ops.make_replica(replica.address, master.address)
        wait_until(lambda: replicates(replica, master), f"{replica.address} to replicate", WAIT)

    def connect(self, node: str) -> Bus:
        bus = connect_bus(self.bus, node, exchange=self.exchange)
        self.buses.append(bus)
        return bus

    def client(
        self,
        client_id: str,
        path: Path | None = None,
        *,
        system: str = "system",
        bus: Bus | None = None,
        multi_set: bool = False,
    ) -> RedisMasterFile:
        """Start an RCC; returns its master file (as a worker of `system` reads it)."""
        path = path or self.tmp / f"{client_id}.master"
        self.refs.append(
            ConfigurationClient.start(
                bus or self.bus,
                system,
                client_id,
                path,
                exchange=self.exchange,
                multi_set=multi_set,
                **FAST_RCC,
            )
        )
        return RedisMasterFile(path, system)

    def server(
        self,
        servers: list[RedisServer],
        client_ids: list[str],
        *,
        system: str = "system",
        **options: Any,
    ) -> Any:
        ref = ConfigurationServer.start(
            self.bus,
            system,
            [s.address for s in servers],
            client_ids,
            master_file=self.tmp / f"rcs-{system}.master",
            http="127.0.0.1:0",
            http_token="beetle-switch-token",
            exchange=self.exchange,
            **{**FAST_RCS, **options},
        )
        self.refs.append(ref)
        return ref

    def notifications(self, system: str = "system") -> Notifications:
        return Notifications(self.connect(f"observer-{uuid.uuid4().hex[:8]}"), system)

    def standard(
        self,
        replicas: int = 1,
        clients: tuple[str, ...] = ("rc-client-1", "rc-client-2"),
        absent: tuple[str, ...] = (),
        servers: list[RedisServer] | None = None,
        **options: Any,
    ) -> Set:
        """Beetle's background: redis-1 master, redis-2 (...) its replicas, an RCS with
        `clients` configured, and an RCC for each client that is not `absent`. `servers`:
        started by the caller instead (the first is the master)."""
        servers = servers or self.servers(1 + replicas)
        master, *rest = servers
        for replica in rest:
            self.replicate(replica, master)
        notes = self.notifications()
        files = {c: self.client(c) for c in clients if c not in absent}
        rcs = self.server(servers, list(clients), **options)
        return Set(self, servers, master, rest, rcs, files, notes)


@dataclass
class Set:
    beetle: Beetle
    servers: list[RedisServer]
    master: RedisServer
    replicas: list[RedisServer]
    rcs: Any
    files: dict[str, RedisMasterFile]
    notes: Notifications

    def names(self) -> set[str | None]:
        """What the clients' master files name."""
        return {f.read() for f in self.files.values()}

    def status(self) -> dict[str, Any]:
        return self.rcs.proxy().status().get(timeout=10)

    def rcs_file(self) -> str | None:
        return RedisMasterFile(self.beetle.tmp / "rcs-system.master").read()

    def handler(self, client: str = "rc-client-1", **options: Any) -> FailoverRedis:
        """A beetle handler using the redis-master file of `client`."""
        return FailoverRedis(
            self.files[client].path, failover_timeout=WAIT, retry_interval=0.05, **options
        )


@pytest.fixture
def beetle(redis_servers, tmp_path: Path) -> Iterator[Callable[..., Beetle]]:
    made: list[Beetle] = []

    def make(bus: str = "memory") -> Beetle:
        tag = uuid.uuid4().hex[:8]
        url = {
            "memory": f"memory://beetle-{tag}",
            "redis": require_redis() if bus == "redis" else "",
            "amqp": require_amqp() if bus == "amqp" else "",
        }[bus]
        made.append(Beetle(redis_servers, tmp_path, url, f"beetle-{tag}"))
        return made[-1]

    yield make
    for b in made:
        for ref in reversed(b.refs):
            if ref.is_alive():
                ref.stop()
        for bus in b.buses:
            bus.close()


# ------------------------------------------------------------------------ the switch itself


@pytest.mark.parametrize("bus", ["memory", "redis", "amqp"])
def test_successful_redis_master_switch(beetle, bus: str) -> None:
    """Scenario: Successful redis master switch.

    redis-1 goes down; after the retries the RCS notifies that it is not available, promotes
    redis-2, records it in its own master file, both clients' files and the handler follow,
    and it notifies the switch. When redis-1 comes back (as a master, empty) it is made a
    replica of redis-2. Run on each kind of bus."""
    s = beetle(bus).standard()
    old, new = s.master, s.replicas[0]
    wait_until(lambda: s.names() == {old.address}, "both files to name redis-1", WAIT)
    durable = s.handler(wait_replicas=1)  # acknowledged by redis-2 (WAIT), so it survives
    assert durable.set("before", "1") is True
    durable.close()
    handler = s.handler()

    old.stop(kill=True)
    wait_until(
        lambda: s.notes.seen(f"Redis master '{old.address}' not available"),
        "a system notification that redis-1 is not available",
        WAIT,
    )
    wait_until(lambda: s.names() == {new.address}, "both files to name redis-2", WAIT)
    assert is_master(new)
    assert s.rcs_file() == new.address
    assert handler.set("after", "2") is True
    assert direct(new).get("after") == b"2"
    assert direct(new).get("before") == b"1"
    wait_until(
        lambda: s.notes.seen(f"Setting redis master to '{new.address}' (was '{old.address}')"),
        "a system notification of the switch",
        WAIT,
    )
    handler.close()

    old.start(*REDIS_ARGS)  # "Given a redis server redis-1 exists as master"
    wait_until(lambda: replicates(old, new), "redis-1 to become a replica of redis-2", WAIT)
    assert s.names() == {new.address}


def test_successful_redis_master_switch_with_multiple_slaves(beetle) -> None:
    """Scenario: Successful redis master switch with multiple slaves.

    redis-2 (first in the configured order) and redis-3 replicate redis-1. redis-2's link is
    cut (its replication user is disabled on redis-1, so it cannot reconnect, while INFO still
    shows it as a replica of redis-1) and writes go on, so redis-3 has the larger replication
    offset when redis-1 dies. Our RCS promotes the replica with the largest offset (Beetle
    promoted the first slave in configured order, i.e. redis-2, losing the writes); redis-2
    ends as a replica of the new master and gets the writes it missed."""
    b = beetle()
    master, lagging, ahead = b.servers(3)
    for server in (master, lagging, ahead):  # redis-2 authenticates as "lagger" wherever
        direct(server).execute_command("ACL", "SETUSER", "lagger", "on", ">pw", "~*", "&*", "+@all")
    lag = direct(lagging)
    lag.config_set("masteruser", "lagger")
    lag.config_set("masterauth", "pw")
    b.replicate(lagging, master)
    b.replicate(ahead, master)
    servers = [master, lagging, ahead]
    files = {c: b.client(c) for c in ("rc-client-1", "rc-client-2")}
    rcs = b.server(servers, list(files))
    names = lambda: {f.read() for f in files.values()}  # noqa: E731
    wait_until(lambda: names() == {master.address}, "both files to name redis-1", WAIT)
    wait_until(
        lambda: (
            rcs.proxy().status().get(timeout=10)["redis_slaves_available"]
            == [lagging.address, ahead.address]
        ),
        "the RCS to see both replicas",
        WAIT,
    )

    m1 = direct(master)
    m1.execute_command("ACL", "SETUSER", "lagger", "off")
    m1.execute_command("CLIENT", "KILL", "USER", "lagger")
    wait_until(lambda: info(lagging).get("master_link_status") == "down", "redis-2 cut", WAIT)
    handler = FailoverRedis(files["rc-client-1"].path, failover_timeout=WAIT)
    for i in range(200):
        handler.set(f"key-{i}", i)
    handler.close()
    wait_until(
        lambda: info(ahead).get("slave_repl_offset") == info(master).get("master_repl_offset"),
        "redis-3 to have every write",
        WAIT,
    )
    assert info(lagging)["slave_repl_offset"] < info(ahead)["slave_repl_offset"]
    assert info(lagging)["master_address"] == master.address  # still a slave of redis-1

    master.stop(kill=True)
    wait_until(lambda: names() == {ahead.address}, "both files to name redis-3", WAIT)
    assert is_master(ahead)
    assert not is_master(lagging)
    wait_until(lambda: replicates(lagging, ahead), "redis-2 to replicate redis-3", WAIT)
    wait_until(lambda: direct(lagging).get("key-199") == b"199", "redis-2 to catch up", WAIT)


def test_redis_master_only_temporarily_down_no_switch_necessary(beetle) -> None:
    """Scenario: Redis master only temporarily down (no switch necessary).

    The RCS sees redis-1 down, but it is back before the retries run out: nothing is
    switched, no client file was emptied, no notification went out, redis-2 stays its
    replica and the handler keeps writing to redis-1. "Down" is a master that gives no
    answer (SIGSTOP): one whose process is gone refuses connections, and is switched at once
    (issue 20.1; test_failover_partitions.py)."""
    s = beetle().standard(master_retries=1000)  # 1000 x 0.2 s: the retry timeout
    wait_until(lambda: s.names() == {s.master.address}, "both files to name redis-1", WAIT)
    assert s.master.proc is not None
    s.master.proc.send_signal(signal.SIGSTOP)
    wait_until(
        lambda: s.status()["retries"] >= 1 and not s.status()["redis_master_available"],
        "the RCS to see redis-1 down",
        WAIT,
    )
    assert s.names() == {s.master.address}  # down, but nobody was asked to stop using it
    s.master.proc.send_signal(signal.SIGCONT)
    wait_until(
        lambda: s.status()["redis_master_available"] and s.status()["retries"] == 0,
        "the RCS to see redis-1 again",
        WAIT,
    )
    wait_until(lambda: replicates(s.replicas[0], s.master), "redis-2 to resync", WAIT)
    assert is_master(s.master)
    assert s.names() == {s.master.address}
    assert s.rcs_file() == s.master.address
    assert not s.notes.seen("not available") and not s.notes.seen("Setting redis master")
    handler = s.handler()
    assert handler.set("k", "v") is True
    assert direct(s.master).get("k") == b"v"
    handler.close()


def test_not_all_redis_configuration_clients_available_no_switch_possible(beetle) -> None:
    """Scenario: Not all redis configuration clients available (no switch possible).

    rc-client-2 is configured but never runs. When redis-1 dies, every round ends without
    its pong and is cancelled; the RCS keeps watching and tries again (Beetle's "should
    continue watching after the invalidation timeout has expired"), redis-2 stays a replica,
    and rc-client-1 is never asked to stop using redis-1. Once rc-client-2 starts, the next
    round completes and redis-2 is promoted: the absent client alone blocked the switch."""
    s = beetle().standard(absent=("rc-client-2",))
    wait_until(lambda: s.names() == {s.master.address}, "rc-client-1's file", WAIT)
    assert s.status()["unseen_client_ids"] == ["rc-client-2"]
    s.master.stop(kill=True)
    cancelled = "Redis master switch cancelled: no pong from ['rc-client-2']"
    wait_until(lambda: s.notes.count(cancelled) >= 2, "two cancelled rounds", WAIT)
    assert redis_ops.is_master(s.replicas[0].address) is False
    assert s.names() == {s.master.address}
    assert s.rcs_file() == s.master.address
    assert not s.notes.seen("Setting redis master")

    s.files["rc-client-2"] = s.beetle.client("rc-client-2")
    new = s.replicas[0].address
    wait_until(lambda: s.names() == {new}, "the switch once every client is there", WAIT)
    assert redis_ops.is_master(new) is True


def test_no_redis_slave_available_to_become_new_master(beetle) -> None:
    """Scenario: No redis slave available to become new master (no switch possible).

    redis-2 and then redis-1 go down. The round completes (every client sees redis-1 down
    and empties its file) but there is no replica to promote: the RCS notifies "no slave
    available to become new master, promoting old master" and gives the clients redis-1
    back. When redis-1 returns everything resumes on it, and redis-2, back as an empty
    master, is made its replica again."""
    s = beetle().standard()
    old, replica = s.master, s.replicas[0]
    wait_until(lambda: s.names() == {old.address}, "both files to name redis-1", WAIT)
    replica.stop(kill=True)
    old.stop(kill=True)
    wait_until(
        lambda: s.notes.seen(
            "Redis master could not be switched, no slave available to become new master, "
            f"promoting old master '{old.address}'"
        ),
        "the no-slave notification",
        WAIT,
    )
    wait_until(lambda: s.names() == {old.address}, "the files to name redis-1 again", WAIT)
    assert s.status()["redis_master"] == old.address
    assert s.rcs_file() == old.address
    assert not s.notes.seen("Setting redis master")

    old.start(*REDIS_ARGS)
    wait_until(
        lambda: s.status()["redis_master_available"] and s.status()["phase"] == "watching",
        "the RCS to see redis-1 again",
        WAIT,
    )
    wait_until(lambda: s.names() == {old.address}, "the files to name redis-1", WAIT)
    replica.start(*REDIS_ARGS)  # back as an empty master: it must follow redis-1 again
    wait_until(lambda: replicates(replica, old), "redis-2 to replicate redis-1 again", WAIT)
    handler = s.handler()
    assert handler.set("resumed", "1") is True
    assert direct(old).get("resumed") == b"1"
    handler.close()
    assert s.status()["redis_master"] == old.address


def test_no_redis_slave_available_and_the_replica_comes_back_empty_as_a_master(beetle) -> None:
    """Scenario: No redis slave available to become new master, where the replica comes back
    before the master -- as an empty master, as a Redis server does that was made a replica
    at run time (by the RCS's slave_of!) and restarted without `replicaof` in its config.

    It is no slave of the old master, so it is no candidate: Beetle keeps the old master
    ("no slave available to become new master, promoting old master"). Adopting it would
    send every worker to an empty server, and make the old master, once back, its replica,
    wiping the data. Expected: the old master is kept; when it is back, the returned replica
    follows it and the data written before is still there."""
    b = beetle()
    (old,) = b.make_servers(1, *PERSISTENT)  # redis-1 keeps its data over a restart
    s = b.standard(servers=[old, *b.servers(1)])
    replica = s.replicas[0]
    wait_until(lambda: s.names() == {old.address}, "both files to name redis-1", WAIT)
    durable = s.handler(wait_replicas=1)
    assert durable.set("precious", "1") is True
    durable.close()
    # The RCS vouches for data up to the master's offset at its last good check (documented);
    # let it check once after the write, so that this test is about the rule, not the race.
    written = redis_ops.replication_info(old.address)["master_repl_offset"]
    wait_until(
        lambda: s.status()["redis_master_offset"] >= written, "a check after the write", WAIT
    )
    replica.stop(kill=True)
    old.stop(kill=True)
    no_slave = "no slave available to become new master"
    wait_until(lambda: s.notes.seen(no_slave), "the no-slave notification", WAIT)

    replica.start(*REDIS_ARGS)  # empty, and a master
    before = s.notes.count(no_slave)
    wait_until(
        lambda: s.notes.count(no_slave) >= before + 2 or s.notes.seen("Setting redis master"),
        "two more switch attempts with redis-2 back (or a switch)",
        WAIT,
    )
    assert not s.notes.seen("Setting redis master"), s.notes.texts
    assert s.status()["redis_master"] == old.address

    old.start(*PERSISTENT)
    wait_until(lambda: replicates(replica, old), "redis-2 to replicate redis-1", WAIT)
    wait_until(lambda: s.names() == {old.address}, "the files to name redis-1", WAIT)
    assert direct(old).get("precious") == b"1"
    wait_until(lambda: direct(replica).get("precious") == b"1", "redis-2 to have the data", WAIT)


# ------------------------------------------------- "Redis configuration client starts while"

NO_MASTER = "no master"
BOTH_MASTER = "both master"
BOTH_SLAVE = "both slave"
MASTER_NO_SLAVE = "master but no slave"


def _topology(b: Beetle, case: str) -> tuple[RedisServer, RedisServer, RedisServer | None]:
    """redis-1, redis-2 (what the RCS is configured with) and, for BOTH_SLAVE, redis-3."""
    if case == BOTH_SLAVE:
        r1, r2, r3 = b.servers(3)
        b.replicate(r1, r3)
        b.replicate(r2, r3)
        return r1, r2, r3
    r1, r2 = b.servers(2)
    if case == NO_MASTER:
        r1.stop(kill=True)
        r2.stop(kill=True)
    elif case == MASTER_NO_SLAVE:
        b.replicate(r2, r1)
        r2.stop(kill=True)
    return r1, r2, None  # BOTH_MASTER: two standalone servers


# (case, old master file naming redis-1) -> what rc-client-1's file names once it started
# (None: undefined), exactly Beetle's feature file; then what our RCS determines.
CLIENT_STARTS = [
    pytest.param(NO_MASTER, False, None, None, id="no-master"),
    pytest.param(NO_MASTER, True, None, None, id="no-master-but-master-file-exists"),
    pytest.param(BOTH_MASTER, False, None, None, id="both-master"),
    pytest.param(BOTH_MASTER, True, "redis-1", "redis-1", id="both-master-but-master-file-exists"),
    pytest.param(BOTH_SLAVE, False, None, None, id="both-slave"),
    pytest.param(BOTH_SLAVE, True, None, None, id="both-slave-but-master-file-exists"),
    pytest.param(MASTER_NO_SLAVE, False, None, None, id="master-but-no-slave"),
    pytest.param(
        MASTER_NO_SLAVE, True, "redis-1", "redis-1", id="master-but-no-slave-but-master-file-exists"
    ),
]

NO_MASTER_REASONS = {
    NO_MASTER: "no server is a master",
    BOTH_MASTER: "several servers are masters",
    BOTH_SLAVE: "no server is a master",
    MASTER_NO_SLAVE: "cannot be reached",
}

RCC_KEPT = "RCC: the master in the file is a master"
RCC_EMPTIED = "RCC: the master in the file is not a master as seen from here; emptying it"
RCC_EMPTY = "RCC: the master file is empty; waiting for reconfigure"


@pytest.mark.parametrize(("case", "old_file", "client_sees", "rcs_determines"), CLIENT_STARTS)
def test_redis_configuration_client_starts_while(
    beetle,
    caplog,
    *,
    case: str,
    old_file: bool,
    client_sees: str | None,
    rcs_determines: str | None,
) -> None:
    """Scenarios: Redis configuration client starts while no redis master available / both
    redis servers are master / both redis servers are slave (of a redis-3 outside the set) /
    there is a redis master but no slave -- each without and with an old master file naming
    redis-1.

    First, as in Beetle, the RCC runs alone. It never invents a master: without a file its
    master stays undefined. With a file it keeps it only if redis-1 is a master as seen from
    its host (both-master and master-but-no-slave), and empties it otherwise (redis-1 down, or
    a slave). That is Beetle's "clear file if master is slave or unavailable".

    Then an RCS for redis-1,redis-2 starts (the RCS determines the master, the RCC only
    follows). Its census asks the client, whose file is the newest word:
    - a file that still names redis-1, a master: redis-1 is the master, the file keeps it,
      and in the both-master case redis-2 is made its replica (Beetle's slave_of!);
    - an empty file: only the servers can tell, and they do not name exactly one master
      with every other server its replica (none is a master; two are; the only master's
      replica is unreachable), so the RCS determines no master, says why, promotes nothing
      and leaves the file empty (Beetle: NoRedisMaster)."""
    caplog.set_level(logging.INFO, logger="failover")
    b = beetle()
    r1, r2, r3 = _topology(b, case)
    named = {"redis-1": r1.address, None: None}
    path = b.tmp / "rc-client-1.master"
    if old_file:
        RedisMasterFile(path).write(r1.address)

    file = b.client("rc-client-1", path)
    expected_log = RCC_EMPTY if not old_file else RCC_KEPT if client_sees else RCC_EMPTIED
    wait_until(
        lambda: any(expected_log in r.getMessage() for r in caplog.records),
        f"the RCC's start check ({expected_log!r})",
        WAIT,
    )
    # the log line comes just before the file is emptied
    wait_until(lambda: file.read() == named[client_sees], "the client's file", WAIT)

    rcs = b.server([r1, r2], ["rc-client-1"])
    status = lambda: rcs.proxy().status().get(timeout=10)  # noqa: E731
    if rcs_determines is None:
        wait_until(lambda: status()["phase"] == "no_master", "the RCS to find no master", WAIT)
        assert NO_MASTER_REASONS[case] in (status()["no_master_reason"] or "")
        assert status()["redis_master"] == ""
        assert file.read() is None
    else:
        wait_until(
            lambda: (
                status()["redis_master"] == named[rcs_determines]
                and status()["redis_master_available"]
            ),
            "the RCS to determine redis-1",
            WAIT,
        )
        wait_until(lambda: file.read() == named[rcs_determines], "the file", WAIT)
    if case == BOTH_MASTER and rcs_determines:
        wait_until(lambda: replicates(r2, r1), "redis-2 to become redis-1's replica", WAIT)
    elif case == BOTH_MASTER:
        assert is_master(r1) and is_master(r2)  # nothing was decided, nothing was touched
    elif case == BOTH_SLAVE:
        assert r3 is not None
        assert replicates(r1, r3) and replicates(r2, r3)


# --------------------------------------------------------------------------- the http server


def test_redis_configuration_server_should_embed_an_http_server(beetle) -> None:
    """Scenario: Redis configuation server should embed a http server.

    What test_shells.py does not already check: /.html, the content types, every Beetle key
    in /.json and /.txt (configured_redis_servers too), POST /initiate_master_switch with the
    token (Beetle also accepts GET without one; we do not) and 404 for POST elsewhere. (Accelerated switch when master is down (201) /
    up (200) is test_shells.py's test_the_http_status_page_and_an_accelerated_switch.)"""
    s = beetle().standard()
    wait_until(lambda: s.names() == {s.master.address}, "both files to name redis-1", WAIT)
    host, port = s.rcs.proxy().http_address().get(timeout=10)
    base = f"http://{host}:{port}"

    with urllib.request.urlopen(f"{base}/.json", timeout=10) as answer:
        assert answer.headers["Content-Type"].startswith("application/json")
        status = json.loads(answer.read())
    for key in (*BEETLE_KEYS, "configured_redis_servers"):
        assert key in status, key
    assert status["configured_redis_servers"] == [x.address for x in s.servers]
    assert status["configured_client_ids"] == ["rc-client-1", "rc-client-2"]
    assert status["redis_slaves_available"] == [s.replicas[0].address]
    assert status["redis_master_available"] is True and status["switch_in_progress"] is False

    with urllib.request.urlopen(f"{base}/.txt", timeout=10) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain")
        lines = answer.read().decode().splitlines()
    assert [line.split(": ", 1)[0] for line in lines[: len(BEETLE_KEYS)]] == list(BEETLE_KEYS)

    with urllib.request.urlopen(f"{base}/.html", timeout=10) as answer:
        assert answer.headers["Content-Type"].startswith("text/html")
        assert answer.headers["Refresh"] == "3"
        page = answer.read().decode()
    assert "<table>" in page and f"<td>{s.master.address}</td>" in page
    for key in BEETLE_KEYS:
        assert f"<th>{key}</th>" in page

    switch = urllib.request.Request(
        f"{base}/initiate_master_switch",
        data=b"",
        method="POST",
        headers={"Authorization": "Bearer beetle-switch-token"},
    )
    with urllib.request.urlopen(switch, timeout=10) as answer:
        assert answer.status == 200 and b"No master switch necessary" in answer.read()
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(urllib.request.Request(f"{base}/.json", data=b"", method="POST"))
    assert missing.value.code == 404
    assert s.names() == {s.master.address} and is_master(s.master)


# ------------------------------------------------------------------- multiple failover sets

SYSTEMS = ("alpha", "beta")
HOSTS = ("host-1", "host-2")


@dataclass
class TwoSets:
    """Systems alpha and beta, each a master, a replica and its own RCS; two worker hosts,
    each with ONE master file kept by an RCC of each system (one bus connection and one
    client id per host, as one RCC process per system on a host would have)."""

    masters: dict[str, RedisServer]
    replicas: dict[str, RedisServer]
    rcs: dict[str, Any]
    files: dict[str, list[RedisMasterFile]]  # per system: what its workers read, per host
    paths: list[Path]

    def names(self, system: str) -> set[str | None]:
        return {f.read() for f in self.files[system]}

    def expected_text(self, alpha: RedisServer, beta: RedisServer) -> str:
        return f"alpha/{alpha.address}\nbeta/{beta.address}\n"

    def status(self, system: str) -> dict[str, Any]:
        return self.rcs[system].proxy().status().get(timeout=10)


def _two_sets(b: Beetle, *, seed_files: bool) -> TwoSets:
    """`seed_files`: the operator created each host's file in the multi-set form first, with
    a line per system naming no master yet ("alpha/", "beta/")."""
    masters, replicas = {}, {}
    for system in SYSTEMS:
        masters[system], replicas[system] = b.servers(2)
        b.replicate(replicas[system], masters[system])
    paths = [b.tmp / f"{h}.master" for h in HOSTS]
    if seed_files:
        for path in paths:
            path.write_text("alpha/\nbeta/\n")
    buses = [b.connect(h) for h in HOSTS]
    files: dict[str, list[RedisMasterFile]] = {}
    rcs: dict[str, Any] = {}
    for system in SYSTEMS:
        files[system] = [
            b.client(h, path, system=system, bus=bus, multi_set=True)
            for h, path, bus in zip(HOSTS, paths, buses, strict=True)
        ]
        rcs[system] = b.server([masters[system], replicas[system]], list(HOSTS), system=system)
    sets = TwoSets(masters, replicas, rcs, files, paths)
    for system in SYSTEMS:
        wait_until(
            lambda system=system: sets.names(system) == {masters[system].address},
            f"{system}'s lines",
            WAIT,
        )
    return sets


class Readers:
    """Workers of every system reading every host's file, all the time: what each system's
    workers were told is its master."""

    def __init__(self, paths: list[Path]) -> None:
        self.seen: dict[str, set[str | None]] = {system: set() for system in SYSTEMS}
        self._files = [(system, RedisMasterFile(p, system)) for p in paths for system in SYSTEMS]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for system, file in self._files:
                self.seen[system].add(file.read())
            self._stop.wait(0.002)

    def __enter__(self) -> Readers:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def test_multiple_failover_sets_share_one_master_file_per_host(beetle) -> None:
    """Scenario: single switch with multiple failover sets (Beetle >= 2.3.0).

    Two systems, each with its own RCS, and per worker host ONE master file that both
    systems' RCCs keep, in the form "system/host:port". The files start empty, as on a fresh
    host. A switch of alpha rewrites alpha's line only: beta's workers only ever read beta's
    master."""
    sets = _two_sets(beetle(), seed_files=False)
    alpha, beta = sets.masters["alpha"], sets.masters["beta"]
    for path in sets.paths:
        assert path.read_text() == sets.expected_text(alpha, beta)
    with Readers(sets.paths) as readers:
        sets.masters["alpha"].stop(kill=True)
        new = sets.replicas["alpha"]
        wait_until(lambda: sets.names("alpha") == {new.address}, "alpha's switch", WAIT)
    assert readers.seen["beta"] == {beta.address}
    for path in sets.paths:
        assert path.read_text() == sets.expected_text(new, beta)


def test_multiple_failover_sets_with_files_created_in_the_multi_set_form(beetle) -> None:
    """Scenario: single switch with multiple failover sets, each host's file created in the
    multi-set form beforehand. The RCCs keep that form; a switch of alpha rewrites alpha's
    line only: beta's workers only ever read beta's master, beta's RCS sees nothing."""
    sets = _two_sets(beetle(), seed_files=True)
    alpha, beta = sets.masters["alpha"], sets.masters["beta"]
    for path in sets.paths:
        assert path.read_text() == sets.expected_text(alpha, beta)
    with Readers(sets.paths) as readers:
        alpha.stop(kill=True)
        new = sets.replicas["alpha"]
        wait_until(lambda: sets.names("alpha") == {new.address}, "alpha's switch", WAIT)
    assert readers.seen["beta"] == {beta.address}
    assert readers.seen["alpha"] <= {alpha.address, None, new.address}
    for path in sets.paths:
        assert path.read_text() == sets.expected_text(new, beta)
    status = sets.status("beta")
    assert status["redis_master"] == beta.address and status["redis_master_available"]
    assert not any("not available" in n for n in status["notifications"])
    assert is_master(beta) and replicates(sets.replicas["beta"], beta)


def test_double_switch_with_multiple_failover_sets(beetle) -> None:
    """Scenario: double switch with multiple failover sets: alpha switches, then beta. Each
    set's workers only ever read their own set's servers (or nothing, mid-switch), and each
    file ends naming both new masters."""
    sets = _two_sets(beetle(), seed_files=True)
    with Readers(sets.paths) as readers:
        for system in SYSTEMS:
            sets.masters[system].stop(kill=True)
            new = sets.replicas[system].address
            wait_until(lambda s=system, n=new: sets.names(s) == {n}, f"{system}'s switch", WAIT)
    for system in SYSTEMS:
        own = {sets.masters[system].address, sets.replicas[system].address, None}
        assert readers.seen[system] <= own, system
    for path in sets.paths:
        assert path.read_text() == sets.expected_text(sets.replicas["alpha"], sets.replicas["beta"])


def test_multiple_failover_sets_when_every_line_was_cleared(beetle) -> None:
    """Multiple failover sets, files in the multi-set form: beta's master dies and its switch
    cannot complete (the replica refuses REPLICAOF), so beta's clients have removed beta's
    line and keep it removed. Then alpha switches: it clears its line (the file is empty now)
    and writes its new master. That write must stay alpha's line: beta's workers must keep
    reading no master, never alpha's."""
    sets = _two_sets(beetle(), seed_files=True)
    beta_replica = direct(sets.replicas["beta"])
    beta_replica.execute_command("ACL", "SETUSER", "default", "-replicaof", "-slaveof")
    sets.masters["beta"].stop(kill=True)
    wait_until(
        lambda: any(
            "promoting" in n and "failed" in n for n in sets.status("beta")["notifications"]
        ),
        "beta's switch to fail",
        WAIT,
    )
    wait_until(lambda: sets.names("beta") == {None}, "beta's lines to be cleared", WAIT)
    with Readers(sets.paths) as readers:
        sets.masters["alpha"].stop(kill=True)
        new = sets.replicas["alpha"]
        wait_until(lambda: sets.names("alpha") == {new.address}, "alpha's switch", WAIT)
    assert new.address not in readers.seen["beta"]
    for path in sets.paths:
        assert path.read_text() == f"alpha/{new.address}\n"
