"""Cluster singletons in the simulator (tests/sim/singleton.py): a small default plan, and
checks that the invariants can fail.

CI runs PLAN seeds per mode and size (RABBITRY_SIM_SINGLETON=N for more). The deep sweep is ad
hoc: `python -m tests.sim.singleton --sweep 80 --nodes 3-7 --mode all` (2,000 schedules).
"""

from __future__ import annotations

import os

import pytest

from rabbitry.singleton import core as singleton_core
from tests.sim.schedules import MODES
from tests.sim.singleton import run_seed

PLAN = int(os.environ.get("RABBITRY_SIM_SINGLETON", "4"))


@pytest.mark.parametrize("mode", MODES)
def test_singleton_schedules(mode: str) -> None:
    failures = []
    for nodes in (3, 5):
        for seed in range(PLAN):
            result = run_seed(seed, nodes, mode)
            if result.violation is not None:
                failures.append(result)
    if failures:
        seeds = ", ".join(f"{r.schedule.seed} ({r.violation.invariant})" for r in failures)
        pytest.fail(f"failing seeds: {seeds}\n\n{failures[0].report()}", pytrace=False)


def test_self_renewal_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checker is not blind: a holder that counts its lease from the answers (not from its
    send time) and never waits for other acceptors' grants to run out runs two instances at
    once in some schedule."""
    monkeypatch.setattr(singleton_core, "holder_lease", lambda lease: lease * 3)
    found = []
    for seed in range(40):
        result = run_seed(seed, 3, "ignore")
        if result.violation is not None:
            found.append(result.violation.invariant)
            break
    assert found and found[0] in ("one_instance", "tokens_grow"), found
