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


def mode_seed_main(
    prog: str,
    doc: str,
    modes: Sequence[str],
    run_job: Callable[[tuple[str, int]], tuple[str, int, str | None, str | None]],
    run_one: Callable[[int, str, int | None], Any],
    *,
    argv: list[str] | None = None,
) -> int:
    """The command line of a simulator whose schedules are named by (mode, seed): one seed
    (with --trace, the whole trace), or a sweep over --sweep seeds per mode on --jobs
    processes. `run_job` must be a module-level function (process pools pickle it);
    `run_one(seed, mode, trace_len)` returns a result with `sim`, `ok` and `report()`."""
    import argparse

    ap = argparse.ArgumentParser(prog=prog, description=doc.split("\n", maxsplit=1)[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mode", default="pause_minority", help=f"{', '.join(modes)} or 'all'")
    ap.add_argument("--sweep", type=int, default=0, help="run this many seeds per mode")
    ap.add_argument("--trace", action="store_true")
    ap.add_argument("--jobs", type=int, default=1)
    args = ap.parse_args(argv)
    chosen = list(modes) if args.mode == "all" else args.mode.split(",")
    if args.sweep:
        jobs = [(m, s) for m in chosen for s in range(args.seed, args.seed + args.sweep)]
        results = run_jobs(run_job, jobs, args.jobs, chunksize=4)
        failures = [(m, s, inv) for m, s, inv, _ in results if inv is not None]
        for m, s, inv in failures:
            print(f"seed={s} mode={m}: {inv}")
        print(f"{len(jobs)} schedules, {len(failures)} failing")
        return 1 if failures else 0
    result = run_one(args.seed, chosen[0], None if args.trace else 200)
    if args.trace:
        print(result.sim.format_trace())
    print(result.report())
    return 0 if result.ok else 1
