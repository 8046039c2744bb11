"""Real nodes: `rabbitry node start` as separate OS processes, watched through their control
APIs. These take seconds each (net_ticktime 1 s), so they are marked slow."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rabbitry.cli import main
from rabbitry.control import ControlClient
from rabbitry.testing.cluster import free_ports
from rabbitry.testing.launcher import Launcher, NodeSpec, OsNode

pytestmark = pytest.mark.slow

COOKIE = b"node-process-test-cookie"
NAMES = ("a@127.0.0.1", "b@127.0.0.1", "c@127.0.0.1")


def _free_ports(n: int) -> list[int]:
    return free_ports(n)  # race-free across workers (rabbitry.testing.cluster)


class Cluster:
    """Three node processes with their config files, and a control client for each."""

    def __init__(self, launcher: Launcher, root: Path, mode: str) -> None:
        self.launcher = launcher
        self.root = root
        dist, control = _free_ports(3), _free_ports(3)
        (root / "cookie").write_bytes(COOKIE)
        os.chmod(root / "cookie", 0o600)
        (root / "app.yaml").write_text(
            "supervisor:\n  children:\n"
            "    - id: idle\n      start: 'rabbitry.examples_workers:Idle'\n"
        )
        members = "".join(f"    {n}: 127.0.0.1:{p}\n" for n, p in zip(NAMES, dist, strict=True))
        self.clients: dict[str, ControlClient] = {}
        self.specs: dict[str, NodeSpec] = {}
        for name, port, cport in zip(NAMES, dist, control, strict=True):
            short = name.split("@")[0]
            config = root / f"{short}.yaml"
            config.write_text(
                f"node: {name}\nlisten: 127.0.0.1:{port}\ncookie_file: ./cookie\n"
                f"data_dir: ./data/{short}\nnet_ticktime: 1s\n"
                f"cluster:\n  nodes:\n{members}"
                f"partition_handling: {mode}\ncontrol: 127.0.0.1:{cport}\ntree: ./app.yaml\n"
            )
            self.clients[name] = ControlClient("127.0.0.1", cport, COOKIE, timeout=5)
            self.specs[name] = NodeSpec(
                short,
                [sys.executable, "-m", "rabbitry", "node", "start", "--config", str(config)],
                cwd=str(root),
            )
        self.nodes: dict[str, OsNode] = {}

    def start(self, *names: str) -> None:
        for name in names or NAMES:
            self.nodes[name] = self.launcher.start_one(self.specs[name])

    def status(self, name: str) -> dict[str, Any]:
        return self.clients[name].status()

    def wait_for(self, what: str, predicate: Callable[[], bool], timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if predicate():
                    return
            except Exception:
                pass
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}; statuses: {self._all_statuses()}")

    def _all_statuses(self) -> dict[str, Any]:
        out = {}
        for name in self.nodes:
            try:
                out[name] = self.status(name)
            except Exception as exc:
                out[name] = repr(exc)
        return out


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Callable[[str], Cluster]]:
    with Launcher() as launcher:
        yield lambda mode: Cluster(launcher, tmp_path, mode)


def test_three_nodes_form_the_cluster_and_report_it(cluster: Any) -> None:
    c = cluster("pause_minority")
    c.start()
    for name in NAMES:
        c.wait_for(f"{name} sees all running", lambda n=name: c.status(n)["running"] == list(NAMES))
    status = c.status(NAMES[0])
    assert set(status) == {
        "node",
        "all",
        "disc",
        "running",
        "partitions",
        "paused",
        "alarms",
        "ephemeral",
    }
    assert status["all"] == list(NAMES) and status["paused"] is False


def test_pause_minority_pauses_the_node_left_alone_and_resumes_it(
    cluster: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    c = cluster("pause_minority")
    c.start()
    a, b, cc = NAMES
    c.wait_for("all running", lambda: c.status(a)["running"] == list(NAMES))
    c.nodes[b].pause()
    c.nodes[cc].pause()
    c.wait_for("a paused", lambda: c.status(a)["paused"] is True)
    c.nodes[a].wait_for(r"shutdown supervisor=a@127\.0\.0\.1 child=app", stream="stderr")
    # The app, the CLI and the page agree: a paused node's application is stopped (issue 27).
    assert c.clients[a].app()["state"] == "stopped"
    assert main(["cluster", "status", "--config", str(c.root / "a.yaml")]) == 0
    out = capsys.readouterr().out
    assert "paused         yes" in out and "application    stopped" in out, out
    c.nodes[b].resume()
    c.nodes[cc].resume()
    c.wait_for("a resumed", lambda: c.status(a)["paused"] is False, timeout=30)
    c.wait_for("all running again", lambda: c.status(a)["running"] == list(NAMES), timeout=30)


def test_a_killed_node_leaves_the_majority_running(cluster: Any) -> None:
    c = cluster("pause_minority")
    c.start()
    a, b, cc = NAMES
    c.wait_for("all running", lambda: c.status(a)["running"] == list(NAMES))
    c.nodes[cc].kill()
    c.wait_for("c seen down", lambda: c.status(a)["running"] == [a, b])
    assert c.status(a)["paused"] is False and c.status(b)["paused"] is False
    assert c.status(a)["all"] == list(NAMES)  # down is not gone: still a member


def test_sigterm_stops_in_order_and_writes_the_cluster_files(cluster: Any, tmp_path: Path) -> None:
    c = cluster("ignore")
    c.start()
    a = NAMES[0]
    c.wait_for("all running", lambda: c.status(a)["running"] == list(NAMES))
    node = c.nodes[a]
    assert node.stop(grace=15) == 0
    data = tmp_path / "data" / "a"
    running = json.loads((data / "nodes_running_at_shutdown").read_text())
    members = json.loads((data / "cluster_nodes.config").read_text())
    assert running["running"] == list(NAMES)
    assert members["all"] == list(NAMES)
    assert any("child=app reason=shutdown" in line for line in node.stderr())


def test_a_bad_config_exits_2_with_the_key_path(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("node: a@127.0.0.1\nlisten: nowhere\ncookie: x\n")
    done = subprocess.run(
        [sys.executable, "-m", "rabbitry", "node", "start", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert f"{config}: listen: expected" in done.stderr


def test_join_then_forget_between_real_nodes(tmp_path: Path) -> None:
    """Two nodes started alone (a cluster of one each); b joins a through its control API and
    both list both; b restarts from a file that lists only itself and still rejoins; then b is
    stopped and a forgets it."""
    (tmp_path / "cookie").write_bytes(COOKIE)
    os.chmod(tmp_path / "cookie", 0o600)
    dist, control = _free_ports(2), _free_ports(2)
    specs, clients = {}, {}
    for name, port, cport in zip(NAMES[:2], dist, control, strict=True):
        short = name.split("@")[0]
        config = tmp_path / f"{short}.yaml"
        config.write_text(
            f"node: {name}\nlisten: 127.0.0.1:{port}\ncookie_file: ./cookie\n"
            f"data_dir: ./data/{short}\nnet_ticktime: 1s\ncontrol: 127.0.0.1:{cport}\n"
        )
        specs[name] = NodeSpec(
            short,
            [sys.executable, "-m", "rabbitry", "node", "start", "--config", str(config)],
            cwd=str(tmp_path),
        )
        clients[name] = ControlClient("127.0.0.1", cport, COOKIE, timeout=10)
    a, b = NAMES[:2]
    with Launcher() as launcher:
        nodes = {name: launcher.start_one(spec) for name, spec in specs.items()}
        assert clients[b].status()["all"] == [b]
        joined = clients[b].join(a, f"127.0.0.1:{dist[0]}")
        assert joined["all"] == [a, b]
        deadline = time.monotonic() + 20
        while clients[a].status()["all"] != [a, b] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert clients[a].status()["all"] == [a, b]
        # b's file lists only b: after a restart the persisted membership must win, and the
        # learned address must bring it back to a
        assert nodes[b].stop(grace=15) == 0
        nodes[b] = launcher.start_one(specs[b])
        assert clients[b].status()["all"] == [a, b]
        deadline = time.monotonic() + 20
        while clients[b].status()["running"] != [a, b] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert clients[b].status()["running"] == [a, b]
        assert nodes[b].stop(grace=15) == 0
        deadline = time.monotonic() + 20
        while b in clients[a].status()["running"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert clients[a].forget(b)["all"] == [a]


def test_an_alarm_on_one_node_shows_in_every_status(tmp_path: Path) -> None:
    """b's disk_free_limit is above any real disk: b raises a disk alarm, and a shows it."""
    (tmp_path / "cookie").write_bytes(COOKIE)
    os.chmod(tmp_path / "cookie", 0o600)
    dist, control = _free_ports(2), _free_ports(2)
    a, b = NAMES[:2]
    members = "".join(f"    {n}: 127.0.0.1:{p}\n" for n, p in zip((a, b), dist, strict=True))
    clients = {}
    with Launcher() as launcher:
        for name, port, cport in zip((a, b), dist, control, strict=True):
            short = name.split("@")[0]
            limit = "1000TB" if name == b else "1MB"
            config = tmp_path / f"{short}.yaml"
            config.write_text(
                f"node: {name}\nlisten: 127.0.0.1:{port}\ncookie_file: ./cookie\n"
                f"data_dir: ./data/{short}\nnet_ticktime: 1s\ncontrol: 127.0.0.1:{cport}\n"
                f"cluster:\n  nodes:\n{members}"
                f"alarms: {{memory_high_watermark: 1.0, disk_free_limit: {limit}}}\n"
            )
            launcher.start_one(
                NodeSpec(
                    short,
                    [sys.executable, "-m", "rabbitry", "node", "start", "--config", str(config)],
                    cwd=str(tmp_path),
                )
            )
            clients[name] = ControlClient("127.0.0.1", cport, COOKIE, timeout=10)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            alarms = clients[a].status()["alarms"]
            if alarms.get(b) == ["disk"]:
                break
            time.sleep(0.1)
        assert clients[a].status()["alarms"].get(b) == ["disk"]
        assert not clients[a].status()["alarms"].get(a)
        assert clients[b].status()["alarms"].get(b) == ["disk"]


def test_a_first_boot_and_a_full_stop_read_as_they_are(cluster: Any) -> None:
    """Issue 27: the first boot starts the application (it does not "resume" it), `node up`
    lines name the node, and stopping every node at once logs no error (a node that sees its
    peers go while it stops has nothing left to pause)."""
    c = cluster("pause_minority")
    c.start()
    a = NAMES[0]
    c.wait_for("all running", lambda: all(c.status(n)["running"] == list(NAMES) for n in NAMES))
    for name in NAMES:
        c.nodes[name].signal(signal.SIGTERM)
    for name in NAMES:  # one SIGTERM each (a second would make a node exit at once, with 1)
        assert c.nodes[name].popen.wait(30) == 0
        c.nodes[name].stop()
    for name in NAMES:
        lines = c.nodes[name].stderr()
        assert any("starting the application" in line for line in lines), lines
        assert not any("resuming the application" in line for line in lines), lines
        errors = [line for line in lines if " ERROR " in line or "Traceback" in line]
        assert not errors, errors
    up = [line for line in c.nodes[a].stderr() if "monitors.node_monitor: node up" in line]
    assert up and all("node=" in line for line in up), up
