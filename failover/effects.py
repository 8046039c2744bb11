"""Effects of the Redis failover cores, and the one input type the shell builds for them.

The configuration server core (RCS, server_core.py) and client core (RCC, client_core.py) never
touch Redis, a file, the bus or a timer. They return these effects; the actor shell performs
them (or the simulator does, tests/sim/failover.py) and feeds the answers back as events:

| effect | performed by the shell as | answered with |
|---|---|---|
| `Publish(routing_key, body)` | `bus.publish(...)` | - |
| `QueryRedis(request_id, servers)` | INFO replication of each server, from THIS host | `core.redis_info(request_id, {server: ServerInfo, REFUSED or None}, now)` |
| `WatchServer(server)` | hold one idle connection to `server` (None: drop it) | `core.connection_lost(server, now)` when the server closes it |
| `Promote(request_id, server)` | `REPLICAOF NO ONE` on `server` | `core.redis_done(request_id, ok, now)` |
| `MakeReplica(request_id, server, master)` | `REPLICAOF host port` on `server` | `core.redis_done(request_id, ok, now)` |
| `SetMaster(server)` | the RCS's own master file := server | - |
| `ReadMasterFile()` | read this host's master file | `core.master_file_read(content or None, now)` |
| `WriteMasterFile(server)` | write it (None: empty it), atomically, before the next effect | - |
| `Notify(text)` | log it (warning), publish a `system_notification`, keep it for the status page | - |

`Publish` comes from the gossip effects and `SetTimer`/`CancelTimer`/`Log` from the common
ones, so the simulator's bus and engine perform them unchanged. Request ids let a core match an
answer to its question and drop a late answer to a question it no longer asks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from monitors.effects import CancelTimer, Log, SetTimer
from monitors.gossip.effects import Direct, Publish

# ---- what the shell tells the cores about a Redis server ----------------------------------------


@dataclass(frozen=True)
class ServerInfo:
    """One server's replication state as seen from the asking host (INFO replication).

    `master` is the "host:port" a replica follows (None for a master); `offset` the replication
    offset (a replica's slave_repl_offset, a master's master_repl_offset), what the RCS compares
    to promote the replica that has the most data; `link_up` whether a replica's link to its
    master is up. An unreachable server is not a ServerInfo but None.
    """

    role: str  # "master" or "slave" (Redis's own word; "replica" is accepted and normalised)
    master: str | None = None
    offset: int = 0
    link_up: bool = True
    # Redis's replication ids: a promoted replica keeps its old master's id as `replid2`, so
    # the RCS can tell a master that continues the old master's data from an empty one
    # ("" when unknown, as in the simulator)
    replid: str = ""
    replid2: str = ""

    def __post_init__(self) -> None:
        if self.role == "replica":
            object.__setattr__(self, "role", "slave")

    @property
    def is_master(self) -> bool:
        return self.role == "master"

    def replica_of(self, server: str) -> bool:
        return self.role == "slave" and self.master == server

    @staticmethod
    def from_info(info: Mapping[str, Any]) -> ServerInfo:
        """From redis-py's parsed INFO replication, or failover.redis_ops' normalised dict
        (which has `master_address`). Missing offsets count as 0."""
        role = str(info.get("role") or "")
        master = info.get("master_address")
        if master is None and info.get("master_host") and info.get("master_port"):
            host = str(info["master_host"])
            host = f"[{host}]" if ":" in host else host
            master = f"{host}:{int(info['master_port'])}"
        if role == "master":
            offset = info.get("master_repl_offset")
        else:
            offset = info.get("slave_repl_offset", info.get("master_repl_offset"))
        try:
            off = int(offset) if offset is not None else 0
        except (TypeError, ValueError):
            off = 0
        nested = info.get("raw")
        raw = nested if isinstance(nested, Mapping) else info
        return ServerInfo(
            role=role,
            master=None if role == "master" else master,
            offset=off,
            link_up=info.get("master_link_status", "up") == "up",
            replid=str(info.get("master_replid") or raw.get("master_replid") or ""),
            replid2=str(raw.get("master_replid2") or ""),
        )


@dataclass(frozen=True)
class Unreachable:
    """A server that could not be asked, and how. `refused`: the connection was refused at
    once (the host answered that nothing listens: the process is gone). Otherwise there was no
    answer in time (the host, the link or a hung process): it may still be running, and
    taking writes from hosts that do reach it. The cores treat None as no answer."""

    refused: bool = False


REFUSED = Unreachable(refused=True)
NO_ANSWER = Unreachable(refused=False)

Infos = Mapping[str, "ServerInfo | Unreachable | None"]

# ---- Redis -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueryRedis:
    """Ask every server in `servers` for its replication state, from this host, and answer
    `redis_info(request_id, {server: ServerInfo | Unreachable | None}, now)`: REFUSED for a
    server whose host refused the connection, NO_ANSWER (or None) for one that could not be
    asked within the shell's Redis timeout. Every server must be in the answer."""

    request_id: int
    servers: tuple[str, ...]


@dataclass(frozen=True)
class WatchServer:
    """Keep one idle connection open to `server` (replacing any other watch; None: drop it)
    and answer `connection_lost(server, now)` when the server side closes it. A SIGKILLed
    process's sockets are closed by its kernel at once, so this tells the RCS of a dead master
    within a round trip instead of at its next check; a hung process or a cut link closes
    nothing, and leaves the timing to the checks."""

    server: str | None


@dataclass(frozen=True)
class Promote:
    """`REPLICAOF NO ONE` on `server`; answer `redis_done(request_id, ok, now)`."""

    request_id: int
    server: str


@dataclass(frozen=True)
class MakeReplica:
    """`REPLICAOF <master host> <master port>` on `server`; answer `redis_done(...)`."""

    request_id: int
    server: str
    master: str


# ---- files and notifications --------------------------------------------------------------------


@dataclass(frozen=True)
class SetMaster:
    """The RCS's own record of the master (its master file): what a restarted or newly active
    RCS on this host starts from."""

    server: str


@dataclass(frozen=True)
class ReadMasterFile:
    """Read this host's master file; answer `master_file_read(content or None, now)`."""


@dataclass(frozen=True)
class WriteMasterFile:
    """Write `server` ("host:port") into this host's master file, or empty it (None): what the
    workers on this host use. It must be done (atomically: write and rename) before the shell
    performs the next effect, because the next one may tell the RCS it is done."""

    server: str | None


@dataclass(frozen=True)
class Notify:
    """Something an operator should hear about (Beetle's system_notification)."""

    text: str


FailoverEffect = (
    Publish
    | Direct
    | QueryRedis
    | WatchServer
    | Promote
    | MakeReplica
    | SetMaster
    | ReadMasterFile
    | WriteMasterFile
    | Notify
    | SetTimer
    | CancelTimer
    | Log
)

__all__ = [
    "NO_ANSWER",
    "REFUSED",
    "CancelTimer",
    "Direct",
    "FailoverEffect",
    "Infos",
    "Log",
    "MakeReplica",
    "Notify",
    "Promote",
    "Publish",
    "QueryRedis",
    "ReadMasterFile",
    "ServerInfo",
    "SetMaster",
    "SetTimer",
    "Unreachable",
    "WatchServer",
    "WriteMasterFile",
]
