"""A Jepsen-style workload for partition tests: acknowledged writes, replicated over dist.

Put both processes in the tree of every node of a test cluster (`WORKLOAD_TREE`). While the
node's application runs, `OpsWriter` invents one operation at a time, sends it to the
`OpsStore` of every node its node monitor sees running, and *acknowledges* it once every
one of those nodes that is still running has stored it. Each store appends what it stores to
a file and, while running, keeps syncing with the stores of the other running nodes, so that
the stores converge after a heal.

The acknowledgement rule is the one an application on rabbitry should use (and the one
RabbitMQ's mirrored queues used for confirms): replicate to the running set and confirm when
all still-running replicas have it. It is only safe because the node monitor drops a node from
`running` and decides to pause *in the same step*, so a status without the lost peers is also
a status that says "paused" when this side is a minority. The writer reads the status again
just before each acknowledgement and never acknowledges while paused. Under pause_minority no
acknowledged operation may then live on a minority only: that is what
`rabbitry.testing.history` checks from the files this workload writes:

    <data_dir>/ops_history.jsonl   the writer's events: invoke, ack, timeout, start, stop
    <data_dir>/ops_store.jsonl     the store's contents, one operation per line

Files are flushed after each line (a SIGKILL of the node loses nothing written), not fsynced:
the tests crash processes, not machines. Creating `<data_dir>/ops_stop` makes the writer stop
inventing operations, so that a test can wait for the stores to converge.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from pathlib import Path
from typing import IO, Any

from monitors.dist import Message
from monitors.node_monitor.shell import NodeEvent
from rabbitry.node import current_node
from supervisors import Process

__all__ = [
    "HISTORY_FILE",
    "STOP_FILE",
    "STORE_FILE",
    "WORKLOAD_TREE",
    "OpsStore",
    "OpsWriter",
]

log = logging.getLogger("rabbitry.testing.workload")

HISTORY_FILE = "ops_history.jsonl"
STORE_FILE = "ops_store.jsonl"
STOP_FILE = "ops_stop"
STORE_NAME = "ops_store"
WRITER_NAME = "ops_writer"

WORKLOAD_TREE = """\
supervisor:
  strategy: one_for_one
  intensity: 10
  period: 10s
  children:
    - id: ops_store
      start: 'rabbitry.testing.workload:OpsStore'
    - id: ops_writer
      start: 'rabbitry.testing.workload:OpsWriter'
      kwargs: {every: 0.02}
