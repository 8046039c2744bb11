"""Transactions: the records and constants that the coordinator, participant and
termination parts of MnesiaCore share (coordinator.py, participant.py, termination.py).

Flow (docs/mnesia_like.md has the picture):

- Every operation of a transaction takes its lock on *every* active replica of the table
  (replicas that hold the table loaded or are loading it), through `lock` messages, including
  to this node itself: one code path for local and remote replicas. A read also fetches the
  value from one replica (this node's when it has the table loaded). Writes are buffered.
- A read with lock="write" (Mnesia's wread) takes the record's write lock; a later write or
  delete of a record whose write lock the transaction holds on every active replica is
  buffered without a lock round.
- Deadlocks: wait-die (locks.py). A "die" answer restarts the transaction; it keeps its age
  (a caller that chose the tid names the attempt before, `prev`, to keep its age).
- Commit: two-phase. `prepare` carries each participant's ops (stamped with one Lamport stamp
  for the whole transaction) and the replica set per table. A participant votes no if it lost
  the transaction's locks (it restarted, or saw the coordinator go) or if the replica set
  misses a replica it knows to be active (a node loading the table since): the coordinator
  restarts the transaction. After all yes votes the coordinator records "committed" (in its
  decision log too, unless it is the only participant: then nobody can be in doubt) and sends
  `commit`; each participant writes its disc copies (DiscCommit) *before* its `ack`, applies,
  releases. The user is answered once every participant acked or went down.
- A participant that goes down before the decision aborts the transaction (restart).
- A prepared participant that loses the coordinator asks the others (`outcome_q`):
  "committed" -> commit, "aborted" -> abort. Otherwise it waits for the coordinator (blocking,
  as 2PC and Mnesia do): a coordinator that was only cut off or frozen may have decided and
  applied its own part, and answers when it is back; one that restarted answers "unknown",
  which proves nothing was decided that could still surface: abort. It asks again every
  `outcome_retry` s, and gives up with a presumed abort and a warning after
  `outcome_timeout` s.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

SCHEMA = "schema"  # the pseudo-table of schema operations: replicated on every running db node
DECISIONS = "_decisions"  # the disc log of commit decisions this node took as coordinator
MAX_REMEMBERED = 20000  # outcomes and dead tids kept for late questions (bounded)
MAX_DECISIONS = 10000  # decisions kept on disc (older ones are pruned)


@dataclass
class Op:
    """The one operation of a transaction in flight (its lock round)."""

    kind: str  # read | write | delete | match | select | schema
    table: str
    key: str | None
    req: int | None
    awaiting: set[str]
    source: str | None = None
    value: Any = None
    record: Any = None
    arg: Any = None
    mode: str = "read"
    targets: frozenset[str] = frozenset()  # the replicas asked for the lock


@dataclass
class CoordTx:
    """A transaction as its coordinator sees it."""

    tid: str
    age: list[Any]
    writes: dict[tuple[str, str], Any] = field(default_factory=dict)  # (table, kj) -> rec|None
    nodes: set[str] = field(default_factory=set)
    write_nodes: dict[str, set[str]] = field(default_factory=dict)
    # (table, key_json) -> the replicas on which this transaction holds the record's write
    # lock (granted to a wread, write or delete): a later write or delete of it needs no
    # lock round while that set still covers every active replica
    wlocked: dict[tuple[str, str], frozenset[str]] = field(default_factory=dict)
    seq: int = 0
    op: Op | None = None
    phase: str = "active"  # active | preparing | committing
    pending: set[str] = field(default_factory=set)  # votes, then acks
    req: int | None = None  # the commit request
    stamp: list[Any] | None = None
    schema_reply: Any = None


@dataclass
class PartTx:
    """A transaction as one participant sees it (termination adds the in-doubt fields)."""

    coord: str
    age: list[Any]
    prepared: bool = False
    ops: list[Any] = field(default_factory=list)
    parts: dict[str, list[str]] = field(default_factory=dict)
    waiting: tuple[int, Any, str, str | None] | None = None  # (seq, want, table, key)
    doubt_since: float | None = None
    answers: dict[str, str] = field(default_factory=dict)


class Bounded(OrderedDict):
    """A dict that forgets its oldest keys beyond MAX_REMEMBERED."""

    def put(self, key: str, value: Any) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > MAX_REMEMBERED:
            self.popitem(last=False)


def age_ok(age: list[Any]) -> bool:
    return (
        len(age) == 3
        and isinstance(age[0], int)
        and isinstance(age[1], str)
        and isinstance(age[2], int)
    )
