"""SHA-256 digests of whole simulator traces, for refactors that must not change behaviour.

Run it before and after a change and diff the outputs: a refactor of a core (e.g. splitting
NodeMonitorCore into parts) is behaviour-preserving on these schedules exactly when every line
is identical. Each line is `family mode size seed digest verdict`.

    python -m tests.sim.trace_digest > /tmp/before.txt
    ... change ...
    python -m tests.sim.trace_digest > /tmp/after.txt && diff /tmp/before.txt /tmp/after.txt
"""

from __future__ import annotations

import argparse
import hashlib
from collections.abc import Iterator
from typing import Any

from tests.sim import adversarial, ephemeral, heal
from tests.sim.run import run_seed
from tests.sim.schedules import MODES


def _digest(result: Any) -> str:
    text = result.sim.format_trace()
    verdict = "ok" if result.violation is None else result.violation.invariant
    return f"{hashlib.sha256(text.encode()).hexdigest()} {len(result.sim.trace)} {verdict}"


def runs(seeds: int) -> Iterator[tuple[str, Any]]:
    """(label, result) for every schedule of the sweep, full traces."""
    for mode in MODES:
        for n in (3, 5):
            for seed in range(seeds):
                yield f"run {mode} {n} {seed}", run_seed(seed, n, mode, trace_len=None)
    for mode in MODES:
        for seed in range(seeds):
            r = ephemeral.run_schedule(ephemeral.generate(seed, mode), None)
            yield f"ephemeral {mode} - {seed}", r
    for mode in heal.HEAL_MODES:
        for seed in range(seeds):
            yield f"heal {mode} 5 {seed}", heal.run_heal(seed, 5, mode, trace_len=None)
    for mode in MODES:
        for seed in range(seeds):
            r = adversarial.run_schedule(adversarial.generate(seed, mode), None)
            yield f"adversarial {mode} - {seed}", r


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.sim.trace_digest")
    ap.add_argument("--seeds", type=int, default=8, help="seeds per family, mode and size")
    args = ap.parse_args(argv)
    for label, result in runs(args.seeds):
        print(label, _digest(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
