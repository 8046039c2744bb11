"""Distribution layer (Erlang's net_kernel): node names, cookie auth, the TCP mesh between
nodes, ticks, NodeUp/NodeDown, and processes on other nodes (RemoteRef: send, call, link,
monitor). See docs/dist.md.
"""

from monitors.dist.errors import (
    DistError,
    DistTimeout,
    FrameTooLarge,
    NodeUnreachable,
    RemoteCallError,
)
from monitors.dist.messages import (
    CONNECTION_CLOSED,
    CONNECTION_SETUP_FAILED,
    DISCONNECT,
    NET_TICK_TIMEOUT,
    Message,
    NodeDown,
    NodeUp,
)
from monitors.dist.names import BadAddress, BadNodeName, new_creation, parse_address, validate_node
from monitors.dist.netkernel import NetKernel
from monitors.dist.remote import RemoteRef

__all__ = [
    "CONNECTION_CLOSED",
    "CONNECTION_SETUP_FAILED",
    "DISCONNECT",
    "NET_TICK_TIMEOUT",
    "BadAddress",
    "BadNodeName",
    "DistError",
    "DistTimeout",
    "FrameTooLarge",
    "Message",
    "NetKernel",
    "NodeDown",
    "NodeUnreachable",
    "NodeUp",
    "RemoteCallError",
    "RemoteRef",
    "new_creation",
    "parse_address",
    "validate_node",
]
