"""The effects of the gossip cores (mingle, gossip, elections), next to the common ones.

The cores never touch the bus, a timer or the application: they return these, and the actor
shell (or the simulator, tests/sim/gossip.py) performs them. Two groups:

- bus effects, `Publish` and `Direct`, which the shell hands to `monitors.bus` as they are
  (`bus.publish(routing_key, body)` / `bus.send(node, routing_key, body)`);
- application-facing effects, which the shell turns into callbacks, futures and log lines.

Timers and log lines are the common `SetTimer`, `CancelTimer` and `Log` of monitors/effects.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from monitors.effects import CancelTimer, Log, SetTimer

# ---- bus ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Publish:
    """Broadcast `body` (a JSON object) under `routing_key` to every node on the bus.

    The bus may echo it back to us; the core recognises its own messages and drops them.
    """

    routing_key: str
    body: dict[str, Any]


@dataclass(frozen=True)
class Direct:
    """Send `body` to the queue of one node only (a mingle reply, an election result for a
    node that asked late, a resync hello)."""

    node: str
    routing_key: str
    body: dict[str, Any]


# ---- membership (Celery's on_node_join / on_node_leave / on_node_lost) --------------------------


@dataclass(frozen=True)
class NodeJoined:
    """`node` came alive for us: its worker-online, first heartbeat or mingle reply arrived
    (again, after it left or was lost; or with a new pid, after a restart we had missed)."""

    node: str


@dataclass(frozen=True)
class NodeLeft:
    """`node` said goodbye (worker-offline)."""

    node: str


@dataclass(frozen=True)
class NodeLost:
    """`node` missed its heartbeats (nothing for 2 x its heartbeat interval, seen at a lost
    check), or reappeared with another pid (it restarted without saying goodbye)."""

    node: str


# ---- elections ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunElection:
    """We won election `election_id`: run the handler registered for `topic` with `action`.

    Emitted once per election, on the winner only, and never while the node is paused (a
    winner that was paused when it learned of its win runs the action when it resumes).
    """

    topic: str
    action: Any
    election_id: str


@dataclass(frozen=True)
class ElectionDecided:
    """Election `election_id` was decided: `winner` (a node name) runs `topic`'s handler.

    Emitted on every node that learns the result, once per election: the shell completes
    whatever waits on the id (the blocking `elect`) and may tell the application.
    """

    election_id: str
    winner: str
    topic: str


@dataclass(frozen=True)
class ElectionFailed:
    """An election we asked for ended without a result (`reason` says why: its deadline or
    attempts ran out, the node stopped, gossip is off). Only the nodes that asked get it."""

    election_id: str
    reason: str


# ---- mingle and revokes ------------------------------------------------------------------------


@dataclass(frozen=True)
class MingleDone:
    """The start-up sync is over. `synced_with` names the nodes whose clock and revoked set we
    merged (sorted); `all_alone` is true when nobody answered; `skipped` when mingle is off
    (`without_mingle`). Emitted again after each re-sync that follows a bus reconnect."""

    synced_with: tuple[str, ...]
    all_alone: bool
    skipped: bool = False


@dataclass(frozen=True)
class Revoked:
    """Task ids newly revoked by a revoke broadcast (ours or a peer's): the shell may stop
    them if they are running. Ids merged by a mingle sync are not reported here (there can be
    tens of thousands); ask `core.is_revoked(id)` before running a task."""

    ids: tuple[str, ...]


GossipEffect = (
    Publish
    | Direct
    | NodeJoined
    | NodeLeft
    | NodeLost
    | RunElection
    | ElectionDecided
    | ElectionFailed
    | MingleDone
    | Revoked
    | SetTimer
    | CancelTimer
    | Log
)

__all__ = [
    "CancelTimer",
    "Direct",
    "ElectionDecided",
    "ElectionFailed",
    "GossipEffect",
    "Log",
    "MingleDone",
    "NodeJoined",
    "NodeLeft",
    "NodeLost",
    "Publish",
    "Revoked",
    "RunElection",
    "SetTimer",
]
