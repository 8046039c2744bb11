"""Names are verified, not believed (DESIGN): real node processes on one host.

A copied config file (only `listen`, `control` and `data_dir` changed) must never split the
cluster: started on the same host it stops at the name lock before it listens; started as if
on another host (its own lock dir) it is refused by the members that hold a live link from
the name. Either way it exits 2 naming the node and where the live one runs, and the cluster
sees nothing: no pause, no nodedown.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from monitors.dist.name_lock import LOCK_DIR_ENV
from rabbitry.testing.cluster import Cluster
from rabbitry.testing.netns import unavailable

pytestmark = pytest.mark.slow
B = "b@127.0.0.1"
IN_USE = re.compile(r"node b@127\.0\.0\.1: the name is in use by a running node at (\S+)")


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    from rabbitry.testing.cluster import ClusterFactory

    factory = ClusterFactory(tmp_path_factory.mktemp("names"))
    try:
        yield factory(3)
    finally:
        factory.close()


def _copy_of_b(cluster: Cluster, tag: str) -> str:
    config = json.loads(cluster.config_file(B).read_text())
    config.update(listen="127.0.0.1:0", control="127.0.0.1:0", data_dir=f"./data/twin-{tag}")
    path = cluster.root / f"twin-{tag}.yaml"
    path.write_text(json.dumps(config))
    return str(path)


def _run_twin(cluster: Cluster, path: str, lock_env: dict[str, str]) -> subprocess.CompletedProcess:
    env = {**os.environ, **lock_env}
    argv = [sys.executable, "-m", "rabbitry", "node", "start", "--config", path]
    return subprocess.run(
        argv, check=False, cwd=cluster.root, env=env, capture_output=True, text=True, timeout=60
    )


def _undisturbed(cluster: Cluster) -> None:
    for node in cluster.nodes:
        status = cluster.status(node)
        assert status["running"] == cluster.nodes and not status["paused"], status
    for node in ("a@127.0.0.1", "c@127.0.0.1"):
        lines = cluster.proc(node).stderr()
        assert [line for line in lines if f"node up: {B}" in line], lines  # logs are read
        assert not [line for line in lines if f"node down: {B}" in line], lines


def test_a_copied_config_on_the_same_host_stops_at_the_name_lock(three):
    done = _run_twin(three, _copy_of_b(three, "lock"), three.lock_env(B))
    assert done.returncode == 2, done.stderr
    found = IN_USE.search(done.stderr)
    assert found and found.group(1) == f"127.0.0.1:{three.dist_ports[B]}", done.stderr
    assert "READY" not in done.stdout
    _undisturbed(three)


def test_a_copied_config_on_another_host_is_refused_by_the_members(three, tmp_path):
    done = _run_twin(three, _copy_of_b(three, "remote"), {LOCK_DIR_ENV: str(tmp_path)})
    assert done.returncode == 2, done.stderr
    assert IN_USE.search(done.stderr), done.stderr
    assert "READY" not in done.stdout
    _undisturbed(three)
    refused = [line for line in three.proc("a").stderr() if "the name is in use" in line]
    assert refused, "a logged no refusal"


# ----------------------------------------------------------------- roles are facts


def test_a_role_flip_while_c_is_dead_is_refused_and_a_pauses_when_b_freezes(cluster):
    cl = cluster(3)
    cl.kill("c")
    cl.wait_for(lambda: cl.running("a") == ["a@127.0.0.1", B], 20, "a to see c go")
    config = json.loads(cl.config_file("c").read_text())
    config.update(
        role="ephemeral",
        listen="127.0.0.1:0",
        control="127.0.0.1:0",
        data_dir="./data/c-flipped",
        cluster={"nodes": {n: f"127.0.0.1:{p}" for n, p in cl.dist_ports.items() if n[0] != "c"}},
    )
    path = cl.root / "c-flipped.yaml"
    path.write_text(json.dumps(config))
    done = _run_twin(cl, str(path), cl.lock_env("c@127.0.0.1"))
    assert done.returncode == 2, done.stderr
    assert "c@127.0.0.1 is a core member of the cluster" in done.stderr, done.stderr
    assert "rabbitry cluster forget c@127.0.0.1" in done.stderr
    cl.stop("b")  # SIGSTOP: a is left with 1 of 3 real core members
    cl.wait_for(lambda: cl.paused("a"), 20, "a to pause on a minority")
    cl.cont("b")


def test_an_executor_follows_the_cores_mode_and_says_so(cluster):
    cl = cluster(3)  # pause_minority
    (x,) = cl.add_ephemeral(1, {"partition_handling": "ignore"})
    cl.wait_for(lambda: not cl.paused(x), 30, "the executor to run")
    said = [line for line in cl.proc(x).stderr() if "differs from the core" in line]
    assert said, cl.proc(x).stderr()[-20:]
    cl.stop("b")
    cl.stop("c")  # under its own `ignore` it would keep running with a
    cl.wait_for(lambda: cl.paused(x), 20, "the executor to pause with the core's mode")
    cl.cont("b")
    cl.cont("c")
    cl.wait_for(lambda: not cl.paused(x), 30, "the executor to run again")


def test_a_core_leave_while_an_executor_is_cut_off(cluster):
    cl = cluster(3)
    (x,) = cl.add_ephemeral(1)
    cl.wait_for(lambda: not cl.paused(x), 30, "the executor to run")
    cl.client(x).block(["a@127.0.0.1", B], 60.0)  # cut off from a and b: rightly paused
    cl.wait_for(lambda: cl.paused(x), 20, "the executor to pause")
    cl.client("c").leave()  # c lists itself alone now, and says whom it left (its own word)
    cl.wait_for(lambda: cl.status("a")["all"] == ["a@127.0.0.1", B], 20, "the core to drop c")
    cl.wait_for(lambda: cl.status(x)["all"] == ["a@127.0.0.1", B], 20, "x to drop c")
    assert cl.paused(x)  # it reaches neither a nor b
    cl.client(x).unblock()  # the cut heals
    cl.wait_for(
        lambda: not cl.paused(x) and cl.status(x)["all"] == ["a@127.0.0.1", B],
        30,
        "the executor to move to the remaining core and run",
    )


NETNS_WHY = unavailable()


@pytest.mark.skipif(NETNS_WHY is not None, reason=NETNS_WHY or "")
def test_a_copied_config_on_another_netns_host_is_refused(cluster, tmp_path):
    """Each node in its own network namespace; the copy runs in another namespace (and with
    its own lock dir: another host) and claims b@127.0.0.1."""
    cl = cluster(3, network="netns")
    assert cl.netns is not None
    config = json.loads(cl.config_file(B).read_text())
    config.update(listen=f"{cl.netns.ip(0)}:0", control="127.0.0.1:0", data_dir="./data/twin-netns")
    path = cl.root / "twin-netns.yaml"
    path.write_text(json.dumps(config))
    argv = [*cl.netns.exec_prefix(0), sys.executable, "-m", "rabbitry", "node", "start"]
    done = subprocess.run(
        [*argv, "--config", str(path)],
        check=False,
        cwd=cl.root,
        env={**os.environ, LOCK_DIR_ENV: str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert IN_USE.search(done.stderr), done.stderr
    _undisturbed(cl)
