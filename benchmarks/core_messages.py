"""Per-message cost of the node monitor's core and mnesia_like's core, this tree against another.

Why: a refactor of the cores (splitting them into parts, one shared message validator) must
not make them slower. This measures the time a core spends in `receive(sender, msg, now)` per
message, on a deterministic workload, in this checkout and in a base checkout (say main's:
`git worktree add --detach /tmp/base main`), in the same run:

- node monitor: 5 NodeMonitorCores under pause_minority in the test pump
  (tests/node_monitor/pump.py): 60 s of steady state (keepalives, views), then a link cut and
  healed twice (partial-partition checks, views, settling);
- mnesia: 3 MnesiaCores in the test harness (tests/mnesia_like/harness.py) with a table on
  every node (disc on two, ram on one): dirty writes from each node, then transactions
  (read, write back) from each node.

Only `receive` is timed, as the CPU time of the thread (thread_time_ns around each call: on a
shared machine, time other processes take is not counted), so the harnesses' own work is not
counted either; the workloads are deterministic, so both trees see the same messages when the cores
behave the same (the simulator's trace digests check that). Each measurement runs in its own
process with PYTHONPATH at the tree measured; rounds alternate the order (base, ours / ours,
base) so that drift in the machine's load hits both alike. Figures are medians over rounds,
in nanoseconds of CPU per message; the ratio is ours/base (1.0: as fast; above: slower). The load
average is printed before and after: on a shared machine, compare only figures of one run.

Usage: python benchmarks/core_messages.py --base /tmp/base [--rounds 7] [--repeat 3]
       python benchmarks/core_messages.py --worker nm|mnesia [--repeat 3]  (one measurement,
       JSON on stdout, in the tree on PYTHONPATH)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
OURS = HERE.parent.parent


class _Timed:
    """Wraps a core class's `receive` to add up the time spent in it and count the calls."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.original = cls.receive
        self.ns = 0
        self.calls = 0
        timed = self

        def receive(core: Any, sender: str, msg: Any, now: float) -> Any:
            began = time.thread_time_ns()
            try:
                return timed.original(core, sender, msg, now)
            finally:
                timed.ns += time.thread_time_ns() - began
                timed.calls += 1

        cls.receive = receive

    def restore(self) -> None:
        self.cls.receive = self.original


def _node_monitor_workload() -> None:
    from tests.node_monitor.pump import Pump

    names = [f"n{i}@h" for i in range(1, 6)]
    pump = Pump(names, "pause_minority", keepalive_interval=1.0)
    pump.run(60.0)
    for _ in range(2):
        pump.cut(names[0], names[1])
        pump.run(10.0)
        pump.heal(names[0], names[1])
        pump.run(10.0)


def _mnesia_workload() -> None:
    from tests.mnesia_like.harness import cluster

    a, b, c = "a@h", "b@h", "c@h"
    h = cluster(3)
    h.call(a, "create_table", name="t", attributes=["k", "v"], disc_copies=[a, b], ram_copies=[c])
    for i in range(300):
        node = (a, b, c)[i % 3]
        h.call(node, "dirty_write", table="t", record={"k": i % 50, "v": i})
    for i in range(100):
        node = (a, b, c)[i % 3]
        key = i % 20
        h.transaction(
            node,
            [
                ("tx_read", {"table": "t", "key": key}),
                ("tx_write", {"table": "t", "record": {"k": key, "v": i}}),
            ],
        )


def worker(kind: str, repeat: int) -> dict[str, Any]:
    """One measurement in this process's tree: the workload `repeat` times."""
    if kind == "nm":
        from monitors.node_monitor.core import NodeMonitorCore as Core

        workload = _node_monitor_workload
    else:
        from mnesia_like.core import MnesiaCore as Core

        workload = _mnesia_workload
    workload()  # warm up: imports, caches
    timed = _Timed(Core)
    try:
        for _ in range(repeat):
            workload()
    finally:
        timed.restore()
    return {"messages": timed.calls, "ns_per_message": timed.ns / max(timed.calls, 1)}


def _measure(tree: Path, kind: str, repeat: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, str(HERE), "--worker", kind, "--repeat", str(repeat)],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare(base: Path, rounds: int, repeat: int) -> dict[str, Any]:
    print(f"load average before: {os.getloadavg()}")
    print(f"ours: {OURS}\nbase: {base}")
    result: dict[str, Any] = {"load_before": list(os.getloadavg())}
    for kind, label in (("nm", "node monitor"), ("mnesia", "mnesia_like")):
        samples: dict[str, list[float]] = {"ours": [], "base": []}
        counts: dict[str, int] = {}
        for r in range(rounds):
            order = (
                (("base", base), ("ours", OURS)) if r % 2 == 0 else (("ours", OURS), ("base", base))
            )
            for name, tree in order:
                m = _measure(tree, kind, repeat)
                samples[name].append(m["ns_per_message"])
                counts[name] = m["messages"]
        ours, theirs = statistics.median(samples["ours"]), statistics.median(samples["base"])
        ratio = ours / theirs
        print(
            f"{label:13} {counts['ours']:7d} msgs/run  ours {ours:8.0f} ns/msg  base "
            f"{theirs:8.0f} ns/msg  ratio ours/base {ratio:.3f}  "
            f"(ours {', '.join(f'{x:.0f}' for x in samples['ours'])}; "
            f"base {', '.join(f'{x:.0f}' for x in samples['base'])})"
        )
        if counts["ours"] != counts["base"]:
            print(f"  note: the trees handled different message counts: {counts}")
        result[kind] = {"ours": ours, "base": theirs, "ratio": ratio, "messages": counts}
    print(f"load average after: {os.getloadavg()}")
    result["load_after"] = list(os.getloadavg())
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python benchmarks/core_messages.py")
    ap.add_argument("--base", type=Path, help="the other checkout (e.g. a worktree of main)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=3, help="workloads per measurement")
    ap.add_argument("--worker", choices=("nm", "mnesia"), help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true", help="print the result as JSON last")
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.repeat)))
        return 0
    if args.base is None:
        ap.error("--base PATH is required (git worktree add --detach /tmp/base main)")
    result = compare(args.base.resolve(), args.rounds, args.repeat)
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
