"""The adversarial generator (tests/sim/adversarial.py): a small default plan in CI, and proof
that its own invariants can fail.

CI runs PLAN seeds per mode (RABBITRY_SIM_ADVERSARIAL=N for more; about 0.25 s of CPU each).
The deep sweep is ad hoc: `python -m tests.sim.adversarial --sweep 400 --mode all --jobs 1`
(2,000 schedules; docs/membership.md has the last one's figures).
"""

from __future__ import annotations

import os

import pytest

from monitors.node_monitor.ephemeral import EphemeralMonitorCore
from monitors.node_monitor.state import MonitorState
from tests.sim.adversarial import MAX_EXECUTORS, decisions_of, generate, run_schedule
from tests.sim.adversarial_checks import compare_decisions
from tests.sim.schedules import MODES

PLAN = int(os.environ.get("RABBITRY_SIM_ADVERSARIAL", "6"))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.timeout(300)
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
    schedules = [generate(seed, mode) for seed in range(40) for mode in MODES]
    actions = {op.action for s in schedules for op in s.ops}
    assert {"stale_leave", "forged_leave", "shrunk_list", "cut", "crash", "freeze"} <= actions
    assert {"core_leave", "core_forget", "core_join", "impostor", "takeover"} <= actions
    assert max(len(s.ephemeral) for s in schedules) > 16
    assert all(len(s.ephemeral) <= MAX_EXECUTORS for s in schedules)
    assert any(m != s.mode.name for s in schedules for _, m in s.local_modes)
    assert any(_one_way_cut(s) for s in schedules)
    assert any(s.lossy for s in schedules) and any(s.connect_timeout for s in schedules)
    flips = {op.args[1] for s in schedules for op in s.ops if op.action == "impostor"}
    assert flips == {"admitted", "refused"}
    stays = [op for s in schedules for op in s.ops if op.action == "core_leave"]
    assert {op.args[1] == "-" for op in stays} == {True, False}  # stays up, or is stopped


def test_the_core_only_projection_keeps_the_core_and_its_faults() -> None:
    s = next(s for seed in range(40) if (s := generate(seed, "autoheal")).joiners)
    alone = s.core_only()
    core = set(s.core) | set(s.joiners)
    assert not alone.ephemeral and not alone.seeds and not alone.lossy
    assert alone.heal_at == s.heal_at and alone.end == s.end
    execs = set(s.ephemeral)
    assert not any(set(op.args) & execs for op in alone.ops)
    dropped = [op for op in s.ops if op not in alone.ops]
    assert dropped and all(set(op.args) & execs for op in dropped)  # forgeries name one too
    assert any(op.action in ("core_join", "dial") for op in alone.ops)
    assert all(op.args[0] in core for op in alone.ops)


def _one_way_cut(schedule) -> bool:
    cuts = {op.args for op in schedule.ops if op.action == "cut"}
    return any((b, a) not in cuts for a, b in cuts)


# ---- the invariants can fail: bugs planted for the length of one test ----------------------


def test_same_decisions_fails_when_the_core_counts_its_executors(monkeypatch) -> None:
    s = generate(0, "pause_minority")
    assert compare_decisions(decisions_of(s), decisions_of(s.core_only())) is None

    def counts_executors(self: MonitorState) -> set[str]:
        return (self._others() | set(self._eph)) & set(self._up)

    monkeypatch.setattr(MonitorState, "_connected", counts_executors)
    v = compare_decisions(decisions_of(s), decisions_of(s.core_only()))
    assert v is not None and v.invariant == "same_decisions", v


def test_restarts_fails_when_an_executor_ignores_an_autoheal_loss(monkeypatch) -> None:
    def ignores_the_stop(self: EphemeralMonitorCore, sender: str) -> list:
        self._running.discard(sender)  # and goes on following it
        return []

    monkeypatch.setattr(EphemeralMonitorCore, "_stopped_running", ignores_the_stop)
    found = []
    for seed in range(6):
        r = run_schedule(generate(seed, "autoheal"))
        found.append(r.violation.invariant if r.violation else "ok")
        if "restarts" in found:
            return
    pytest.fail(f"no schedule caught it: {found}")
