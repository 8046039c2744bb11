"""Ephemeral members in the simulator (tests/sim/ephemeral.py): a small default plan.

CI runs PLAN seeds per mode (RABBITRY_SIM_EPHEMERAL=N for more). The deep sweep is ad hoc:
`python -m tests.sim.ephemeral --sweep 250 --mode all --jobs 2` (1,250 schedules).
"""

from __future__ import annotations

import os

import pytest

from tests.sim.ephemeral import generate, run_schedule
from tests.sim.schedules import MODES

PLAN = int(os.environ.get("RABBITRY_SIM_EPHEMERAL", "8"))


@pytest.mark.parametrize("mode", MODES)
def test_ephemeral_schedules(mode: str) -> None:
    failures = []
    for seed in range(PLAN):
        r = run_schedule(generate(seed, mode))
        if not r.ok:
            failures.append(r)
    if failures:
        seeds = ", ".join(f"{r.schedule.seed} ({r.violation.invariant})" for r in failures)
        pytest.fail(f"failing seeds: {seeds}\n\n{failures[0].report()}", pytrace=False)


def test_the_generator_covers_churn_and_core_faults() -> None:
    schedules = [generate(seed, "pause_minority") for seed in range(40)]
    actions = {op.action for s in schedules for op in s.ops}
    assert {"crash", "boot", "leave", "cut", "freeze"} <= actions
    assert any(s.gone for s in schedules) and any(not s.core_faults for s in schedules)
    assert any(s.core_faults for s in schedules)
    assert any(len(set(dict(s.seeds)[e])) < len(s.core) for s in schedules for e in s.ephemeral)


@pytest.mark.slow
@pytest.mark.timeout(600)  # ~25 s of CPU: minutes when the other worker's nodes load the cores
def test_two_hundred_executors_on_a_core_of_three() -> None:
    """Scale (issue 26): 200 ephemeral members with churn against 3 core nodes, one schedule
    (about 25 s of CPU; `RABBITRY_SIM_EPHEMERAL_MANY=N` runs N seeds)."""
    for seed in range(int(os.environ.get("RABBITRY_SIM_EPHEMERAL_MANY", "1"))):
        r = run_schedule(generate(seed, "pause_minority", n_core=3, n_eph=200))
        assert r.ok, r.report()
