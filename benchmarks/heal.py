"""Heal benchmark (issue 15): "heal -> every link up" and "heal -> every application running".

Real node processes (`rabbitry node start`, pause_minority, net_ticktime 1 s) behind the fault
proxy, as the chaos suite runs them. Each round isolates the last node from the others (its
bytes dropped both ways, so its connect attempts hang as they do across a DROP rule), waits
until it has paused and the cut has lasted `--hold` seconds (connect attempts are then in
flight), heals, and measures from the moment the heal is in place (every toxic removed):

- every link up: the latest "node up" log line, at either end, of the links that were cut;
- every application running: every node's status shows all nodes running and none paused;
- how often the isolated node paused and resumed during the heal (a heal resumes once: 1
  resume, 0 pauses), and whether any other node paused.

The same rounds run twice in one invocation: against this tree, and against a baseline tree
(`git archive` of --baseline, by default the commit before the heal work) as a same-run
baseline, and the ratios are printed. Node log times have millisecond resolution.

Usage: python benchmarks/heal.py [--heals 20] [--nodes 3] [--hold 2] [--baseline REV]
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BASELINE = "82cc4b1"  # main just before the heal work (issue 15) landed
_TIME = re.compile(r"^(\d\d):(\d\d):(\d\d)\.(\d{3}) ")
_NODE_UP = re.compile(r"dist (\S+): node up: (\S+) ")


def _line_time(line: str, day: dt.date) -> float | None:
    m = _TIME.match(line)
    if m is None:
        return None
    h, mi, s, ms = (int(x) for x in m.groups())
    stamp = dt.datetime(day.year, day.month, day.day, h, mi, s, ms * 1000)
    return stamp.timestamp()


def _pct(values: list[float], q: float) -> float:
    """The q-quantile by nearest rank (q=0.99 of 20 values is the largest)."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))
    return ordered[index]


def _link_times(
    c: Any, marks: dict[str, int], day: dt.date, iso: str, rest: list[str]
) -> dict[tuple[str, str], float] | None:
    """When each end of each link of `iso` logged "node up" since `marks`; None until all."""
    seen: dict[tuple[str, str], float] = {}
    for n in c.nodes:
        for line in c.proc(n).stderr()[marks[n] :]:
            m = _NODE_UP.search(line)
            t = _line_time(line, day)
            if m and t is not None:
                seen.setdefault((m.group(1), m.group(2)), t)
    want = [(a, iso) for a in rest] + [(iso, a) for a in rest]
    if all(w in seen for w in want):
        return {w: seen[w] for w in want}
    return None


def measure(heals: int, nodes: int, hold: float, network: str = "proxy") -> dict[str, Any]:
    """Run the rounds against whatever `rabbitry` this interpreter imports."""
    from rabbitry.testing.cluster import ClusterFactory

    links: list[float] = []
    apps: list[float] = []
    resumes: list[int] = []
    pauses: list[int] = []
    others_paused = 0
    failed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="rabbitry-heal-bench-") as tmp:
        factory = ClusterFactory(Path(tmp))
        try:
            extra = {"network": network} if network != "proxy" else {}
            c = factory(nodes, "pause_minority", net_ticktime=1.0, **extra)
            iso, rest = c.nodes[-1], c.nodes[:-1]
            for _ in range(heals):
                c.partition([iso], rest)
                c.wait_for(
                    lambda: c.paused(iso) and all(iso not in c.running(n) for n in rest),
                    30,
                    "the isolated node paused and the others saw it go",
                )
                time.sleep(hold)  # the cut lasts: connect attempts are in flight when it heals
                marks = {n: len(c.proc(n).stderr()) for n in c.nodes}
                c.heal()
                t0 = time.time()

                def whole() -> bool:
                    return all(c.running(n) == c.nodes and not c.paused(n) for n in c.nodes)

                try:
                    c.wait_for(whole, 60, "every application running after the heal")
                except AssertionError as exc:  # a round that never recovers is a result too
                    failed.append(str(exc).splitlines()[0])
                    break
                apps.append(time.time() - t0)
                day = dt.date.today()

                got = c.wait_for(
                    functools.partial(_link_times, c, marks, day, iso, rest),
                    30,
                    "a node up line at both ends of every link",
                )
                links.append(max(got.values()) - t0)
                tail = c.proc(iso).stderr()[marks[iso] :]
                resumes.append(sum("resuming the application" in line for line in tail))
                pauses.append(sum("pausing the application" in line for line in tail))
                for n in rest:
                    tail = c.proc(n).stderr()[marks[n] :]
                    others_paused += sum("pausing the application" in line for line in tail)
        finally:
            factory.close()
    return {
        "links": links,
        "apps": apps,
        "resumes": resumes,
        "pauses": pauses,
        "others_paused": others_paused,
        "failed": failed,
    }


