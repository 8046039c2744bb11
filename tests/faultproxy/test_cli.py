"""`rabbitry faultproxy` as a subprocess: READY line, the API, clean exit on SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys

import requests
from toxiproxy import Toxiproxy
from toxiproxy.api import APIConsumer

from tests.faultproxy.conftest import connect, recv_exactly


def test_cli_serves_until_sigterm(echo: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "rabbitry", "faultproxy", "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("READY 127.0.0.1:")
        address = line.split()[1]
        host, _, port = address.rpartition(":")
        APIConsumer.host, APIConsumer.port = host, int(port)
        proxy = Toxiproxy().create(upstream=echo, name="cli")
        with connect(proxy.listen) as sock:
            sock.sendall(b"via cli")
            assert recv_exactly(sock, 7) == b"via cli"
        assert requests.get(f"http://{address}/version").json() == {"version": "2.12.0"}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        assert proc.stdout.read() == ""  # exactly one line on stdout
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cli_bad_listen_is_usage_error() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rabbitry", "faultproxy", "--listen", "nonsense"],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "HOST:PORT" in done.stderr


def test_cli_help_shows_client_example() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rabbitry", "faultproxy", "--help"],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0
    assert "toxiproxy-python" in done.stdout and "READY" in done.stdout
