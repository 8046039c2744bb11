"""The RCS and RCC actor shells on real redis-server processes and a real bus.

Beetle's feature scenarios (features/redis_auto_failover.feature), end to end: the servers are
redis-server processes started on free ports, the clients' master files real files.
"""

from __future__ import annotations

import json
import signal
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from failover import (
    ConfigurationClient,
    ConfigurationServer,
    FailoverRedis,
    RedisMasterFile,
    redis_ops,
)
from tests.failover.fast import FAST_RCC, FAST_RCS
from tests.waiting import wait_until

pytestmark = pytest.mark.slow


HTTP_TOKEN = "switch-token-for-tests"
AUTH = {"Authorization": f"Bearer {HTTP_TOKEN}"}


def _switch(base: str, headers: dict[str, str]) -> urllib.request.Request:
    return urllib.request.Request(
        f"{base}/initiate_master_switch", data=b"", method="POST", headers=headers
    )


@pytest.fixture
def failover_set(redis_servers, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """`failover_set(replicas=1, clients=("rcc-1", "rcc-2"))`: a master, its replicas, an RCS
    and RCCs on one memory bus; returns a namespace with everything."""
    started: list[Any] = []

    def make(
        replicas: int = 1,
        clients: tuple[str, ...] = ("rcc-1", "rcc-2"),
        absent: tuple[str, ...] = (),
        **rcs: Any,
    ):
        servers = redis_servers(1 + replicas, "--repl-diskless-sync-delay", "0")
        master, *rest = servers
        for replica in rest:
            redis_ops.make_replica(replica.address, master.address)
        for replica in rest:
            wait_until(
                lambda r=replica: (
                    (redis_ops.replication_info(r.address) or {}).get("master_link_status") == "up"
                ),
                "replication link up",
                15,
            )
        bus = f"memory://failover-{uuid.uuid4().hex[:8]}"
        files = {c: RedisMasterFile(tmp_path / f"{c}.master") for c in clients if c not in absent}
        for c, file in files.items():
            ref = ConfigurationClient.start(bus, "system", c, file.path, **FAST_RCC)
            started.append(ref)
        server = ConfigurationServer.start(
            bus,
            "system",
            [s.address for s in servers],
            list(clients),  # the absent ones too: the RCS waits for every configured client
            http="127.0.0.1:0",
            http_token=HTTP_TOKEN,
            master_file=tmp_path / "rcs.master",
            **{**FAST_RCS, **rcs},
        )
        started.append(server)

        class Set:
            pass

        s = Set()
        s.servers, s.master, s.replicas, s.rcs, s.files, s.bus = (
            servers,
            master,
            rest,
            server,
            files,
            bus,
        )
        return s

    yield make
    for ref in reversed(started):
        if ref.is_alive():
            ref.stop()


def names(s) -> set[str | None]:
    return {f.read() for f in s.files.values()}


def test_a_successful_switch(failover_set) -> None:
    s = failover_set()
    wait_until(lambda: names(s) == {s.master.address}, "every client file to name the master", 15)
    s.master.stop(kill=True)
    new = s.replicas[0].address
    wait_until(lambda: names(s) == {new}, "every client file to name the replica", 20)
    assert redis_ops.is_master(new) is True
    client = FailoverRedis(
        next(iter(s.files.values())).path, failover_timeout=5, retry_interval=0.1
    )
    assert client.set("after-switch", "1") is True


def test_master_only_temporarily_down_means_no_switch(failover_set) -> None:
    """A master that gives no answer for a while (SIGSTOP; a dead one refuses and is switched
    at once) and is back before the retries run out: no switch."""
    s = failover_set(master_retries=50)
    wait_until(lambda: names(s) == {s.master.address}, "files name the master", 15)
    assert s.master.proc is not None
    s.master.proc.send_signal(signal.SIGSTOP)
    wait_until(
        lambda: not s.rcs.proxy().status().get(timeout=5)["redis_master_available"],
        "the RCS to miss the master",
        15,
    )
    s.master.proc.send_signal(signal.SIGCONT)  # back before the retries run out
    wait_until(
        lambda: s.rcs.proxy().status().get(timeout=5)["redis_master_available"],
        "master seen up",
        15,
    )
    assert names(s) == {s.master.address}
    assert redis_ops.is_master(s.replicas[0].address) is False


def test_not_all_clients_available_means_no_switch(failover_set) -> None:
    s = failover_set(clients=("rcc-1", "rcc-2", "rcc-ghost"), absent=("rcc-ghost",))
    wait_until(
        lambda: {s.files["rcc-1"].read(), s.files["rcc-2"].read()} == {s.master.address},
        "files name the master",
        15,
    )
    s.master.stop(kill=True)
    wait_until(
        lambda: any(
            "rcc-ghost" in n or "answered" in n
            for n in s.rcs.proxy().status().get(timeout=5)["notifications"]
        ),
        "the RCS to give up the round for want of rcc-ghost",
        20,
    )
    assert redis_ops.is_master(s.replicas[0].address) is False


def test_the_http_status_page_and_an_accelerated_switch(failover_set) -> None:
    s = failover_set()
    wait_until(lambda: names(s) == {s.master.address}, "files name the master", 15)
    host, port = s.rcs.proxy().http_address().get(timeout=5)
    base = f"http://{host}:{port}"
    status = json.loads(urllib.request.urlopen(f"{base}/.json", timeout=5).read())
    for key in (
        "redis_master",
        "redis_master_available",
        "redis_slaves_available",
        "switch_in_progress",
        "configured_client_ids",
        "unknown_client_ids",
        "unresponsive_clients",
        "unseen_client_ids",
    ):
        assert key in status
    assert status["redis_master"] == s.master.address
    assert status["beetle_version"].startswith("rabbitry")
    assert status["configured_brokers"] == [s.bus]
    text = urllib.request.urlopen(f"{base}/.txt", timeout=5).read().decode()
    assert f"redis_master: {s.master.address}" in text
    page = urllib.request.urlopen(f"{base}/", timeout=5)
    assert page.headers["Refresh"] == "3" and b"<table>" in page.read()
    for headers, code in (
        ({}, 401),  # no token
        ({"Authorization": "Bearer wrong"}, 401),
        ({**AUTH, "Origin": "http://evil.example"}, 403),
        ({**AUTH, "Host": "evil.example"}, 403),
    ):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(_switch(base, headers), timeout=5)
        assert refused.value.code == code
    with pytest.raises(urllib.error.HTTPError) as on_get:
        urllib.request.urlopen(f"{base}/initiate_master_switch", timeout=5)
    assert on_get.value.code == 405  # a GET never switches
    answer = urllib.request.urlopen(_switch(base, AUTH), timeout=5)
    assert answer.status == 200 and b"No master switch necessary" in answer.read()
    s.master.stop(kill=True)
    answer = urllib.request.urlopen(_switch(base, AUTH), timeout=5)
    assert answer.status == 201 and b"Master switch initiated" in answer.read()
    wait_until(lambda: names(s) == {s.replicas[0].address}, "the switch", 20)
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"{base}/nope", timeout=5)
    assert missing.value.code == 404


