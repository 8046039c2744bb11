"""Layer 3: a Mnesia-like replicated store for cluster state.

Tables of JSON records replicated as ram or disc copies on the nodes of a schema; dirty
operations and transactions (locks on every active replica, two-phase commit, wait-die
restarts); disc copies as checksummed logs with snapshots; the mnesia monitor's events
(mnesia_up, mnesia_down, inconsistent_database); and healing after a partition (autoheal,
lww). docs/mnesia_like.md is the guide.

    from mnesia_like import Mnesia, Schema
    ref = Mnesia.start(kernel_ref, "./data/a", extra_db_nodes=["b@h"], merge="autoheal")
    db = Schema(ref)
    db.create_table("users", attributes=["name", "email"], disc_copies=["a@h", "b@h"])
    db.transaction(lambda tx: tx.write("users", {"name": "ann", "email": "a@x"}))
"""

from mnesia_like.core import MnesiaCore, winner_side
from mnesia_like.effects import MnesiaEvent
from mnesia_like.errors import (
    Aborted,
    BadArgument,
    BadRecord,
    MnesiaError,
    NodeNotRunning,
    NoSuchTable,
    Restart,
    SchemaConflict,
    TableExists,
    TablesNotLoaded,
    Timeout,
    UnknownNode,
)
from mnesia_like.shell import Mnesia, Schema, Tx

__all__ = [
    "Aborted",
    "BadArgument",
    "BadRecord",
    "Mnesia",
    "MnesiaCore",
    "MnesiaError",
    "MnesiaEvent",
    "NoSuchTable",
    "NodeNotRunning",
    "Restart",
    "Schema",
    "SchemaConflict",
    "TableExists",
    "TablesNotLoaded",
    "Timeout",
    "Tx",
    "UnknownNode",
    "winner_side",
]
