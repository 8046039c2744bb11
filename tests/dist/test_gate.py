"""FailureGate, the doubling table behind the tarpit (tests/dist/test_tarpit.py has the
kernel's side)."""

from __future__ import annotations

import pytest

from monitors.dist.gate import FailureGate

pytestmark = pytest.mark.timeout(60)


def test_gate_counts_doubles_caps_and_forgets():
    gate = FailureGate(free=2, initial=1.0, maximum=4.0, forget_after=100.0, max_keys=2)
    assert gate.failed("x", 0.0) == (1, 0.0)
    assert gate.failed("x", 1.0) == (2, 0.0)
    assert gate.blocked_for("x", 1.0) == 0.0
    assert gate.failed("x", 2.0) == (3, 1.0)
    assert gate.blocked_for("x", 2.5) == 0.5
    assert [gate.failed("x", t)[1] for t in (3.0, 4.0, 5.0)] == [2.0, 4.0, 4.0]
    assert gate.failed("x", 200.0) == (1, 0.0)  # quiet for longer than forget_after
    gate.failed("y", 201.0)
    gate.failed("z", 202.0)  # the table is bounded: the oldest key goes
    assert len(gate) == 2 and gate.blocked_for("x", 202.0) == 0.0
    gate.succeeded("z")
    assert len(gate) == 1
    with pytest.raises(ValueError):
        FailureGate(initial=0)
