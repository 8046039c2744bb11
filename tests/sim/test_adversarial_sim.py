"""The adversarial generator (tests/sim/adversarial.py): a small default plan in CI.

CI runs PLAN seeds per mode (RABBITRY_SIM_ADVERSARIAL=N for more). The deep sweep is ad hoc:
`python -m tests.sim.adversarial --sweep 400 --mode all --jobs 2` (2,000 schedules).
"""

from __future__ import annotations

import os

import pytest

from tests.sim.adversarial import MAX_EXECUTORS, generate, run_schedule
from tests.sim.schedules import MODES

PLAN = int(os.environ.get("RABBITRY_SIM_ADVERSARIAL", "1"))


@pytest.mark.parametrize("mode", MODES)
def test_adversarial_schedules(mode: str) -> None:
    failures = []
    for seed in range(PLAN):
        r = run_schedule(generate(seed, mode))
        if not r.ok:
            failures.append(r)
    if failures:
        seeds = ", ".join(f"{r.schedule.seed} ({r.violation.invariant})" for r in failures)
        pytest.fail(f"failing seeds: {seeds}\n\n{failures[0].report()}", pytrace=False)


def test_the_generator_is_adversarial() -> None:
    schedules = [generate(seed, "pause_minority") for seed in range(60)]
    actions = {op.action for s in schedules for op in s.ops}
    assert {"stale_leave", "forged_leave", "shrunk_list", "cut", "crash", "freeze"} <= actions
    assert max(len(s.ephemeral) for s in schedules) > 16
    assert all(len(s.ephemeral) <= MAX_EXECUTORS for s in schedules)
    assert any(m != "pause_minority" for s in schedules for _, m in s.local_modes)
    assert any(_one_way_cut(s) for s in schedules)


def _one_way_cut(schedule) -> bool:
    cuts = {op.args for op in schedule.ops if op.action == "cut"}
    return any((b, a) not in cuts for a, b in cuts)
