"""The README's guide for newcomers, run as written, in order, on a fresh copy of examples/
(issue 27). Every `sh` block of the guide is read from README.md itself, so a command that
needs a flag the README does not give (`--cacert` on a TLS cluster), or a server the guide
never starts (the failover set's Redis servers), fails here as it would for a newcomer.

Commands that run until Ctrl-C (`tree run`, `node start`, `failover server|client start`)
start in the background, as in the terminals the guide asks for; the others run to
completion, retried while what they ask about is still starting. At the end every background
command gets Ctrl-C and must exit 0. `rabbitry` is this checkout's (`python -m rabbitry`).

The guide's ports are fixed (7001-7003, 7101-7103, 6380, 6381, 9650), so the test skips, saying
which, if one is taken. It shares its xdist group with tests/failover/test_cli_failover.py,
whose RCSs use the same set name on the same bus.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PORTS = (7001, 7002, 7003, 7101, 7102, 7103, 6380, 6381, 9650)
LONG_RUNNING = (
    "rabbitry tree run",
    "rabbitry node start",
    "rabbitry failover server start",
    "rabbitry failover client start",
)
# What a one-shot command must print before it counts as done (what the guide promises).
EXPECT = {
    "rabbitry cluster status": "running nodes  a@127.0.0.1, b@127.0.0.1, c@127.0.0.1",
    "rabbitry failover status": "redis_master: 127.0.0.1:6380",
    "rabbitry tree check": ": ok (",
}
WAIT = 60.0

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.timeout(180)]


def _split(line: str) -> tuple[str, str]:
    parts = re.split(r"\s+#\s", line, maxsplit=1)
    return (parts[0], parts[1] if len(parts) > 1 else "")


def _taken(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


class Guide:
    """A newcomer's terminals: one per background command, and one for the rest."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        shim = cwd / "bin"
        shim.mkdir()
        (shim / "rabbitry").write_text(f'#!/bin/sh\nexec {sys.executable} -m rabbitry "$@"\n')
        (shim / "rabbitry").chmod(0o755)
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{shim}:{os.environ['PATH']}"}
        self.env.pop("DISPLAY", None)
        self.env.pop("WAYLAND_DISPLAY", None)
        self.env["RABBITRY_RUN_DIR"] = str(cwd / "run")
        self.background: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, command: str) -> None:
        index = len(self.background)
        log = open(self.cwd / f"terminal-{index}.log", "wb")  # noqa: SIM115 - the child keeps it
        proc = subprocess.Popen(
            ["bash", "-c", f"exec {command}"],
            cwd=self.cwd,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.background.append((command, proc))

    def run(self, command: str, expect: str | None) -> str:
        """Run to completion, again while it fails (what it asks about may be starting)."""
        deadline = time.monotonic() + WAIT
        while True:
            done = subprocess.run(
                ["bash", "-c", command],
                cwd=self.cwd,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=WAIT,
                check=False,
            )
            ok = done.returncode == 0 and (expect is None or expect in done.stdout)
            if ok:
                return done.stdout
            for name, proc in self.background:
                assert proc.poll() is None, f"`{name}` exited: {self.log_of(name)}"
            if time.monotonic() > deadline:
                pytest.fail(
                    f"`{command}` as the README writes it: exit {done.returncode}, expected "
                    f"{expect!r}\nstdout: {done.stdout}\nstderr: {done.stderr}"
                )
            time.sleep(0.5)

    def log_of(self, name: str) -> str:
        for index, (command, _) in enumerate(self.background):
            if command == name:
                return (self.cwd / f"terminal-{index}.log").read_text(errors="replace")[-3000:]
        return ""

    def ctrl_c_all(self) -> list[tuple[str, int | None]]:
        codes = []
        for command, proc in reversed(self.background):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)
            try:
                codes.append((command, proc.wait(30)))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                codes.append((command, proc.wait()))
        return codes


def test_the_guide_commands_work_as_written(tmp_path: Path) -> None:
    taken = [port for port in PORTS if _taken(port)]
    if taken:
        pytest.skip(f"the guide's ports {taken} are in use on this host")
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        pytest.skip("the failover guide needs redis-server and redis-cli on PATH")
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    guide = Guide(tmp_path)
    commands = [_split(line) for line in _guide_lines((ROOT / "README.md").read_text())]
    assert len(commands) >= 10, commands
    try:
        for command, comment in commands:
            if command.startswith(LONG_RUNNING):
                guide.start(command)
                for other in re.findall(r"\b(\w+\.yaml)\b", comment):  # "and b.yaml, c.yaml"
                    guide.start(re.sub(r"\b\w+\.yaml\b", other, command))
            elif command.startswith("redis-cli") and "shutdown" in command:
                guide.run(command + " || true", None)  # it may lose the connection it closes
                guide.run("rabbitry failover status", "redis_master: 127.0.0.1:6381")
            else:
                expect = next((v for k, v in EXPECT.items() if command.startswith(k)), None)
                guide.run(command, expect)
    finally:
        codes = guide.ctrl_c_all()
    bad = [(command, code, guide.log_of(command)) for command, code in codes if code != 0]
    assert not bad, bad


def _guide_lines(readme: str) -> list[str]:
    """Every command line of the guide's sh blocks (continuations joined), in order, and the
    `rabbitry cluster ui ...` of the prose right after the first `rabbitry cluster status`."""
    guide = readme[readme.index("## A guide for newcomers") :]
    prose_ui = re.findall(r"`(rabbitry cluster ui [^`]+)`", guide.replace("\n", " "))
    lines: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", guide, re.S):
        for raw in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"[ \t]+", " ", raw).strip()
            if not line:
                continue
            lines.append(line)
            if line.startswith("rabbitry cluster status") and prose_ui:
                lines.extend(re.sub(r"\s+", " ", ui) for ui in prose_ui)
                prose_ui = []
    return lines
