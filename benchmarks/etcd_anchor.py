"""A 3-member etcd cluster on loopback, the replicated anchor of benchmarks/mnesia.py's "etcd" part.

etcd is Raft over its members with an fsync of its WAL per commit: the fair baseline for
transactions on three disc replicas (a single Redis with fsync is not replicated). This module
finds the `etcd` binary (Debian's `etcd-server`, 3.4), installing it with apt-get when it is
missing and we may (root, apt-get on PATH), starts the members on free ports in a directory
of ours, and talks to them through etcd's HTTP/JSON gateway (`/v3/kv/...`, keys and values in
base64) with one keep-alive connection per client thread, as a client without a gRPC stack
would. Everything is stopped and removed on exit.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def find_etcd() -> str:
    """The etcd binary; installed from Debian (package etcd-server) if missing and possible.
    Raises RuntimeError saying what to do when it cannot be had."""
    found = shutil.which("etcd")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print("etcd not found: installing Debian's etcd-server with apt-get", flush=True)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=False, env=env, capture_output=True)
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "etcd-server"],
            check=False,
            env=env,
            capture_output=True,
        )
        found = shutil.which("etcd")
        if found:
            return found
    raise RuntimeError("etcd is not on PATH and could not be installed (apt install etcd-server)")


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


class EtcdClient:
    """One keep-alive HTTP connection to one member's JSON gateway (one per client thread)."""

    def __init__(self, port: int) -> None:
        self._conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)

    def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self._conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = self._conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"etcd {path}: HTTP {resp.status}: {data[:200]!r}")
        return json.loads(data)

    def put(self, key: str, value: str) -> None:
        self.call("/v3/kv/put", {"key": _b64(key), "value": _b64(value)})

    def increment(self, key: str) -> int:
        """Read the counter, then write it + 1 only if nobody wrote it since (a compare on
        its mod_revision in one txn); retried on a conflict. Returns the attempts."""
        attempts = 0
        while True:
            attempts += 1
            got = self.call("/v3/kv/range", {"key": _b64(key)})
            kvs = got.get("kvs") or []
            value = int(base64.b64decode(kvs[0]["value"])) if kvs else 0
            rev = int(kvs[0].get("mod_revision", 0)) if kvs else 0
            txn = {
                "compare": [
                    {
                        "key": _b64(key),
                        "target": "MOD",
                        "result": "EQUAL",
                        "mod_revision": str(rev),
                    }
                ],
                "success": [{"request_put": {"key": _b64(key), "value": _b64(str(value + 1))}}],
            }
            if self.call("/v3/kv/txn", txn).get("succeeded"):
                return attempts

    def close(self) -> None:
        self._conn.close()


class EtcdCluster:
    """The members' client ports, and a client for the leader per thread."""

    def __init__(self, ports: list[int], leader_port: int) -> None:
        self.ports = ports
        self.leader_port = leader_port
        self.pids: list[int] = []
        self._local = threading.local()
        self._clients: list[EtcdClient] = []
        self._lock = threading.Lock()

    def client(self) -> EtcdClient:
        """This thread's client (to the leader: followers forward writes to it anyway)."""
        c = getattr(self._local, "client", None)
        if c is None:
            c = self._local.client = EtcdClient(self.leader_port)
            with self._lock:
                self._clients.append(c)
        return c

    def close(self) -> None:
        with self._lock:
            for c in self._clients:
                c.close()
            self._clients.clear()


def version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)
    first = (out.stdout or out.stderr).splitlines()
    return first[0] if first else "etcd (version unknown)"


@contextlib.contextmanager
def etcd_cluster(root: Path, members: int = 3) -> Iterator[EtcdCluster]:
    """`members` etcd members on loopback with their data under `root` (WAL fsync on, the
    default), ready (every member healthy and a leader elected); stopped on exit."""
    binary = find_etcd()
    root.mkdir(parents=True, exist_ok=True)
    names = [f"m{i + 1}" for i in range(members)]
    client_ports = [_free_port() for _ in names]
    peer_ports = [_free_port() for _ in names]
    initial = ",".join(f"{n}=http://127.0.0.1:{p}" for n, p in zip(names, peer_ports, strict=True))
    token = f"bench-{os.getpid()}-{time.monotonic_ns()}"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for name, cport, pport in zip(names, client_ports, peer_ports, strict=True):
            args = [
                binary,
                f"--name={name}",
                f"--data-dir={root / name}",
                f"--listen-client-urls=http://127.0.0.1:{cport}",
                f"--advertise-client-urls=http://127.0.0.1:{cport}",
                f"--listen-peer-urls=http://127.0.0.1:{pport}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{pport}",
                f"--initial-cluster={initial}",
                "--initial-cluster-state=new",
                f"--initial-cluster-token={token}",
                "--logger=zap",
                "--log-level=warn",
            ]
            with open(root / f"{name}.log", "ab") as out:
                procs.append(subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT))
        leader = _wait_ready(client_ports, procs, root)
        cluster = EtcdCluster(client_ports, leader)
        cluster.pids = [proc.pid for proc in procs]  # the benchmark counts their CPU time
        try:
            yield cluster
        finally:
            cluster.close()
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        shutil.rmtree(root, ignore_errors=True)


def _wait_ready(ports: list[int], procs: list[subprocess.Popen[bytes]], root: Path) -> int:
    """Wait until every member reports the same leader; the leader's client port."""
    deadline = time.monotonic() + 60
    while True:
        leaders = set()
        by_id: dict[str, int] = {}
        with contextlib.suppress(OSError, RuntimeError, ValueError, http.client.HTTPException):
            for port in ports:
                c = EtcdClient(port)
                try:
                    st = c.call("/v3/maintenance/status", {})
                finally:
                    c.close()
                by_id[str(st["header"]["member_id"])] = port
                leaders.add(str(st.get("leader", "0")))
            if len(leaders) == 1 and (lid := leaders.pop()) in by_id:
                return by_id[lid]
        if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
            raise RuntimeError(f"etcd did not come up with a leader: see {root}/m*.log")
        time.sleep(0.05)