"""

_TICK = "tick"
_SYNC = "sync"


class _JsonLines:
    """An append-only JSON-lines file, flushed after every line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[str] | None = path.open("a", encoding="utf-8")

    def append(self, record: dict[str, Any]) -> None:
        if self._file is not None:
            self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every complete JSON object line of `path` (a torn last line is skipped)."""
    records = []
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict):
                records.append(record)
    return records


class OpsStore(Process):
    """Stores operations sent by the writers of all nodes; syncs with the running peers."""

    def __init__(self, sync_every: float = 0.5) -> None:
        super().__init__()
        self.sync_every = sync_every
        self.ops: dict[str, dict[str, Any]] = {}

    def on_start(self) -> None:
        node = current_node()
        self._node = node
        self._kernel = node.kernel
        path = Path(node.config.data_dir) / STORE_FILE
        for record in read_jsonl(path):
            self.ops[record["op"]] = record
        self._file = _JsonLines(path)
        self._kernel.register(STORE_NAME, self.actor_ref)
        node.monitor.proxy().subscribe(self.actor_ref).get(timeout=5)
        self._sync_all()

    def on_stop(self) -> None:
        with contextlib.suppress(Exception):
            self._node.monitor.proxy().unsubscribe(self.actor_ref).get(timeout=5)
        with contextlib.suppress(Exception):
            self._kernel.unregister(STORE_NAME)
        self._file.close()

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Message):
            self._on_remote(message.node, message.msg)
        elif isinstance(message, NodeEvent):
            if message.event in ("node_up", "resumed") and message.node != self._node.name:
                self._sync_with(message.node)
        elif message == _SYNC:
            self._sync_all()
        else:
            return super().on_receive(message)
        return None

    def _on_remote(self, sender: str, msg: dict[str, Any]) -> None:
        kind = msg.get("t")
        if kind == "store":
            op = msg.get("op")
            if isinstance(op, str):
                self._add({"op": op, "by": msg.get("by", sender), "t": time.time()})
                self._kernel.send(sender, WRITER_NAME, {"t": "stored", "op": op})
        elif kind == "sync_req":
            self._kernel.send(sender, STORE_NAME, {"t": "sync", "ops": sorted(self.ops)})
        elif kind == "sync":
            for op in msg.get("ops") or []:
                if isinstance(op, str) and op not in self.ops:
                    self._add({"op": op, "by": "sync:" + sender, "t": time.time()})
        else:
            log.warning("ops_store: unknown message from %s dropped: %r", sender, msg)

    def _add(self, record: dict[str, Any]) -> None:
        if record["op"] not in self.ops:
            self.ops[record["op"]] = record
            self._file.append(record)

    def _sync_with(self, node: str) -> None:
        self._kernel.send(node, STORE_NAME, {"t": "sync_req"})

    def _sync_all(self) -> None:
        try:
            status = self._node.monitor.proxy().get_status().get(timeout=5)
        except Exception as exc:  # the monitor restarting; try again next round
            log.debug("ops_store: no status for a sync: %s", exc)
        else:
            for node in status["running"]:
                if node != self._node.name:
                    self._sync_with(node)
        self.send_after(self.sync_every, _SYNC)


class OpsWriter(Process):
    """Invents operations one at a time and acknowledges each once the running set has it."""

    def __init__(self, every: float = 0.02, timeout: float = 10.0, resend: float = 0.25) -> None:
        super().__init__()
        self.every = every
        self.timeout = timeout
        self.resend = resend
        self._seq = 0
        self._pending: dict[str, Any] | None = None

    def on_start(self) -> None:
        node = current_node()
        self._node = node
        self._kernel = node.kernel
        self._monitor = node.monitor.proxy()
        self._data_dir = Path(node.config.data_dir)
        self._boot = format(time.time_ns() // 1_000_000, "x")  # op ids stay unique per boot
        self._history = _JsonLines(self._data_dir / HISTORY_FILE)
        self._kernel.register(WRITER_NAME, self.actor_ref)
        self._event("start")
        self.send_after(self.every, _TICK)

    def on_stop(self) -> None:
        with contextlib.suppress(Exception):
            self._kernel.unregister(WRITER_NAME)
        self._event("stop", pending=self._pending["op"] if self._pending else None)
        self._history.close()

    def on_receive(self, message: Any) -> Any:
        if message == _TICK:
            self._tick()
            self.send_after(self.every, _TICK)
        elif isinstance(message, Message):
            msg = message.msg
            pending = self._pending
            if msg.get("t") == "stored" and pending is not None and msg.get("op") == pending["op"]:
                pending["got"].add(message.node)
                self._settle()
        else:
            return super().on_receive(message)
        return None

    def _event(self, ev: str, **fields: Any) -> None:
        self._history.append({"ev": ev, "node": self._node.name, "t": time.time(), **fields})

    def _tick(self) -> None:
        pending = self._pending
        if pending is not None:
            self._settle()
            if self._pending is pending and time.monotonic() >= pending["resend_at"]:
                # a store that was not registered yet (its application starting) dropped it
                self._send_op(pending, pending["replicas"] - pending["got"])
            return
        if (self._data_dir / STOP_FILE).exists():
            return
        status = self._monitor.get_status().get(timeout=5)
        if status["paused"]:
            return
        self._seq += 1
        op = f"{self._node.name.partition('@')[0]}-{self._boot}-{self._seq}"
        replicas = sorted(status["running"])
        self._pending = {
            "op": op,
            "replicas": set(replicas),
            "got": set(),
            "deadline": time.monotonic() + self.timeout,
        }
        self._event("invoke", op=op, replicas=replicas)
        self._send_op(self._pending, replicas)

    def _send_op(self, pending: dict[str, Any], nodes: Any) -> None:
        pending["resend_at"] = time.monotonic() + self.resend
        for node in sorted(nodes):
            msg = {"t": "store", "op": pending["op"], "by": self._node.name}
            self._kernel.send(node, STORE_NAME, msg)

    def _settle(self) -> None:
        """Acknowledge the pending operation if every replica still running has it."""
        pending = self._pending
        assert pending is not None
        status = self._monitor.get_status().get(timeout=5)
        if status["paused"]:
            return  # never acknowledge while paused; the pause will stop us anyway
        needed = pending["replicas"] & set(status["running"])
        if needed <= pending["got"]:
            self._event("ack", op=pending["op"], replicas=sorted(pending["got"]))
            self._pending = None
        elif time.monotonic() > pending["deadline"]:
            self._event("timeout", op=pending["op"], replicas=sorted(pending["got"]))
            self._pending = None
