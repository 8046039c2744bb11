"""mnesia_like in the simulator: concurrent transactions under random crashes, partitions,
one-way cuts, flaps and freezes (tests/sim/mnesia.py has the schedules and the invariants).

The default plan runs about 20 s of CPU; RABBITRY_SIM_SCALE=5 runs five times as many
schedules. A failure prints the schedule, the trace tail and the call that replays it.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.sim.mnesia import Violation, check_end, generate, prepare, run_seed, sweep_scale

# (merge, nodes) -> schedules in the default plan
PLAN = {
    ("none", 3): 40,
    ("none", 5): 15,
    ("autoheal", 3): 40,
    ("autoheal", 4): 15,
    ("lww", 3): 40,
    ("lww", 5): 15,
}

# The same, with transactions that read with write locks (wread: their writes take no lock
# round of their own).
WREAD_PLAN = {
    ("none", 3): 10,
    ("autoheal", 4): 10,
    ("lww", 3): 10,
}

# The same with parallel commit (parallel_commit=True: prepare records decide, no decision
# log), and three crash points per schedule besides its faults: a node killed right after
# its n-th effect, between a prepare record and its vote, a reply and its commits, ...
PARALLEL_PLAN = {
    ("none", 3): 25,
    ("none", 5): 10,
    ("autoheal", 3): 15,
    ("autoheal", 4): 10,
    ("lww", 3): 15,
    ("lww", 5): 10,
}

# Schedules the current core is known to fail (strict xfail: a fix turns them into XPASS,
# which fails the suite until the entry is removed). docs/mnesia_like.md says what each is.
KNOWN_FAILURES: dict[tuple[str, int, int], str] = {}

# Schedules outside the default plan that once failed, each with the root cause it found
# (docs/mnesia_like.md). Those whose fix anti-entropy would mask run with it off.
REGRESSIONS: dict[tuple[str, int, int], tuple[str, dict[str, Any]]] = {
    ("autoheal", 4, 58): ("a dirty write reached part of a non-clique replica set", {}),
    ("autoheal", 4, 37): ("a node restarted while cut off loaded its own disc copy", {}),
    ("lww", 4, 22): ("a node restarted while cut off loaded its own disc copy", {}),
    ("autoheal", 4, 75): ("an autoheal reload loaded the consumed local disc copy", {}),
    ("autoheal", 5, 79): (
        "an in-doubt commit resolved after the coordinator reloaded",
        {"anti_entropy": False},
    ),
    ("autoheal", 5, 49): ("the winner's heal_req was lost; views never met", {}),
    ("none", 4, 16): (
        "a peer crashed while hellos crossed; only the restarted node marked it",
        {"wread": True},
    ),
}


def _cases() -> list[object]:
    scale = sweep_scale()
    out: list[object] = []
    for (merge, nodes), count in PLAN.items():
        for seed in range(max(1, round(count * scale))):
            key = (merge, nodes, seed)
            marks = []
            if key in KNOWN_FAILURES:
                marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_FAILURES[key]))
            out.append(pytest.param(merge, nodes, seed, marks=marks, id=f"{merge}-{nodes}-{seed}"))
    return out


def _plan_cases(plan: dict[tuple[str, int], int], prefix: str) -> list[object]:
    """The (merge, nodes, seed) cases of a plan, scaled by the sweep, with ids `prefix-...`."""
    return [
        pytest.param(merge, nodes, seed, id=f"{prefix}-{merge}-{nodes}-{seed}")
        for (merge, nodes), count in plan.items()
        for seed in range(max(1, round(count * sweep_scale())))
    ]


@pytest.mark.parametrize(("merge", "nodes", "seed"), _cases())
def test_random_schedules(merge: str, nodes: int, seed: int) -> None:
    schedule = generate(seed, nodes, merge)
    run = prepare(schedule)
    try:
        run.sim.run_until(schedule.end)
        check_end(run)
    except Violation as v:
        pytest.fail(run.report(v), pytrace=False)
    assert run.record.committed > 0  # the workload ran


@pytest.mark.parametrize(
    ("merge", "nodes", "seed"),
    _plan_cases(WREAD_PLAN, "wread"),
)
def test_random_schedules_with_wread(merge: str, nodes: int, seed: int) -> None:
    run, v = run_seed(seed, nodes, merge, wread=True)
    if v is not None:
        pytest.fail(run.report(v), pytrace=False)
    assert run.record.committed > 0


@pytest.mark.parametrize(
    ("merge", "nodes", "seed"),
    _plan_cases(PARALLEL_PLAN, "parallel"),
)
def test_random_schedules_with_parallel_commit(merge: str, nodes: int, seed: int) -> None:
    run, v = run_seed(seed, nodes, merge, steps=3, parallel_commit=True)
    if v is not None:
        pytest.fail(run.report(v), pytrace=False)
    assert run.record.committed > 0


def test_a_run_replays_exactly() -> None:
    def trace(seed: int) -> list[tuple[float, str, str, str]]:
        schedule = generate(seed, 3, "autoheal")
        run = prepare(schedule, trace_len=None)
        run.sim.run_until(schedule.end)
        return [(t, n, w, repr(d)) for t, n, w, d in run.sim.trace]

    assert trace(5) == trace(5)


def test_the_checker_catches_a_lost_commit() -> None:
    """The invariants can fail: drop one acknowledged write from every replica."""
    schedule = generate(1, 3, "none")
    run = prepare(schedule)
    run.sim.run_until(schedule.end)
    check_end(run)
    _node, _stamp, keys = next(a for a in run.record.acked if run.record.participants.get(a[1]))
    table, kj = keys[0]
    for sim_node in run.sim.nodes.values():
        core = sim_node.cores["mnesia"]
        entry = core.store[table].get(kj)
        if entry is not None:
            core.store[table][kj] = {"r": entry["r"], "s": [0, ""]}
    with pytest.raises(Violation, match="durability"):
        check_end(run)


@pytest.mark.parametrize(
    ("merge", "nodes", "seed"),
    [pytest.param(*key, id=f"{key[0]}-{key[1]}-{key[2]}") for key in REGRESSIONS],
)
def test_regressions(merge: str, nodes: int, seed: int) -> None:
    _why, options = REGRESSIONS[(merge, nodes, seed)]
    run, v = run_seed(seed, nodes, merge, **options)
    if v is not None:
        pytest.fail(run.report(v), pytrace=False)
