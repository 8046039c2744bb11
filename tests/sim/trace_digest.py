"""SHA-256 digests of whole simulator traces, for refactors that must not change behaviour.

Run it before and after a change and diff the outputs: a refactor of a core (e.g. splitting
NodeMonitorCore or ConfigurationServerCore into parts) is behaviour-preserving on these
schedules exactly when every line is identical. Each line is `family mode size seed digest
length verdict`.

    python -m tests.sim.trace_digest > /tmp/before.txt
    ... change ...
    python -m tests.sim.trace_digest > /tmp/after.txt && diff /tmp/before.txt /tmp/after.txt

`--only failover` runs one family. The failover family digests more than the trace (whose log
entries carry only the text): every node's log with its fields, and the harness's event list
(publishes, promotions, files, notifications, calls), so a changed log field or effect order
shows too.
"""

from __future__ import annotations

import argparse
import hashlib
from collections.abc import Iterator
from typing import Any

from tests.sim import adversarial, ephemeral, heal
from tests.sim import failover as fo
from tests.sim.run import run_seed
from tests.sim.schedules import MODES


def _digest(result: Any) -> str:
    text = result.sim.format_trace()
    verdict = "ok" if result.violation is None else result.violation.invariant
    return f"{hashlib.sha256(text.encode()).hexdigest()} {len(result.sim.trace)} {verdict}"


FAMILIES = ("run", "ephemeral", "heal", "adversarial", "failover")


def _failover_digest(run: fo.FailoverRun) -> str:
    """The trace, every node's log with fields, and the harness's events, in one digest."""
    h = hashlib.sha256(run.sim.format_trace().encode())
    for name in sorted(run.sim.nodes):
        for entry in run.sim.nodes[name].log:
            h.update(repr((name, *entry)).encode())
    for e in run.kind.events:
        h.update(repr((e.t, e.node, e.what, e.detail)).encode())
    try:
        fo.check(run)
        verdict = "ok"
    except fo.FailoverViolation as v:
        verdict = v.invariant
    return f"{h.hexdigest()} {len(run.sim.trace)} {verdict}"


def failover_runs(seeds: int) -> Iterator[tuple[str, str]]:
    """(label, digest) for the failover sweep: every topology of tests/sim/test_failover_sim.py
    with the original fault kinds, and two with the later ones mixed in."""
    for n_rcs, n_rcc in ((2, 2), (2, 3), (3, 2), (3, 3)):
        for seed in range(seeds):
            run = fo.run_schedule(fo.generate(seed, n_rcs, n_rcc), trace_len=None)
            yield f"failover kinds {n_rcs}x{n_rcc} {seed}", _failover_digest(run)
    later = (*fo.KINDS, *fo.LATER_KINDS, *fo.LATER_KINDS)
    for n_rcs, n_rcc in ((2, 3), (3, 2)):
        for seed in range(seeds):
            run = fo.run_schedule(fo.generate(seed, n_rcs, n_rcc, kinds=later), trace_len=None)
            yield f"failover later {n_rcs}x{n_rcc} {seed}", _failover_digest(run)


def runs(seeds: int, only: str | None = None) -> Iterator[tuple[str, Any]]:
    """(label, result) for every node-monitor schedule of the sweep (or of family `only`),
    full traces."""
    if only in (None, "run"):
        for mode in MODES:
            for n in (3, 5):
                for seed in range(seeds):
                    yield f"run {mode} {n} {seed}", run_seed(seed, n, mode, trace_len=None)
    if only in (None, "ephemeral"):
        for mode in MODES:
            for seed in range(seeds):
                r = ephemeral.run_schedule(ephemeral.generate(seed, mode), None)
                yield f"ephemeral {mode} - {seed}", r
    if only in (None, "heal"):
        for mode in heal.HEAL_MODES:
            for seed in range(seeds):
                yield f"heal {mode} 5 {seed}", heal.run_heal(seed, 5, mode, trace_len=None)
    if only in (None, "adversarial"):
        for mode in MODES:
            for seed in range(seeds):
                r = adversarial.run_schedule(adversarial.generate(seed, mode), None)
                yield f"adversarial {mode} - {seed}", r


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.sim.trace_digest")
    ap.add_argument("--seeds", type=int, default=8, help="seeds per family, mode and size")
    ap.add_argument("--only", choices=FAMILIES, help="one family instead of all")
    args = ap.parse_args(argv)
    if args.only != "failover":
        for label, result in runs(args.seeds, args.only):
            print(label, _digest(result), flush=True)
    if args.only in (None, "failover"):
        for label, digest in failover_runs(args.seeds):
            print(label, digest, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
