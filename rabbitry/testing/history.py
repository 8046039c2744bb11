"""A history checker for the partition workload, in the spirit of Jepsen's.

`collect(data_dirs)` reads what `rabbitry.testing.workload` wrote on every node: the writers'
events (invoke, ack, timeout) and the stores' contents. `check(...)` verifies, with no clock
and no network:

- `minority_ack`: (pause_minority) an operation acknowledged by a node on a minority side
  (by the fault schedule: fewer than a strict majority of the nodes could exchange bytes with
  it both ways) and held by fewer than a strict majority: a promise that side cannot keep;
- `phantom_replica`: an acknowledgement names a replica whose store never had the operation;
- `lost`: an acknowledged operation missing from a node's store after the heal (a false
  promise: confirmed but not survived);
- `diverged`: the stores differ after the heal (the cluster did not converge);
- `unknown_op`: a store holds an operation no writer ever invoked.

A failed check prints the violations, the fault schedule and the history around each
violation, so that the run can be understood without re-running it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rabbitry.testing.cluster import Fault
from rabbitry.testing.workload import HISTORY_FILE, STORE_FILE, read_jsonl

__all__ = ["History", "HistoryViolation", "Violation", "check", "collect", "side_at", "violations"]


@dataclass
class History:
    """Everything the workload wrote: events in time order and each node's store."""

    events: list[dict[str, Any]] = field(default_factory=list)
    stores: dict[str, set[str]] = field(default_factory=dict)

    @property
    def acked(self) -> dict[str, dict[str, Any]]:
        """op -> its ack event."""
        return {e["op"]: e for e in self.events if e.get("ev") == "ack"}

    @property
    def invoked(self) -> set[str]:
        return {e["op"] for e in self.events if e.get("ev") == "invoke"}

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for event in self.events:
            counts[event.get("ev", "?")] = counts.get(event.get("ev", "?"), 0) + 1
        sizes = ", ".join(f"{n}={len(ops)}" for n, ops in sorted(self.stores.items()))
        kinds = ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))
        return f"events: {kinds}; stores: {sizes}"


@dataclass(frozen=True)
class Violation:
    kind: str  # minority_ack | phantom_replica | lost | diverged | unknown_op
    op: str | None
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.op or '-'}: {self.detail}"


class HistoryViolation(AssertionError):
    """The history breaks an invariant; the message holds the whole story."""

    def __init__(self, violations: Sequence[Violation], report: str) -> None:
        super().__init__(report)
        self.violations = list(violations)


def collect(data_dirs: dict[str, Path]) -> History:
    """Read every node's history and store files: {node: data_dir}."""
    history = History()
    for node, data_dir in data_dirs.items():
        history.events += read_jsonl(Path(data_dir) / HISTORY_FILE)
        history.stores[node] = {r["op"] for r in read_jsonl(Path(data_dir) / STORE_FILE)}
    history.events.sort(key=lambda e: (e.get("t", 0.0), e.get("node", "")))
    return history


def side_at(faults: Sequence[Fault], node: str, t: float) -> list[str] | None:
    """`node`'s side after the last fault that began at or before `t` (None: no fault yet,
    every node reached every node)."""
    side = None
    for fault in faults:
        if fault.t > t:
            break
        side = fault.sides.get(node)
    return side


def violations(
    history: History,
    cluster_size: int,
    *,
    quorum: bool,
    healed: bool,
    faults: Sequence[Fault] = (),
) -> list[Violation]:
    """Every invariant the history breaks.

    `quorum`: no acknowledgement from a minority side (pause_minority), judged by `faults`.
    `healed`: the stores were read after a heal and convergence: none may lack an
    acknowledged operation, and all must be equal.
    """
    found: list[Violation] = []
    majority = cluster_size // 2 + 1
    acked = history.acked
    for op, ack in sorted(acked.items()):
        replicas = ack.get("replicas") or []
        side = side_at(faults, ack["node"], ack.get("t", 0.0))
        if quorum and side is not None and len(side) < majority and len(replicas) < majority:
            found.append(
                Violation(
                    "minority_ack",
                    op,
                    f"acknowledged by {ack['node']} at {ack.get('t', 0.0):.3f} with replicas "
                    f"{replicas}, on the side {side}: {len(side)} of {cluster_size} nodes, a "
                    f"majority is {majority}",
                )
            )
        for replica in replicas:
            store = history.stores.get(replica)
            if store is not None and op not in store:
                found.append(
                    Violation("phantom_replica", op, f"{replica} is named but never stored it")
                )
    invoked = history.invoked
    for node, store in sorted(history.stores.items()):
        for op in sorted(store - invoked):
            found.append(Violation("unknown_op", op, f"in {node}'s store, never invoked"))
    if healed:
        for node, store in sorted(history.stores.items()):
            for op in sorted(set(acked) - store):
                found.append(Violation("lost", op, f"acknowledged but missing on {node}"))
        contents = {frozenset(s) for s in history.stores.values()}
        if len(contents) > 1:
            union = set().union(*history.stores.values())
            gaps = {n: len(union - s) for n, s in sorted(history.stores.items())}
            found.append(Violation("diverged", None, f"operations missing per node: {gaps}"))
    return found


def _around(history: History, ops: Iterable[str | None], width: int = 8) -> list[str]:
    """The events near each violating operation (the whole history if it is short)."""
    events = history.events
    if len(events) <= 4 * width:
        keep = set(range(len(events)))
    else:
        wanted = {op for op in ops if op}
        keep = set()
        for i, event in enumerate(events):
            if event.get("op") in wanted or event.get("ev") in ("start", "stop"):
                keep.update(range(max(0, i - width), min(len(events), i + width + 1)))
    lines, last = [], -1
    for i in sorted(keep):
        if i != last + 1:
            lines.append("    ...")
        e = events[i]
        rest = {k: v for k, v in e.items() if k not in ("t", "ev", "node", "op")}
        lines.append(
            f"    {e.get('t', 0.0):.3f} {e.get('node')} {e.get('ev')} {e.get('op', '')} {rest}"
        )
        last = i
    return lines


def check(
    history: History,
    cluster_size: int,
    *,
    quorum: bool,
    healed: bool = True,
    faults: Sequence[Fault] = (),
) -> History:
    """Raise HistoryViolation (an AssertionError) unless every invariant holds.

    `faults` is the fault schedule (`Cluster.faults`), used to judge sides and printed with
    the history. Returns the history, for chaining.
    """
    __tracebackhide__ = True
    found = violations(history, cluster_size, quorum=quorum, healed=healed, faults=faults)
    if not found:
        return history
    lines = [f"{len(found)} history violation(s):"]
    lines += [f"  {v}" for v in found[:50]]
    if len(found) > 50:
        lines.append(f"  ... and {len(found) - 50} more")
    lines.append(f"summary: {history.summary()}")
    lines.append("fault schedule:")
    lines += [f"    {fault}" for fault in faults] or ["    none"]
    lines.append("history:")
    lines += _around(history, (v.op for v in found))
    raise HistoryViolation(found, "\n".join(lines))
