"""What the simulator drivers' command lines share: node-count ranges, sweeps over worker
processes, and the report of a failing schedule (tests/sim/run.py, ephemeral.py, heal.py,
mnesia.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from tests.sim.engine import Sim

J = TypeVar("J")
R = TypeVar("R")


def sizes(arg: str) -> list[int]:
    """`--nodes`: a size ("5") or an inclusive range ("3-7")."""
    lo, _, hi = arg.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def run_jobs(fn: Callable[[J], R], jobs: Sequence[J], workers: int, chunksize: int) -> list[R]:
    """`fn` over a sweep's jobs, in this process or in `workers` spawned ones (spawn, not fork:
    the drivers' module state must not leak between schedules). `fn` must be importable."""
    if workers <= 1:
        return [fn(job) for job in jobs]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        return list(pool.map(fn, jobs, chunksize=chunksize))


def schedule_report(schedule: Any, sim: Sim, violation: Any, tail: int, replay: str) -> str:
    """ "ok" with the schedule, or the failure: the violation, the schedule, the trace's tail
    and the command that replays it."""
    if violation is None:
        return f"ok: {schedule.describe()}\n  {sim.steps} core events"
    return "\n".join(
        [
            f"FAILED seed={schedule.seed}: {violation}",
            schedule.describe(),
            f"last {tail} trace entries:",
            sim.format_trace(tail),
            f"replay: {replay}",
        ]
    )
