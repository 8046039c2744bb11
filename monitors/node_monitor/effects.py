"""The node monitor's own effects, next to the common ones in monitors/effects.py.

The core never stops an application, writes a file or calls a subscriber itself: it returns
one of these and the actor shell (or the simulator) does it. That keeps the core a pure
function of its inputs, which is what lets the simulator replay a failing schedule exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

from monitors.effects import Effect


@dataclass(frozen=True)
class PauseApp:
    """Stop the node's application tree; dist and the monitor keep running.

    RabbitMQ's `rabbit:stop()` from `rabbit_outside_app_process`. The shell answers with
    `core.app_stopped(now)` once the tree is down. PauseApp and ResumeApp are applied in the
    order they were returned: a PauseApp that arrives while a ResumeApp is still starting the
    tree stops it again right after (never dropped: that is RabbitMQ #2175).
    """

    reason: str


@dataclass(frozen=True)
class ResumeApp:
    """Start the application tree again; the shell answers with `core.app_started(now)`."""

    reason: str = ""


@dataclass(frozen=True)
class SaveClusterStatus:
    """Write `cluster_nodes.config` (all, disc) and `nodes_running_at_shutdown` (running).

    The shell writes them with `status.write_cluster_status`, atomically. Lists are sorted.
    """

    all: tuple[str, ...]
    disc: tuple[str, ...]
    running: tuple[str, ...]


@dataclass(frozen=True)
class Notify:
    """Tell the local subscribers (RabbitMQ's `{subscribe, Pid}`) about `event` on `node`.

    Events: node_up, node_down (a peer's application started / stopped or its node went),
    partition (a partition with `node` was recorded), partial_partition, paused, resumed
    (this node; `node` is the node itself).
    """

    event: str
    node: str


NodeMonitorEffect = Effect | PauseApp | ResumeApp | SaveClusterStatus | Notify