def test_two_candidates_one_active_and_the_standby_takes_over(
    redis_servers, tmp_path: Path
) -> None:
    """No single point of failure: two RCS candidates, one elected through gossip; the active
    one dies, the standby is elected with a higher term and carries out the next switch."""
    from monitors.gossip import Gossip

    master, replica = redis_servers(2, "--repl-diskless-sync-delay", "0")
    redis_ops.make_replica(replica.address, master.address)
    bus = f"memory://failover-{uuid.uuid4().hex[:8]}"
    fast = {"heartbeat_interval": 0.2, "interval": 0.5}
    refs: list[Any] = []
    try:
        gossips = [Gossip.start(bus, f"n{i}@h", **fast) for i in range(2)]
        refs += gossips
        files = {c: RedisMasterFile(tmp_path / f"{c}.master") for c in ("rcc-1", "rcc-2")}
        for c, f in files.items():
            refs.append(ConfigurationClient.start(bus, "system", c, f.path, **FAST_RCC))
        candidates = [
            ConfigurationServer.start(
                bus,
                "system",
                [master.address, replica.address],
                list(files),
                node=f"rcs-{i}",
                elector=gossips[i],
                **FAST_RCS,
            )
            for i in range(2)
        ]
        refs += candidates

        def actives() -> list[int]:
            return [
                i
                for i, r in enumerate(candidates)
                if r.is_alive() and r.proxy().status().get(timeout=5).get("active")
            ]

        first = wait_until(
            lambda: actives() if len(actives()) == 1 else None, "one active RCS", 20
        )[0]
        wait_until(lambda: {f.read() for f in files.values()} == {master.address}, "files", 15)
        term = candidates[first].proxy().status().get(timeout=5)["term"]
        candidates[first].stop()
        other = 1 - first
        wait_until(lambda: actives() == [other], "the standby to take over", 30)
        assert candidates[other].proxy().status().get(timeout=5)["term"] > term
        master.stop(kill=True)
        wait_until(
            lambda: {f.read() for f in files.values()} == {replica.address}, "the switch", 30
        )
        assert redis_ops.is_master(replica.address) is True
    finally:
        for ref in reversed(refs):
            if ref.is_alive():
                ref.stop()
