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
       [--diag DIR]   (--baseline '': no baseline run; --diag: what a failed heal left)
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import functools
import json
import os
import re
import shutil
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


def _usage(pids: dict[str, int]) -> dict[str, list[int]]:
    """[open fds, threads] of each process now (from /proc; empty where unreadable): sampled
    after every round, so a leak per heal shows as a count that keeps growing."""
    out = {}
    for name, pid in pids.items():
        with contextlib.suppress(OSError):
            out[name] = [len(os.listdir(f"/proc/{pid}/{what}")) for what in ("fd", "task")]
    return out


def _diagnose(c: Any, into: Path, why: str) -> None:
    """What a heal that never recovered left behind, written to `into` before teardown: the
    full failure (statuses, faults), each node's stderr, threads (py-spy, if installed), fd and
    thread counts, and the fault proxy's proxies."""
    into.mkdir(parents=True, exist_ok=True)
    (into / "failure.txt").write_text(why + "\n")
    for n in c.nodes:
        proc = c.proc(n)
        short = n.partition("@")[0]
        (into / f"{short}.stderr").write_text("\n".join(proc.stderr()) + "\n")
        pid = proc.popen.pid
        facts = []
        for what in ("fd", "task"):
            with contextlib.suppress(OSError):
                facts.append(f"{what}: {len(os.listdir(f'/proc/{pid}/{what}'))}")
        if shutil.which("py-spy"):
            dump = subprocess.run(
                ["py-spy", "dump", "--pid", str(pid)], capture_output=True, text=True, check=False
            )
            facts.append(dump.stdout + dump.stderr)
        with contextlib.suppress(OSError):
            facts.append(
                subprocess.run(["ss", "-tanp"], capture_output=True, text=True, check=False).stdout
            )
        (into / f"{short}.state").write_text("\n".join(facts) + "\n")
    with contextlib.suppress(Exception):
        proxies = c.api.request("GET", "/proxies")
        (into / "proxies.json").write_text(json.dumps(proxies, indent=1) + "\n")
    print(f"diagnostics of the failed heal in {into}", file=sys.stderr)


def measure(
    heals: int, nodes: int, hold: float, network: str = "proxy", diag: Path | None = None
) -> dict[str, Any]:
    """Run the rounds against whatever `rabbitry` this interpreter imports; with `diag`, a
    heal that never recovers leaves its diagnostics there (see _diagnose)."""
    from rabbitry.testing.cluster import ClusterFactory

    links: list[float] = []
    apps: list[float] = []
    resumes: list[int] = []
    pauses: list[int] = []
    others_paused = 0
    failed: list[str] = []
    usage: list[dict[str, list[int]]] = []
    with tempfile.TemporaryDirectory(prefix="rabbitry-heal-bench-") as tmp:
        factory = ClusterFactory(Path(tmp))
        try:
            extra = {"network": network} if network != "proxy" else {}
            c = factory(nodes, "pause_minority", net_ticktime=1.0, **extra)
            iso, rest = c.nodes[-1], c.nodes[:-1]
            pids = {n.partition("@")[0]: c.proc(n).popen.pid for n in c.nodes}
            if factory._server is not None:  # the fault proxy this run started
                pids["faultproxy"] = factory._server.popen.pid
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
                    failed.append(f"round {len(apps) + 1}: {str(exc).splitlines()[0]}")
                    if diag is not None:
                        _diagnose(c, diag, str(exc))
                    break
                apps.append(time.time() - t0)
                usage.append(_usage(pids))
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
        "usage": usage,
    }


def _baseline_tree(rev: str, into: Path) -> Path:
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _summary(name: str, r: dict[str, Any]) -> dict[str, float]:
    if not r["apps"]:
        r = {**r, "links": [float("nan")], "apps": [float("nan")]}
    s = {
        "links_p50": statistics.median(r["links"]),
        "links_p99": _pct(r["links"], 0.99),
        "apps_p50": statistics.median(r["apps"]),
        "apps_p99": _pct(r["apps"], 0.99),
    }
    once = sum(1 for a, p in zip(r["resumes"], r["pauses"], strict=True) if a == 1 and p == 0)
    if r.get("usage"):
        first, last = r["usage"][0], r["usage"][-1]
        spread = ", ".join(
            f"{k} {first[k][0]}->{last[k][0]} fds, {first[k][1]}->{last[k][1]} threads"
            f" (max {max(u[k][0] for u in r['usage'] if k in u)}/"
            f"{max(u[k][1] for u in r['usage'] if k in u)})"
            for k in first
            if k in last
        )
        print(f"{name:>9}: after the first and the last heal: {spread}")
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
    ap.add_argument(
        "--diag",
        type=Path,
        default=None,
        help="directory where a heal that never recovers leaves node logs, thread dumps "
        "(py-spy) and fd counts",
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
    current = measure(args.heals, args.nodes, args.hold, args.network, args.diag)
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
