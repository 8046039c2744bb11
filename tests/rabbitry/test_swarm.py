"""`rabbitry swarm` against a real 3-node core: 200 ephemeral members in 2 OS processes attach,
the core lists them, and SIGTERM makes them leave (docs/membership.md, "rabbitry swarm")."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rabbitry.testing.cluster import HOST, Cluster, ClusterFactory, faultproxy_available
from tests.waiting import wait_until

FORGET = 30.0  # the default forget_ephemeral_after: a leave must beat it by far
COUNT = 200


@pytest.fixture(scope="module")
def core(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if not faultproxy_available():
        pytest.skip("no fault proxy server for the core cluster")
    factory = ClusterFactory(tmp_path_factory.mktemp("swarm-core"))
    try:
        yield factory(3, "pause_minority", net_ticktime=2.0)
    finally:
        factory.close()


def _template(core: Cluster, path: Path, **extra: object) -> Path:
    data = {
        "node": "exec@127.0.0.1",
        "role": "ephemeral",
        "listen": f"{HOST}:7999",  # the port is ignored: each member listens on port 0
        "cookie_file": str(core.root / "cookie"),
        "data_dir": str(path.parent / "members"),
        "net_ticktime": 2.0,
        "partition_handling": "pause_minority",
        "control": f"{HOST}:1",  # ignored: no control API per member
        "cluster": {"nodes": {"a@127.0.0.1": f"{HOST}:{core.dist_ports['a@127.0.0.1']}"}},
        **extra,
    }
    path.write_text(json.dumps(data) + "\n")
    return path


def _swarm(template: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "rabbitry", "swarm", "--config", str(template), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _ephemeral_known(core: Cluster, node: str) -> set[str]:
    members = core.client(node).ephemeral()
    return set(members["up"]) | set(members["down"])


@pytest.mark.slow
def test_two_hundred_members_attach_and_leave(core: Cluster, tmp_path: Path) -> None:
    swarm = _swarm(
        _template(core, tmp_path / "exec.yaml"), "--count", str(COUNT), "--processes", "2"
    )
    try:
        assert swarm.stdout is not None
        line = swarm.stdout.readline()  # blocks until READY or the command ends
        assert line.strip() == f"READY {COUNT}", (line, swarm.poll())
        names = {f"exec-{i}@127.0.0.1" for i in range(COUNT)}
        for node in ("a", "b", "c"):  # one seed is enough: each member learns the others
            wait_until(
                lambda n=node: set(core.status(n)["ephemeral"]) == names,
                f"{node} to list the {COUNT} members",
                30,
                poll=0.1,
            )
            status = core.status(node)
            assert not status["paused"]
            assert len(status["all"]) == 3  # they never count
        # members keep their files apart, under the template's data_dir
        assert (tmp_path / "members" / "exec-0").is_dir()
        swarm.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        assert swarm.wait(90) == 0, swarm.stderr.read() if swarm.stderr else ""
        # a leave is forgotten at once, not forget_ephemeral_after later
        for node in ("a", "b", "c"):
            wait_until(
                lambda n=node: not _ephemeral_known(core, n),
                f"{node} to forget the members that left",
                FORGET / 2,
                poll=0.1,
            )
        assert time.monotonic() - t0 < FORGET
        assert not any(core.status(n)["paused"] for n in ("a", "b", "c"))
    finally:
        if swarm.poll() is None:  # its workers stop when it goes (they watch their parent)
            swarm.kill()
            swarm.wait()


def test_a_core_template_is_refused(core: Cluster, tmp_path: Path) -> None:
    template = _template(core, tmp_path / "core.yaml", role="core")
    done = subprocess.run(
        [sys.executable, "-m", "rabbitry", "swarm", "--config", str(template), "--count", "3"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "role" in done.stderr and "ephemeral" in done.stderr
    assert done.stdout == ""


def test_a_bad_template_is_refused_with_its_key(tmp_path: Path) -> None:
    template = tmp_path / "bad.yaml"
    template.write_text("node: exec@127.0.0.1\nrole: ephemeral\nlisten: 127.0.0.1:0\n")
    done = subprocess.run(
        [sys.executable, "-m", "rabbitry", "swarm", "--config", str(template), "--count", "3"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "bad.yaml" in done.stderr and "cookie" in done.stderr, done.stderr


def test_workers_stop_when_the_command_is_killed(tmp_path: Path) -> None:
    """The workers run in their own session; a SIGKILLed command must not leave them running.
    (No core: the members wait to attach, and are stopped before they ever do.)"""
    import psutil

    from rabbitry.testing.cluster import COOKIE, free_ports

    cookie = tmp_path / "cookie"
    cookie.write_bytes(COOKIE)
    cookie.chmod(0o600)
    nowhere = free_ports(1)[0]
    template = tmp_path / "exec.yaml"
    template.write_text(
        json.dumps(
            {
                "node": "exec@127.0.0.1",
                "listen": f"{HOST}:0",
                "cookie_file": str(cookie),
                "data_dir": str(tmp_path / "members"),
                "cluster": {"nodes": {"a@127.0.0.1": f"{HOST}:{nowhere}"}},
            }
        )
    )
    swarm = _swarm(template, "--count", "2", "--processes", "2")
    command = psutil.Process(swarm.pid)
    workers: list[psutil.Process] = []
    try:
        workers = wait_until(
            lambda: len(command.children()) == 2 and command.children(), "the 2 workers", 30
        )
        swarm.kill()
        swarm.wait()
        # (an orphan may come to this process, a subreaper under the test suite: a zombie here
        # is a worker that ended)
        wait_until(lambda: not [w for w in workers if _alive(w)], "the workers to end", 30, 0.1)
    finally:
        for p in [command, *workers]:
            with contextlib.suppress(psutil.Error):
                p.kill()


def _alive(process: object) -> bool:
    import psutil

    assert isinstance(process, psutil.Process)
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
