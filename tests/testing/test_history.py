"""The history checker on hand-made histories: each invariant caught, and clean ones pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rabbitry.testing.cluster import Fault
from rabbitry.testing.history import History, HistoryViolation, check, collect, side_at, violations

A, B, C = "a@h", "b@h", "c@h"
FULL = {A: [A, B, C], B: [A, B, C], C: [A, B, C]}
A_ALONE = {A: [A], B: [B, C], C: [B, C]}


def ev(t: float, node: str, kind: str, op: str, replicas: list[str] | None = None) -> dict:
    e = {"t": t, "node": node, "ev": kind, "op": op}
    if replicas is not None:
        e["replicas"] = replicas
    return e


def history(events: list[dict], stores: dict[str, set[str]]) -> History:
    return History(sorted(events, key=lambda e: e["t"]), stores)


def kinds(found: list) -> list[str]:
    return sorted(v.kind for v in found)


def test_a_clean_history_passes() -> None:
    h = history(
        [ev(1, A, "invoke", "a1", [A, B, C]), ev(2, A, "ack", "a1", [A, B, C])],
        {A: {"a1"}, B: {"a1"}, C: {"a1"}},
    )
    assert violations(h, 3, quorum=True, healed=True) == []
    assert check(h, 3, quorum=True) is h


def test_an_ack_alone_on_a_minority_side_is_a_false_promise() -> None:
    faults = [Fault(1.5, "partition a | b c", A_ALONE)]
    h = history(
        [ev(2, A, "invoke", "a1", [A]), ev(3, A, "ack", "a1", [A])],
        {A: {"a1"}, B: set(), C: set()},
    )
    found = violations(h, 3, quorum=True, healed=False, faults=faults)
    assert kinds(found) == ["minority_ack"]
    assert "on the side ['a@h']" in found[0].detail
    # without the quorum rule (pause_if_all_down) a lone side may acknowledge
    assert violations(h, 3, quorum=False, healed=False, faults=faults) == []


def test_an_ack_held_by_a_majority_is_fine_even_on_a_minority_side() -> None:
    """Replicated to b before the cut, acknowledged just after: the promise holds."""
    faults = [Fault(1.5, "partition a | b c", A_ALONE)]
    h = history(
        [ev(1, A, "invoke", "a1", [A, B]), ev(2, A, "ack", "a1", [A, B])],
        {A: {"a1"}, B: {"a1"}, C: {"a1"}},
    )
    assert violations(h, 3, quorum=True, healed=True, faults=faults) == []


def test_an_ack_before_any_fault_is_judged_on_a_whole_cluster() -> None:
    faults = [Fault(5.0, "partition a | b c", A_ALONE)]
    h = history([ev(1, A, "invoke", "a1", [A]), ev(2, A, "ack", "a1", [A])], {A: {"a1"}})
    assert side_at(faults, A, 2.0) is None
    assert side_at(faults, A, 6.0) == [A]
    assert violations(h, 3, quorum=True, healed=False, faults=faults) == []


def test_a_heal_restores_the_side() -> None:
    faults = [Fault(1.0, "partition", A_ALONE), Fault(4.0, "heal", FULL)]
    assert side_at(faults, A, 2.0) == [A]
    assert side_at(faults, A, 5.0) == [A, B, C]


def test_lost_phantom_unknown_and_diverged() -> None:
    h = history(
        [
            ev(1, A, "invoke", "a1", [A, B, C]),
            ev(2, A, "ack", "a1", [A, B]),
            ev(3, B, "invoke", "b1", [A, B, C]),
            ev(4, B, "ack", "b1", [B, C]),
        ],
        # a1 is missing on c (lost); b1 is named on c but c never stored it (phantom);
        # x9 was never invoked
        {A: {"a1", "b1"}, B: {"a1", "b1"}, C: {"x9"}},
    )
    found = violations(h, 3, quorum=False, healed=True)
    assert kinds(found) == ["diverged", "lost", "lost", "phantom_replica", "unknown_op"]
    assert {(v.kind, v.op) for v in found if v.kind == "lost"} == {("lost", "a1"), ("lost", "b1")}


def test_an_unacknowledged_operation_may_be_lost() -> None:
    """Invoked, then the writer paused before any ack: indeterminate, not a violation."""
    h = history([ev(1, A, "invoke", "a1", [A, B, C])], {A: {"a1"}, B: set(), C: set()})
    assert kinds(violations(h, 3, quorum=True, healed=True)) == ["diverged"]
    h.stores = {A: {"a1"}, B: {"a1"}, C: {"a1"}}
    assert violations(h, 3, quorum=True, healed=True) == []


def test_the_report_shows_violations_schedule_and_history() -> None:
    faults = [Fault(1.5, "partition a@h | b@h c@h", A_ALONE)]
    h = history([ev(2, A, "invoke", "a1", [A]), ev(3, A, "ack", "a1", [A])], {A: {"a1"}})
    with pytest.raises(HistoryViolation) as failure:
        check(h, 3, quorum=True, healed=False, faults=faults)
    text = str(failure.value)
    assert "1 history violation(s)" in text
    assert "minority_ack: a1" in text
    assert "fault schedule:" in text and "partition a@h | b@h c@h" in text
    assert "a:a b:bc c:bc" in text  # each node's side after the fault
    assert "3.000 a@h ack a1" in text
    assert [v.kind for v in failure.value.violations] == ["minority_ack"]


def test_collect_reads_the_workload_files_and_skips_a_torn_line(tmp_path: Path) -> None:
    for node, lines in {"a": [ev(1, A, "invoke", "a1", [A]), ev(2, A, "ack", "a1", [A])]}.items():
        d = tmp_path / node
        d.mkdir()
        text = "".join(json.dumps(e) + "\n" for e in lines) + '{"ev": "inv'  # torn by a kill
        (d / "ops_history.jsonl").write_text(text)
        (d / "ops_store.jsonl").write_text(json.dumps({"op": "a1", "by": A, "t": 1}) + "\n")
    h = collect({A: tmp_path / "a", B: tmp_path / "missing"})
    assert [e["ev"] for e in h.events] == ["invoke", "ack"]
    assert h.stores == {A: {"a1"}, B: set()}
    assert set(h.acked) == {"a1"}
