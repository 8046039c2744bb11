"""`rabbitry failover server start | client start | status`, run as real subprocesses.

The Redis servers are redis-server processes on free ports; the bus between the RCS and RCC
processes is another redis-server (`redis://`), with a unique exchange per test. Every process
started here is stopped in a finally: SIGTERM, then SIGKILL if it does not exit.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from failover import RedisMasterFile, redis_ops
from failover.http_status import BEETLE_KEYS
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
WAIT = 60.0  # seconds; only reached when something hung
REDIS_ARGS = ("--repl-diskless-sync-delay", "0")
TWO_SERVERS = ("server", "start", "--redis-servers", "127.0.0.1:6380,127.0.0.1:6381")
FAST = ("--master-retries", "2", "--master-retry-interval", "0.2")


def rabbitry(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run `python -m rabbitry failover ...` to completion."""
    return subprocess.run(
        [sys.executable, "-m", "rabbitry", "failover", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )


class Running:
    """`python -m rabbitry failover ...` in the background; stdout and stderr collected."""

    def __init__(self, *args: str, cwd: Path = ROOT) -> None:
        self.args = args
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rabbitry", "failover", *args],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.out: list[str] = []
        self.err: list[str] = []
        self._lock = threading.Lock()
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.out), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, self.err), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, stream: Any, lines: list[str]) -> None:
        for line in stream:
            with self._lock:
                lines.append(line.rstrip("\n"))

    def output(self) -> str:
        with self._lock:
            return "stdout:\n" + "\n".join(self.out) + "\nstderr:\n" + "\n".join(self.err)

    def ready(self) -> str:
        """Wait for the READY line on stdout and return it; fail if the process ends first."""

        def line() -> str | None:
            with self._lock:
                found = next((x for x in self.out if x.startswith("READY")), None)
            if found is None and self.proc.poll() is not None:
                raise AssertionError(
                    f"{self.args} exited ({self.proc.returncode}) before READY:\n{self.output()}"
                )
            return found

        try:
            return wait_until(line, "the READY line", WAIT)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.output()}") from None

    def stop(self) -> int:
        """SIGTERM, then SIGKILL if it does not exit; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        for reader in self._readers:
            reader.join(5)
        return self.proc.returncode


@pytest.fixture
def cli() -> Iterator[Any]:
    """`cli(*args)` starts `rabbitry failover *args`; every process is stopped afterwards."""
    started: list[Running] = []

    def start(*args: str) -> Running:
        started.append(Running(*args))
        return started[-1]

    try:
        yield start
    finally:
        for proc in started:
            proc.stop()


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def http_of(ready: str) -> str:
    """The address in `READY rcs http=host:port`."""
    assert ready.startswith("READY rcs http="), ready
    address = ready.split("http=", 1)[1].strip()
    host, _, port = address.rpartition(":")
    assert host and port.isdigit() and int(port) > 0, ready
    return address


def status_json(http: str) -> dict[str, Any]:
    done = rabbitry("status", "--http", http, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def redis_set(redis_servers) -> Any:
    """A master, its replica, and a third redis-server as the bus (unique exchange)."""
    master, replica, bus = redis_servers(3, *REDIS_ARGS)
    redis_ops.make_replica(replica.address, master.address)
    wait_until(
        lambda: (
            (redis_ops.replication_info(replica.address) or {}).get("master_link_status") == "up"
        ),
        "the replica's link",
        WAIT,
    )

    class Set:
        pass

    s = Set()
    s.master, s.replica = master, replica
    s.bus = ("--bus", bus.url, "--exchange", f"cli-{uuid.uuid4().hex[:8]}")
    s.servers = f"{master.address},{replica.address}"
    return s


# ------------------------------------------------------------------------------------ help


@pytest.mark.parametrize(
    ("command", "mentions"),
    [
        (["--help"], ["server", "client", "status"]),
        (
            ["server", "start", "--help"],
            [
                "--redis-servers",
                "--client-ids",
                "--bus",
                "--system",
                "--exchange",
                "--master-retries",
                "--master-retry-interval",
                "--client-timeout",
                "--master-file",
                "--http",
                "--config-file",
                "--log-level",
                "exit codes",
            ],
        ),
        (
            ["client", "start", "--help"],
            [
                "--client-id",
                "--master-file",
                "--bus",
                "--system",
                "--exchange",
                "--config-file",
                "--log-level",
                "exit codes",
            ],
        ),
        (["status", "--help"], ["--http", "--json", "9650"]),
    ],
    ids=["failover", "server-start", "client-start", "status"],
)
def test_help_exits_0_and_mentions_the_options(command: list[str], mentions: list[str]) -> None:
    done = rabbitry(*command)
    assert done.returncode == 0, done.stderr
    for text in mentions:
        assert text in done.stdout, f"{text!r} not in the help of {command}"


@pytest.mark.parametrize(
    "command", [[], ["server"], ["client"]], ids=["failover", "server", "client"]
)
def test_a_group_without_its_command_prints_usage_and_exits_2(command: list[str]) -> None:
    done = rabbitry(*command)
    assert done.returncode == 2
    assert "usage:" in done.stderr


# ---------------------------------------------------------------------- usage/config errors


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["server", "start", "--redis-servers", "127.0.0.1:6380"],
            "at least 2 Redis servers",
            id="one-server",
        ),
        pytest.param(["server", "start"], "--redis-servers is required", id="no-servers"),
        pytest.param(
            ["server", "start", "--redis-servers", "127.0.0.1:6380,nonsense"],
            "invalid Redis server 'nonsense'",
            id="bad-server-address",
        ),
        pytest.param(
            ["server", "start", "--redis-servers", "127.0.0.1:6380,127.0.0.1:6380"],
            "more than once",
            id="duplicate-server",
        ),
        pytest.param(
            [*TWO_SERVERS, "--master-retries", "0"],
            "master_retries must be >= 1",
            id="zero-retries",
        ),
        pytest.param(
            [*TWO_SERVERS, "--master-retries", "three"],
            "invalid int value",
            id="retries-not-a-number",
        ),
        pytest.param(
            [*TWO_SERVERS, "--http", "nonsense"],
            "nonsense",
            id="bad-http-address",
        ),
        pytest.param(
            [*TWO_SERVERS, "--bus", "bogus://x"],
            "bad bus URL",
            id="server-bad-bus-url",
        ),
        pytest.param(
            ["client", "start", "--master-file", "x"], "--client-id is required", id="no-id"
        ),
        pytest.param(
            ["client", "start", "--client-id", "a"], "--master-file is required", id="no-file"
        ),
        pytest.param(
            ["client", "start", "--client-id", "a", "--master-file", "x", "--bus", "bogus://x"],
            "bad bus URL",
            id="client-bad-bus-url",
        ),
    ],
)
def test_bad_usage_exits_2_with_the_reason(args: list[str], message: str, tmp_path: Path) -> None:
    done = rabbitry(*args, *(["--bus", "memory://"] if "--bus" not in args else []), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("command", "config", "message", "names_file"),
    [
        pytest.param(
            "server",
            """
            redis_servers: [127.0.0.1:6380, 127.0.0.1:6381]
            bus: memory://
            retries: 3
            """,
            "unknown option(s) retries",
            True,
            id="server-unknown-key",
        ),
        pytest.param(
            "client",
            """
            client_id: rcc-1
            master_file: ./redis-master
            bus: memory://
            client_ids: [rcc-1]
            """,
            "unknown option(s) client_ids",
            True,
            id="client-unknown-key",
        ),
        pytest.param(
            "server",
            """
            redis_servers: [127.0.0.1:6380]
            bus: memory://
            """,
            "at least 2 Redis servers",
            False,
            id="one-server",
        ),
        pytest.param(
            "server",
            """
            redis_servers: 127.0.0.1:6380
            bus: memory://
            """,
            "at least 2 Redis servers",
            False,
            id="one-server-as-a-string",
        ),
        pytest.param(
            "server",
            """
            redis_servers: [127.0.0.1:6380, 127.0.0.1:6381]
            client_ids: 5
            bus: memory://
            """,
            "--client-ids: expected a comma-separated list or a YAML list",
            False,
            id="client-ids-not-a-list",
        ),
        pytest.param(
            "server",
            """
            - 127.0.0.1:6380
            - 127.0.0.1:6381
            """,
            "expected a mapping of options",
            True,
            id="not-a-mapping",
        ),
        pytest.param(
            "server",
            """
            redis_servers: [127.0.0.1:6380,
            """,
            "--config-file",
            True,
            id="bad-yaml",
        ),
        pytest.param(
            "server",
            """
            redis_servers: [127.0.0.1:6380, 127.0.0.1:6381]
            bus: memory://
            master_retries: three
            """,
            "master_retries",
            False,
            id="retries-not-a-number",
        ),
    ],
)
def test_bad_config_file_exits_2_with_the_reason(
    command: str, config: str, message: str, names_file: bool, tmp_path: Path
) -> None:
    path = write(tmp_path / "failover.yaml", config)
    done = rabbitry(command, "start", "--config-file", str(path), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    if names_file:  # a problem of the file itself names the file
        assert str(path) in done.stderr
    assert "Traceback" not in done.stderr


def test_a_missing_config_file_exits_2(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    done = rabbitry("server", "start", "--config-file", str(missing))
    assert done.returncode == 2
    assert str(missing) in done.stderr and "No such file" in done.stderr


def test_status_without_a_server_exits_1_and_says_what_it_tried() -> None:
    with socket.socket() as sock:  # a free port: nothing listens there
        sock.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{sock.getsockname()[1]}"
    done = rabbitry("status", "--http", address, "--json")
    assert done.returncode == 1
    assert f"cannot read http://{address}/.json" in done.stderr
    assert f"--http {address}" in done.stderr


# -------------------------------------------------------------------------- running them


@pytest.mark.slow
def test_server_client_and_status_end_to_end(cli, redis_set, tmp_path: Path) -> None:
    """`server start` prints READY with its http address; `client start` writes its master
    file; `status --json` shows Beetle's keys; the master dies and both processes carry out
    the switch; SIGTERM stops each with exit code 0."""
    s = redis_set
    rcs_file = tmp_path / "rcs-master"
    server = cli(
        "server", "start", "--redis-servers", s.servers, "--client-ids", "rcc-1",
        *s.bus, *FAST, "--http", "127.0.0.1:0", "--master-file", str(rcs_file),
    )  # fmt: skip
    http = http_of(server.ready())
    master_file = RedisMasterFile(tmp_path / "redis-master")
    client = cli(
        "client", "start", "--client-id", "rcc-1", "--master-file", str(master_file.path), *s.bus
    )
    assert client.ready() == "READY rcc rcc-1"
    wait_until(lambda: master_file.read() == s.master.address, "the client's master file", WAIT)

    status = status_json(http)
    for key in BEETLE_KEYS:
        assert key in status, key
    assert status["redis_master"] == s.master.address
    assert status["redis_master_available"] is True
    assert status["configured_client_ids"] == ["rcc-1"]
    assert status["redis_slaves_available"] == [s.replica.address]
    text = rabbitry("status", "--http", http)
    assert text.returncode == 0
    assert f"redis_master: {s.master.address}" in text.stdout.splitlines()

    s.master.stop(kill=True)
    wait_until(lambda: master_file.read() == s.replica.address, "the switch", WAIT)
    assert redis_ops.is_master(s.replica.address) is True
    assert RedisMasterFile(rcs_file).read() == s.replica.address
    assert status_json(http)["redis_master"] == s.replica.address

    assert client.stop() == 0, client.output()
    assert server.stop() == 0, server.output()


@pytest.mark.slow
def test_options_from_a_yaml_config_file(cli, redis_set, tmp_path: Path) -> None:
    """Every option from --config-file (lists as YAML lists), and the command line wins over
    the file (the file's system and http are overridden)."""
    s = redis_set
    bus_url, exchange = s.bus[1], s.bus[3]
    server_config = write(
        tmp_path / "server.yaml",
        f"""
        redis_servers: [{s.master.address}, {s.replica.address}]
        client_ids: [rcc-1]
        bus: {bus_url}
        exchange: {exchange}
        system: overridden
        master_retries: 2
        master_retry_interval: 0.2
        client_timeout: 2.0
        master_file: {tmp_path / "rcs-master"}
        http: 127.0.0.1:1
        """,
    )
    server = cli(
        "server", "start", "--config-file", str(server_config),
        "--system", "orders", "--http", "127.0.0.1:0",
    )  # fmt: skip
    http = http_of(server.ready())
    assert http != "127.0.0.1:1"  # the command line's --http won
    client_config = write(
        tmp_path / "client.yaml",
        f"""
        client_id: rcc-1
        master_file: {tmp_path / "redis-master"}
        bus: {bus_url}
        exchange: {exchange}
        system: orders
        """,
    )
    client = cli("client", "start", "--config-file", str(client_config))
    assert client.ready() == "READY rcc rcc-1"
    master_file = RedisMasterFile(tmp_path / "redis-master", "orders")
    wait_until(lambda: master_file.read() == s.master.address, "the client's master file", WAIT)
    status = status_json(http)
    assert status["system"] == "orders"
    assert status["configured_redis_servers"] == [s.master.address, s.replica.address]
    assert status["configured_client_ids"] == ["rcc-1"]
    assert RedisMasterFile(tmp_path / "rcs-master", "orders").read() == s.master.address
    assert client.stop() == 0, client.output()
    assert server.stop() == 0, server.output()


@pytest.mark.slow
def test_sigterm_stops_the_process_and_it_leaves_nothing_behind(cli, redis_set) -> None:
    """A server started and stopped at once exits 0 on SIGTERM and its status page is gone."""
    s = redis_set
    server = cli("server", "start", "--redis-servers", s.servers, *s.bus, "--http", "127.0.0.1:0")
    http = http_of(server.ready())
    assert status_json(http)["configured_client_ids"] == []
    assert server.stop() == 0, server.output()  # SIGTERM did it: SIGKILL would be -9
    assert rabbitry("status", "--http", http).returncode == 1
