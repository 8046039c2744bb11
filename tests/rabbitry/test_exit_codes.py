"""`rabbitry node start` exits 2 for every config mistake, naming the key and the line: a taken
`listen:`, `control:` or `metrics:` port also names the process that holds it (here, this test
process), and a missing `tree:` file names the key (issue 27)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rabbitry.testing.cluster import free_ports

COOKIE = b"exit-code-test-cookie-0123456789"


@pytest.fixture
def taken() -> Iterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


def _free_port() -> int:
    return free_ports(1)[0]  # race-free across workers (rabbitry.testing.cluster)


def _start(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "cookie").write_bytes(COOKIE)
    os.chmod(tmp_path / "cookie", 0o600)
    config = tmp_path / "node.yaml"
    config.write_text("node: a@127.0.0.1\ncookie_file: ./cookie\n" + body)
    return subprocess.run(
        [sys.executable, "-m", "rabbitry", "node", "start", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )


@pytest.mark.parametrize("key", ["listen", "control", "metrics"])
def test_a_taken_port_exits_2_naming_the_key_line_and_holder(
    tmp_path: Path, taken: int, key: str
) -> None:
    ports = {"listen": _free_port(), "control": _free_port(), "metrics": _free_port()}
    ports[key] = taken
    done = _start(
        tmp_path,
        f"listen: 127.0.0.1:{ports['listen']}\n"
        f"control: 127.0.0.1:{ports['control']}\n"
        f"metrics: 127.0.0.1:{ports['metrics']}\n",
    )
    line = {"listen": 3, "control": 4, "metrics": 5}[key]
    assert done.returncode == 2, done.stderr
    assert f"node.yaml: {key}: cannot listen on 127.0.0.1:{taken}" in done.stderr
    assert f"(line {line})" in done.stderr
    assert f"pid {os.getpid()}" in done.stderr  # this test holds the port


def test_a_missing_tree_file_names_the_key_and_line(tmp_path: Path) -> None:
    done = _start(tmp_path, f"listen: 127.0.0.1:{_free_port()}\ntree: ./no-such-tree.yaml\n")
    assert done.returncode == 2, done.stderr
    assert "node.yaml: tree: " in done.stderr and "no-such-tree.yaml does not exist" in done.stderr
    assert "(line 4)" in done.stderr
