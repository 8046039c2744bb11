"""The simulator suites: seeded random fault schedules against NodeMonitorCore.

1,000 schedules: 5 modes x 200 schedules over 3..7 nodes (more of the cheap small clusters,
fewer of the large ones: a 7-node schedule costs as much as ~50 three-node ones), each
checked against every invariant of tests/sim/invariants.py after every step. A failure names the seed and prints
the schedule, a trace tail and the command that replays it.

The sweep runs in a process pool, one worker per CPU up to 8 (RABBITRY_SIM_JOBS overrides;
1 runs it in this process). Results do not depend on the number of workers: each schedule is
a pure function of (mode, nodes, seed).

Until monitors/node_monitor/core.py exists the suites drive the stub core. Schedules on which
the real core is known to break an invariant are listed in KNOWN_FAILURES: the sweep skips
them and each runs as a strict xfail, so the list must shrink when the core is fixed.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor

import pytest

from tests.sim.invariants import InvariantViolation
from tests.sim.node_monitor import real_core_api
from tests.sim.run import Result, build, run_job, run_seed
from tests.sim.schedules import MODES, generate

# RABBITRY_SIM_CORE=stub|real forces one (default: the real core once it exists).
CORE = os.environ.get("RABBITRY_SIM_CORE") or ("real" if real_core_api() is not None else "stub")
PLAN = {3: 60, 4: 50, 5: 40, 6: 30, 7: 20}  # schedules per mode and size: 200 per mode
# RABBITRY_SIM_SCALE=0.2 for a quick look, =5 for a deep one (CI: 1).
SCALE = float(os.environ.get("RABBITRY_SIM_SCALE", "1"))
PLAN = {n: max(1, round(k * SCALE)) for n, k in PLAN.items()}
JOBS = int(os.environ.get("RABBITRY_SIM_JOBS", "0")) or min(8, len(os.sched_getaffinity(0)))

# (mode, nodes, seed) -> what breaks (a seed outside the sweep's range may be listed too).
# Shrunk schedules and analysis: docs/simulator.md.
KNOWN_FAILURES: dict[tuple[str, int, int], str] = {}

Outcome = tuple[int, str, str]  # seed, invariant, report


@pytest.fixture(scope="module")
def sweep() -> dict[tuple[str, int], list[Outcome]]:
    """Run every planned schedule once; failures grouped by (mode, nodes)."""
    jobs = [
        (mode, n, seed, CORE)
        for n in sorted(PLAN, reverse=True)  # the longest first, for an even pool
        for mode in MODES
        for seed in range(PLAN[n])
        if CORE != "real" or (mode, n, seed) not in KNOWN_FAILURES
    ]
    if JOBS > 1:
        ctx = multiprocessing.get_context("spawn")  # no fork of a process with threads
        with ProcessPoolExecutor(JOBS, mp_context=ctx) as pool:
            results = list(pool.map(run_job, jobs))
    else:
        results = [run_job(job) for job in jobs]
    failed: dict[tuple[str, int], list[Outcome]] = defaultdict(list)
    for mode, n, seed, invariant, report in results:
        if invariant is not None:
            failed[(mode, n)].append((seed, invariant, report or ""))
    return failed


@pytest.mark.timeout(900)  # the first one runs the whole sweep (its fixture)
@pytest.mark.parametrize("nodes", sorted(PLAN))
@pytest.mark.parametrize("mode", MODES)
def test_random_schedules(
    sweep: dict[tuple[str, int], list[Outcome]], mode: str, nodes: int
) -> None:
    failures = sorted(sweep.get((mode, nodes), []))
    if failures:
        seeds = ", ".join(f"{seed} ({inv})" for seed, inv, _ in failures)
        pytest.fail(
            f"{len(failures)} of {PLAN[nodes]} schedules failed, seeds: {seeds}\n"
            f"the first:\n\n{failures[0][2]}",
            pytrace=False,
        )


def test_the_plan_is_at_least_1000_schedules() -> None:
    assert sum(PLAN.values()) * len(MODES) >= 1000 * min(SCALE, 1)
    assert sorted(PLAN) == [3, 4, 5, 6, 7]


@pytest.mark.parametrize("mode", MODES)
def test_stub_core_keeps_the_invariants(mode: str) -> None:
    """The invariants hold for a simple connectivity-driven core, so they do not ask for more
    than an implementation can give. The stub does no partial-partition handling (so
    running_clique is off here; test_engine shows it failing that one) and no autoheal: it
    is a floor, not a model."""
    for nodes in (3, 5):
        for seed in range(1000, 1006):
            schedule = generate(seed, nodes, mode)
            sim, checker = build(schedule, "stub")
            checker.check_clique = False
            try:
                sim.run_until(schedule.end)
                checker.finish()
            except InvariantViolation as v:
                pytest.fail(Result(schedule, sim, v, "stub").report(), pytrace=False)


@pytest.mark.parametrize(
    ("mode", "nodes", "seed"),
    [
        pytest.param(*key, marks=pytest.mark.xfail(strict=True, reason=why))
        for key, why in sorted(KNOWN_FAILURES.items())
    ],
)
def test_known_failures(mode: str, nodes: int, seed: int) -> None:
    if CORE != "real":
        pytest.skip("the real core does not exist yet")
    r = run_seed(seed, nodes, mode, core="real")
    assert r.ok, r.report()
