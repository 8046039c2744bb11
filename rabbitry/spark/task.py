"""The task-side API: what code inside a Spark task asks of its executor's node.

The node runs in the executor's sidecar process; a task reaches it over the node's control API
on loopback (the info file named by RABBITRY_SPARK_INFO gives its address and token). Each
worker process keeps a small cache: the info, a FailoverRedis per master file, and the revoked
set (refreshed at most every REVOKED_TTL seconds), so per-message calls stay local.

Errors are retryable on purpose: a task that raises fails its attempt, and Spark runs the task
again, on another executor when `configure()` set up exclusion (non-local masters).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from rabbitry.spark.settings import ENV_INFO

T = TypeVar("T")
REVOKED_TTL = 1.0  # seconds a worker trusts its copy of the revoked set
# Seconds a worker trusts a "running" answer. A pause is seen by the node itself only after
# net_ticktime (seconds), so a quarter second more does not change who may work, and it keeps
# a per-batch check from costing a round trip per batch (2 ms: a fifth of a 500-claim batch).
RUNNING_TTL = 0.25
ELECT_TIMEOUT = 10.0


class RetryableTaskError(RuntimeError):
    """Raised to fail this task attempt so that Spark retries the task (elsewhere, when
    exclusion is on). Never catch it to carry on: the node cannot vouch for this executor."""


class NodePaused(RetryableTaskError):
    """The executor's node is paused (pause_minority, pause_if_all_down, autoheal loser): this
    executor is on the wrong side of a partition and must not do cluster work."""


class NodeUnavailable(RetryableTaskError):
    """The executor's node is not running or not reachable (starting, restarting, killed)."""


class _Local:
    """Per worker process state. pyspark reuses a worker for many tasks; a fork copies this
    module's state, so the pid is checked and the cache rebuilt in a new process."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pid = os.getpid()
        self.info: dict[str, Any] | None = None
        self.info_mtime = 0.0
        self.redis: dict[tuple[str, int], Any] = {}
        self.revoked: frozenset[str] = frozenset()
        self.revoked_at = -1e9
        self.running_at = -1e9
        self.ran: set[str] = set()


_local = _Local()


def _state() -> _Local:
    global _local
    if _local.pid != os.getpid():
        _local = _Local()
    return _local


def _info() -> dict[str, Any]:
    path = os.environ.get(ENV_INFO)
    if not path:
        raise NodeUnavailable(
            "no rabbitry node is embedded in this executor: RABBITRY_SPARK_INFO is not set. "
            "Call rabbitry.spark.configure(builder, node_config) before creating the session"
        )
    state = _state()
    try:
        mtime = Path(path).stat().st_mtime
    except OSError:
        raise NodeUnavailable(
            f"the executor's node is not running (no info file {path}); it may be starting "
            "or restarting; see sidecar.log and node.log beside it"
        ) from None
    if state.info is None or mtime != state.info_mtime:
        try:
            state.info = json.loads(Path(path).read_text())
            state.info_mtime = mtime
        except (OSError, ValueError) as exc:
            raise NodeUnavailable(f"cannot read the node info file {path}: {exc}") from None
    assert state.info is not None
    return state.info


def _request(
    method: str, path: str, body: dict[str, Any] | None = None, timeout: float = 5.0
) -> Any:
    from rabbitry.control import ControlClient, ControlError

    info = _info()
    host, _, port = str(info["control"]).rpartition(":")
    try:
        client = ControlClient(
            host, int(port), timeout=timeout, token=str(info["token"]), cafile=info.get("cafile")
        )
        return client.request(method, path, body)
    except ControlError as exc:
        raise NodeUnavailable(f"the executor's node {info.get('node')}: {exc}") from None


def node_name() -> str:
    """The name of this executor's node, such as spark-app-2026...-0@127.0.0.1."""
    return str(_info()["node"])


def require_running(wait: float = 0.0) -> None:
    """Return if this executor's node is running; raise NodePaused (or NodeUnavailable) so that
    Spark retries the task elsewhere. Call it at the start of a partition and between batches.
    A "running" answer is trusted for RUNNING_TTL (0.25 s) in this worker; "paused" never is.

    `wait`: seconds to wait for the node to run again before raising. Leave it 0 where another
    executor can take the task; give it some seconds on a single-executor master (local[N,F]),
    where a retry would land on the same paused node at once.
    """
    state = _state()
    if time.monotonic() - state.running_at < RUNNING_TTL:
        return
    deadline = time.monotonic() + wait
    while True:
        try:
            status = _request("GET", "/status")
        except NodeUnavailable:
            if time.monotonic() >= deadline:
                raise
        else:
            if not status.get("paused"):
                state.running_at = time.monotonic()
                return
            if time.monotonic() >= deadline:
                raise NodePaused(
                    f"node {status.get('node')} is paused (it sees only {status.get('running')} "
                    f"of {status.get('all')}): this task is retried on another executor"
                )
        time.sleep(0.2)


def redis(**options: Any) -> Any:
    """A FailoverRedis on the current Redis master (the master file the node's host keeps).
    One client per worker process and option set; `options` go to FailoverRedis (the info's
    wait_replicas is the default)."""
    info = _info()
    master_file = info.get("master_file")
    if not master_file:
        raise NodeUnavailable(
            "no master_file was given to rabbitry.spark.configure(); redis() needs the Redis "
            "master file that the host's ConfigurationClient keeps"
        )
    options.setdefault("wait_replicas", int(info.get("wait_replicas") or 0))
    options.setdefault("system", str(info.get("system") or "system"))
    key = (master_file, hash(json.dumps(options, sort_keys=True, default=str)))
    state = _state()
    with state.lock:
        client = state.redis.get(key)
        if client is None:
            from failover import FailoverRedis

            client = FailoverRedis(master_file, **options)
            state.redis[key] = client
    return client


def revoked_ids(max_age: float = REVOKED_TTL) -> frozenset[str]:
    """The node's revoked set, as this worker last fetched it (at most `max_age` s old)."""
    state = _state()
    if time.monotonic() - state.revoked_at > max_age:
        answer = _request("GET", "/gossip/revoked", timeout=10.0)
        state.revoked = frozenset(answer["ids"])
        state.revoked_at = time.monotonic()
    return state.revoked


def is_revoked(task_id: str) -> bool:
    """True if `task_id` was revoked anywhere in the cluster (as gossip has it here)."""
    return task_id in revoked_ids()


def elect_once(key: str, fn: Callable[[], T], timeout: float = ELECT_TIMEOUT) -> T | None:
    """Run `fn` on exactly one executor for `key`, and return its result there (None on the
    others). Every executor that calls this for `key` stands in a gossip election; the winning
    node lets the first task that asks run `fn` (the node remembers it was asked). Results are
    kept in memory: see docs/spark.md for what that means after a restart of every node."""
    answer = _request(
        "POST", "/gossip/elect_once", {"key": key, "timeout": timeout}, timeout=timeout + 5.0
    )
    if not answer.get("run"):
        return None
    return fn()
