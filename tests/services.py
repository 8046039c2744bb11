"""Real servers for tests: Redis and RabbitMQ on this machine, or redis-server processes.

Tests of Redis or AMQP behaviour talk to real servers, never to fakes. When a server is
missing, the test skips with a message saying what to install, except under CI
(`RABBITRY_REQUIRE_SERVICES=1`), where a missing server fails the test instead: CI must
never report green because it silently tested nothing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import site
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REDIS_URL = "redis://127.0.0.1:6379/0"
AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"

_HOWTO = {
    "redis": "install Redis (apt install redis-server) and run it on 127.0.0.1:6379",
    "amqp": "install RabbitMQ (apt install rabbitmq-server) and run it on 127.0.0.1:5672 "
    "with the guest/guest user",
    "redis-server": "install the redis-server binary (apt install redis-server)",
    "spark": "pip install -e '.[all]' (pyspark) and install Java 17+ (apt install openjdk-17-jre)",
}


def services_required() -> bool:
    """True under CI: a missing server is a failure, not a skip."""
    return os.environ.get("RABBITRY_REQUIRE_SERVICES", "") not in ("", "0")


def _missing(what: str, detail: str) -> None:
    message = f"{what} is not available ({detail}); {_HOWTO[what]}"
    if services_required():
        pytest.fail(f"RABBITRY_REQUIRE_SERVICES=1: {message}", pytrace=False)
    pytest.skip(message)


def _reachable(host: str, port: int) -> str | None:
    try:
        socket.create_connection((host, port), timeout=1).close()
    except OSError as exc:
        return f"cannot connect to {host}:{port}: {exc}"
    return None


def require_redis() -> str:
    """The local Redis URL, or skip/fail if no Redis answers on 127.0.0.1:6379."""
    problem = _reachable("127.0.0.1", 6379)
    if problem:
        _missing("redis", problem)
    return REDIS_URL


def require_amqp() -> str:
    """The local RabbitMQ URL, or skip/fail if nothing answers on 127.0.0.1:5672."""
    problem = _reachable("127.0.0.1", 5672)
    if problem:
        _missing("amqp", problem)
    return AMQP_URL


def redis_server_binary() -> str:
    """The path of redis-server, or skip/fail if it is not installed."""
    path = shutil.which("redis-server")
    if path is None:
        _missing("redis-server", "no redis-server on PATH")
    return path  # type: ignore[return-value]


def require_spark() -> None:
    """Skip/fail unless pyspark imports and a java binary is found (JAVA_HOME or PATH)."""
    try:
        import pyspark  # noqa: F401
    except ImportError as exc:
        _missing("spark", f"pyspark does not import: {exc}")
    home = os.environ.get("JAVA_HOME")
    if not (home and Path(home, "bin", "java").exists()) and shutil.which("java") is None:
        _missing("spark", "no java on PATH and no JAVA_HOME")


def unactivated_venv(root: Path) -> tuple[str, dict[str, str]]:
    """How pipx, cron or a systemd unit runs rabbitry: a venv's python by its path, never
    activated, with a PATH whose first python3 cannot import rabbitry. Returns the venv's
    python (it sees this interpreter's packages, so it has rabbitry and pyspark) and that
    environment. The PATH's python3 is this interpreter isolated (-I -S): no site-packages,
    no PYTHONPATH."""
    venv = root / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)],
        check=True,
        timeout=60,
    )
    see_our_packages(venv)
    shim = root / "shim"
    shim.mkdir()
    (shim / "python3").write_text(f'#!/bin/sh\nexec {sys.executable} -I -S "$@"\n')
    (shim / "python3").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "VIRTUAL_ENV")}
    env["PATH"] = f"{shim}{os.pathsep}{env.get('PATH', '')}"
    bare = subprocess.run(
        ["python3", "-c", "import rabbitry"], env=env, capture_output=True, check=False
    )
    assert bare.returncode != 0, "the PATH's python3 must not have rabbitry"
    return str(venv / "bin" / "python"), env


def see_our_packages(venv: Path) -> None:
    """Make `venv` see the running interpreter's site-packages. --system-site-packages gives
    the *base* interpreter's (venv always builds from the base), so when the tests run from
    a venv of their own (rabbitry, psutil and pytest installed there, not in the base) the
    inner venv had none of them. A .pth line that starts with `import` runs at start-up, and
    site.addsitedir also reads that directory's .pth files (editable installs live there)."""
    ours = [*site.getsitepackages()]
    if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
        ours.append(site.getusersitepackages())
    purelib = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    lines = "".join(f"import site; site.addsitedir({p!r})\n" for p in ours if os.path.isdir(p))
    Path(purelib, "_rabbitry_tests_outer_site.pth").write_text(lines)


def _free_port() -> int:
    """A port for a test's redis-server: from the test port range, where no worker's bind(0)
    or outgoing connection can take it before the server listens (rabbitry.testing.cluster)."""
    from rabbitry.testing.cluster import free_ports

    return free_ports(1)[0]


@dataclass
class RedisServer:
    """A redis-server process this test started, on its own free port and dir."""

    port: int
    dir: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, *extra: str) -> RedisServer:
        """Start (or restart) the server and wait until it answers PING."""
        binary = redis_server_binary()
        self.dir.mkdir(parents=True, exist_ok=True)
        args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        args += ["--appendonly", "no", "--dir", str(self.dir), *extra]
        log = open(self.dir / "redis.log", "ab")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                text = (self.dir / "redis.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server on port {self.port} exited: {text}")
            if self.ping():
                return self
            time.sleep(0.02)
        raise RuntimeError(f"redis-server on port {self.port} did not answer PING in 10 s")

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self, kill: bool = False) -> None:
        """Stop the server (SIGKILL with `kill`) and wait for it to exit."""
        if self.proc is None or self.proc.poll() is not None:
            return
        if kill:
            self.proc.kill()
        else:
            self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@pytest.fixture
def redis_servers(tmp_path: Path) -> Iterator[Callable[..., list[RedisServer]]]:
    """A factory: `redis_servers(n, *extra_args)` starts n redis-server processes on free
    ports, each in its own dir; all are stopped after the test."""
    started: list[RedisServer] = []

    def make(n: int = 1, *extra: str) -> list[RedisServer]:
        servers = []
        for _ in range(n):
            server = RedisServer(_free_port(), tmp_path / f"redis-{len(started)}")
            started.append(server)
            servers.append(server.start(*extra))
        return servers

    yield make
    for server in started:
        with contextlib.suppress(Exception):
            server.stop(kill=True)


@contextlib.contextmanager
def faultproxy_api() -> Iterator[Any]:
    """A Toxiproxy API: the one at $TOXIPROXY_URL, else `rabbitry faultproxy` started now
    (and stopped after the block)."""
    from rabbitry.testing.cluster import ToxiproxyAPI

    if os.environ.get("TOXIPROXY_URL"):
        yield ToxiproxyAPI.from_url(os.environ["TOXIPROXY_URL"])
        return
    proc = subprocess.Popen(
        [sys.executable, "-m", "rabbitry", "faultproxy", "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("READY "), f"faultproxy said {line!r}"
        yield ToxiproxyAPI.from_url(line.split()[1])
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
