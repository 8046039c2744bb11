"""Partition handling benchmarks (issue 3), on real node processes (`rabbitry node start`).

1. NodeDown -> pause decision, under pause_minority: two of three nodes are SIGKILLed (then,
   separately, SIGSTOPped); on the survivor, the time from the dist layer's second "node down"
   log line to the monitor's "pausing the application" line. Both come from the same process
   and clock, so the figure is the monitor's own reaction time (goal <= 0.1 s).
2. Heal -> all running: SIGCONT to the two frozen nodes, then the time until the survivor's
   control API shows all three running and not paused (includes reconnects and ticks; baseline:
   net_ticktime, the detection window it must wait out at worst).

Usage: python benchmarks/partitions.py [--rounds N] [--net-ticktime SECONDS]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from rabbitry.control import ControlClient
from rabbitry.testing.launcher import Launcher, NodeSpec

COOKIE = b"benchmark-cookie"
NAMES = ("a@127.0.0.1", "b@127.0.0.1", "c@127.0.0.1")
STAMP = re.compile(r"^(\d\d:\d\d:\d\d\.\d\d\d) ")


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _write_configs(root: Path, ticktime: float) -> tuple[dict[str, Path], dict[str, int]]:
    (root / "cookie").write_bytes(COOKIE)
    os.chmod(root / "cookie", 0o600)
    dist, control = _free_ports(3), _free_ports(3)
    members = "".join(f"    {n}: 127.0.0.1:{p}\n" for n, p in zip(NAMES, dist, strict=True))
    configs, controls = {}, {}
    for name, port, cport in zip(NAMES, dist, control, strict=True):
        path = root / f"{name[0]}.yaml"
        path.write_text(
            f"node: {name}\nlisten: 127.0.0.1:{port}\ncookie_file: ./cookie\n"
            f"data_dir: ./data/{name[0]}\nnet_ticktime: {ticktime}\n"
            f"cluster:\n  nodes:\n{members}partition_handling: pause_minority\n"
            f"control: 127.0.0.1:{cport}\n"
        )
        configs[name], controls[name] = path, cport
    return configs, controls


def _stamp(line: str) -> float:
    match = STAMP.match(line)
    assert match, line
    clock = datetime.strptime(match.group(1), "%H:%M:%S.%f")
    return clock.hour * 3600 + clock.minute * 60 + clock.second + clock.microsecond / 1e6


def _wait(predicate, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except Exception:
            pass
        time.sleep(0.01)
    return False


def one_round(ticktime: float, how: str) -> tuple[float, float | None]:
    """Returns (decision seconds, heal seconds or None for SIGKILL rounds)."""
    with tempfile.TemporaryDirectory() as tmp, Launcher() as launcher:
        root = Path(tmp)
        configs, controls = _write_configs(root, ticktime)
        nodes = {
            name: launcher.start_one(
                NodeSpec(
                    name[0],
                    [sys.executable, "-m", "rabbitry", "node", "start", "--config", str(path)],
                    cwd=tmp,
                )
            )
            for name, path in configs.items()
        }
        a = ControlClient("127.0.0.1", controls[NAMES[0]], COOKIE)
        assert _wait(lambda: a.status()["running"] == list(NAMES)), "cluster did not form"
        survivor = nodes[NAMES[0]]
        mark = survivor.mark("stderr")
        for name in NAMES[1:]:
            nodes[name].signal(signal.SIGKILL if how == "kill" else signal.SIGSTOP)
        pause_line = survivor.wait_for("pausing the application", 30, mark, "stderr").string
        downs = [
            line for line in survivor.stderr()[mark:] if "node down:" in line and "dist a@" in line
        ]
        decision = _stamp(pause_line) - _stamp(downs[1])
        if how == "kill":
            return decision, None
        start = time.monotonic()
        for name in NAMES[1:]:
            nodes[name].signal(signal.SIGCONT)
        healed = _wait(
            lambda: a.status()["running"] == list(NAMES) and not a.status()["paused"], 60
        )
        return decision, (time.monotonic() - start) if healed else float("inf")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--net-ticktime", type=float, default=1.0)
    args = parser.parse_args()
    tick = args.net_ticktime
    for how in ("kill", "stop"):
        decisions, heals = [], []
        for _ in range(args.rounds):
            decision, heal = one_round(tick, how)
            decisions.append(decision)
            if heal is not None:
                heals.append(heal)
        worst = max(decisions)
        print(
            f"NodeDown -> pause decision ({how} 2 of 3, net_ticktime {tick:g} s): "
            f"median {statistics.median(decisions) * 1000:.0f} ms, worst {worst * 1000:.0f} ms "
            f"(goal <= 100 ms, ratio {worst / 0.1:.2f}) [{args.rounds} rounds]"
        )
        if heals:
            print(
                f"heal (SIGCONT) -> all running: median {statistics.median(heals):.2f} s, "
                f"worst {max(heals):.2f} s (baseline net_ticktime {tick:g} s, "
                f"ratio {max(heals) / tick:.2f})"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
