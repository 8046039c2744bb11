"""`rabbitry demo --quick`, as a user runs it: a subprocess, from a clean directory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.services import redis_server_binary, require_spark, unactivated_venv

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(240)]

REPORT_KEYS = {
    "messages",
    "distinct_ids",
    "revoked",
    "processed",
    "duplicates_executed",
    "lost",
    "failover_seconds",
    "pause_seconds",
    "first_message",
    "timeline",
}


def test_demo_quick_holds_exactly_once_and_writes_its_report(tmp_path: Path) -> None:
    require_spark()
    redis_server_binary()
    # As pipx, cron or systemd run it: a venv's python by path, not activated, and a PATH
    # whose python3 lacks rabbitry (the executors must not pick that one).
    python, env = unactivated_venv(tmp_path / "env")
    # --work-dir: so that the command lines of everything it starts name tmp_path
    work = ["--work-dir", str(tmp_path / "work")]
    result = subprocess.run(
        [python, "-m", "rabbitry", "demo", "--quick", "--out-dir", str(tmp_path), *work],
        check=False,
        capture_output=True,
        text=True,
        timeout=220,
        cwd=tmp_path,
        env=env,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # Spark's and the failover's log lines go to demo.log, not between the view's lines
    for noise in ("WARN Utils", "NativeCodeLoader", "incubator", "Traceback"):
        assert noise not in result.stdout + result.stderr, noise
    assert "WARN" in (tmp_path / "demo.log").read_text()
    report = json.loads((tmp_path / "demo-report.json").read_text())
    assert set(report) >= REPORT_KEYS
    assert report["ok"] is True
    assert report["duplicates_executed"] == 0 and report["lost"] == 0
    assert report["processed"] == report["distinct_ids"] - report["revoked"]
    assert report["failover_seconds"] is not None, "the Redis master kill did not complete"
    # the warm-up is measured (its goal, a fifth of the job, is a benchmark figure, not a test)
    assert 0 <= report["first_message"]["share"] < 1, report["first_message"]
    assert "First message:" in result.stdout
    kinds = {event["kind"] for event in report["timeline"]["events"]}
    assert {"redis_master_killed", "redis_master_changed", "partition_start"} <= kinds
    assert sum(report["pause_seconds"].values()) > 0, "the partitioned node never paused"
    png = (tmp_path / "demo-timeline.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    assert "exactly" in result.stdout.lower()
    # everything it started is gone: no sidecar, node or redis-server of this run is left
    leftovers = subprocess.run(
        ["pgrep", "-f", str(tmp_path / "work")], check=False, capture_output=True, text=True
    ).stdout.split()
    assert not leftovers, f"processes left behind: {leftovers}"


def test_ctrl_c_stops_everything_the_demo_started(tmp_path: Path) -> None:
    require_spark()
    redis_server_binary()
    import signal
    import time

    work = tmp_path / "work"
    WORK = ["--work-dir", str(work)]
    demo = subprocess.Popen(
        [sys.executable, "-m", "rabbitry", "demo", "--quick", "--out-dir", str(tmp_path), *WORK],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert demo.stdout is not None
        for line in demo.stdout:  # the view prints a line per phase when not on a terminal
            if "starting Spark" in line:
                break
        time.sleep(2)  # the redis-servers, the failover tree and the nodes all run now
        assert subprocess.run(["pgrep", "-f", str(work)], check=False, capture_output=True).stdout
        demo.send_signal(signal.SIGINT)
        assert demo.wait(60) == 130
    finally:
        if demo.poll() is None:
            demo.kill()

    def leftovers() -> list[str]:
        found = subprocess.run(["pgrep", "-af", str(work)], check=False, capture_output=True)
        return found.stdout.decode().splitlines()

    # a process told to stop may take a moment to be gone (a JVM's shutdown hooks)
    deadline = time.monotonic() + 15
    while leftovers() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not leftovers(), f"processes left behind after Ctrl-C: {leftovers()}"
