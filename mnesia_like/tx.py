"""Transactions: the records and constants that the coordinator, participant and
termination parts of MnesiaCore share (coordinator.py, participant.py, termination.py).

Flow (docs/mnesia_like.md has the picture):

- A read, match or select takes its lock on *every* active replica of the table (replicas
  that hold the table loaded or are loading it), through `lock` messages, including to this
  node itself: one code path for local and remote replicas. A read also fetches the value
  from one replica (this node's when it has the table loaded).
- Writes and deletes are buffered without a lock round: the prepare takes their write locks
  (`locks` in the prepare), on every replica written, as a lock round would (granted, queued
  or "die"); the participant votes once it holds them. A read with lock="write" (Mnesia's
  wread) takes the record's write lock at the read instead; a later write or delete of it
  needs no lock at the prepare then.
- Deadlocks: wait-die (locks.py). A "die" answer (to a lock round, or a no vote from a
  prepare's locks) restarts the transaction; it keeps its age (a caller that chose the tid
  names the attempt before, `prev`, to keep its age).
- Commit: two-phase. `prepare` carries each participant's ops and the replica set per table.
  A participant votes no if it lost the transaction's locks (it restarted, or saw the
  coordinator go), if a lock of the prepare dies, or if the replica set misses a replica it
  knows to be active (a node loading the table since): the coordinator restarts the
  transaction. After all yes votes the coordinator gives the transaction its stamp (one
  Lamport stamp for all its writes), records "committed" (in its decision log too, with the
  stamp, unless it is the only participant: then nobody can be in doubt) and sends `commit`
  with the stamp; each participant writes its disc copies (DiscCommit) *before* its `ack`,
  applies, releases. The user is answered once every participant acked or went down.
  Why the stamp waits for the decision: only then does every participant hold the locks and
  has told the coordinator its clock (with its vote), so the stamp is newer than every entry
  of the records written. A stamp given at the prepare could be older than that of a
  younger transaction the prepare waited for (or of one the coordinator never heard of: a
  write takes no lock round), and newest-stamp-wins would drop this commit's writes.
- A participant that goes down before the decision aborts the transaction (restart).
- A prepared participant that loses the coordinator asks the others (`outcome_q`):
  "committed" (with the stamp) -> commit, "aborted" -> abort. Otherwise it waits for the coordinator (blocking,
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
# The disc log of this node's prepare records (parallel commit, see coordinator.py): per tid,
# {"c": coordinator, "ops": ..., "parts": ..., "p": proposed stamp} while prepared, then
# {"d": "committed", "st": stamp} once applied here. Its DiscCommits carry tid 0: the shell
# (or the simulator) numbers them as they reach the log, since some wait for an fsync.
PREPARED = "_prepared"
MAX_PREPARED = 10000  # committed markers kept on disc (older ones are pruned)
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
    stamp: list[Any] | None = None  # given at the decision (before it: the prepare's)
    schema_reply: Any = None
    # (table, key_json) -> the replicas whose write lock of the record the prepare takes
    # (a write or delete buffered without a lock round)
    lazy: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    lock_nodes: set[str] = field(default_factory=set)  # the nodes asked for a lock so far
    parallel: bool = False  # parallel commit: committed once every participant prepared
    proposals: dict[str, list[Any]] = field(default_factory=dict)  # node -> proposed stamp


@dataclass
class PartTx:
    """A transaction as one participant sees it (termination adds the in-doubt fields)."""

    coord: str
    age: list[Any]
    prepared: bool = False
    ops: list[Any] = field(default_factory=list)
    parts: dict[str, list[str]] = field(default_factory=dict)
    waiting: tuple[int, Any, str, str | None] | None = None  # (seq, want, table, key)
    # a prepare waiting for the write locks it takes (see Participant.on_prepare): the
    # message, and the [table, key_json] locks still to take
    lazy: tuple[dict[str, Any], list[list[str]]] | None = None
    stamp: list[Any] | None = None  # the commit's stamp, given at the decision
    doubt_since: float | None = None
    answers: dict[str, str] = field(default_factory=dict)
    parallel: bool = False  # prepared durably (a prepare record), for a parallel commit
    proposal: list[Any] | None = None  # the stamp this participant proposed with its vote
    proposals: dict[str, list[Any]] = field(default_factory=dict)  # others', from answers


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


def max_stamp(stamps: list[list[Any]]) -> list[Any]:
    """The commit stamp of a parallel commit: the newest of the participants' proposals."""
    return list(max((int(p[0]), str(p[1])) for p in stamps))


def stamp_ok(stamp: Any) -> bool:
    """Whether `stamp` (from a commit, an outcome answer or the decision log) is a stamp."""
    return (
        isinstance(stamp, list)
        and len(stamp) == 2
        and type(stamp[0]) is int
        and isinstance(stamp[1], str)
    )
