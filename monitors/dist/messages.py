"""What the distribution layer puts in Process mailboxes: NodeUp, NodeDown and Message."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# NodeDown reasons, as net_kernel:monitor_nodes(true, [nodedown_reason]) gives them.
CONNECTION_CLOSED = "connection_closed"
"""The socket closed or failed (the peer died, or sent a bad frame)."""
NET_TICK_TIMEOUT = "net_tick_timeout"
"""Nothing arrived from the peer for net_ticktime seconds (stopped, hung, or cut off)."""
DISCONNECT = "disconnect"
"""This node dropped the connection: disconnect(), or the NetKernel stopped."""
CONNECTION_SETUP_FAILED = "connection_setup_failed"
"""The connection broke after NodeUp but before the peer confirmed the handshake (for
example the connector rejected this node's name)."""

REASONS = (CONNECTION_CLOSED, NET_TICK_TIMEOUT, DISCONNECT, CONNECTION_SETUP_FAILED)


@dataclass(frozen=True, slots=True)
class NodeUp:
    """A connection to `node` came up (Erlang's {nodeup, Node}).

    `creation` tells incarnations apart: a node that restarted comes back with a new one.
    """

    node: str
    creation: int


@dataclass(frozen=True, slots=True)
class NodeDown:
    """The connection to `node` went (Erlang's {nodedown, Node, [{nodedown_reason, R}]}).

    `reason` is one of "connection_closed", "net_tick_timeout", "disconnect",
    "connection_setup_failed".
    """

    node: str
    reason: str


@dataclass(frozen=True, slots=True)
class Message:
    """A message from another node, as a registered Process receives it in `on_receive`.

    Both `send` and `call` deliver this one type: `node` is the sender's node name, `msg` the
    JSON object that was sent (decoded: tuples arrive as lists, dict keys as strings). For a
    `call`, the handler's return value is the reply.
    """

    node: str
    msg: dict[str, Any]