def _baseline_tree(rev: str, into: Path) -> Path:
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _summary(name: str, r: dict[str, Any]) -> dict[str, float]:
    s = {
        "links_p50": statistics.median(r["links"]),
        "links_p99": _pct(r["links"], 0.99),
        "apps_p50": statistics.median(r["apps"]),
        "apps_p99": _pct(r["apps"], 0.99),
    }
    once = sum(1 for a, p in zip(r["resumes"], r["pauses"], strict=True) if a == 1 and p == 0)
    for why in r.get("failed", []):
        print(f"{name:>9}: a heal did not recover: {why}")
    print(
        f"{name:>9}: heal -> every link up p50 {s['links_p50']:.3f} s, p99 "
        f"{s['links_p99']:.3f} s; heal -> every application running p50 {s['apps_p50']:.3f} s,"
        f" p99 {s['apps_p99']:.3f} s; resumed exactly once in {once}/{len(r['resumes'])} heals"
        f" (resumes {r['resumes']}, pauses {r['pauses']}); other nodes paused "
        f"{r['others_paused']} times"
    )
    return s


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--heals", type=int, default=20)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--hold", type=float, default=2.0, help="seconds the cut lasts once settled")
    ap.add_argument("--baseline", default=BASELINE, help="git rev of the baseline ('' for none)")
    ap.add_argument(
        "--network",
        default="proxy",
        choices=("proxy", "netns"),
        help="netns: kernel DROP rules (root); the baseline tree has no netns mode, so the "
        "same-run baseline is then this tree in proxy mode",
    )
    ap.add_argument("--measure-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.measure_only:
        print(json.dumps(measure(args.heals, args.nodes, args.hold)))
        return 0
    print(
        f"{args.heals} heals of one isolated node of {args.nodes}, pause_minority, "
        f"net_ticktime 1 s, cut held {args.hold:g} s after it settled"
    )
    current = measure(args.heals, args.nodes, args.hold, args.network)
    now = _summary(f"this tree ({args.network})", current)
    if args.network == "netns":
        base = _summary("this tree (proxy)", measure(args.heals, args.nodes, args.hold))
        _ratios(now, base)
        return 0
    if not args.baseline:
        return 0
    with tempfile.TemporaryDirectory(prefix="rabbitry-heal-baseline-") as tmp:
        tree = _baseline_tree(args.baseline, Path(tmp))
        env = dict(os.environ, PYTHONPATH=str(tree))
        done = subprocess.run(
            [
                sys.executable,
                __file__,
                "--measure-only",
                "--heals",
                str(args.heals),
                "--nodes",
                str(args.nodes),
                "--hold",
                str(args.hold),
            ],
            env=env,
            cwd=tree,
            capture_output=True,
            text=True,
            check=False,
        )
    if done.returncode != 0:
        print(f"baseline run failed:\n{done.stderr[-3000:]}")
        return 1
    base = _summary(f"baseline {args.baseline}", json.loads(done.stdout.splitlines()[-1]))
    _ratios(now, base)
    return 0


def _ratios(now: dict[str, float], base: dict[str, float]) -> None:
    for key, label in (
        ("links_p50", "every link up p50"),
        ("links_p99", "every link up p99"),
        ("apps_p50", "every application running p50"),
        ("apps_p99", "every application running p99"),
    ):
        print(f"  {label}: {now[key]:.3f} s vs {base[key]:.3f} s, ratio {now[key] / base[key]:.2f}")


if __name__ == "__main__":
    sys.exit(main())
