"""Ephemeral members with real node processes: 3 core nodes under pause_minority and
ephemeral nodes attached to them (docs/membership.md). One cluster serves the module.

The issue's case: ephemeral nodes SIGKILLed (as YARN or an OOM killer kills executors) never
pause the core, and the core forgets them after forget_ephemeral_after, not before.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest

from rabbitry.control import ControlClient, ControlError
from rabbitry.testing.cluster import COOKIE, Cluster, ClusterFactory, faultproxy_available
from tests.services import require_redis
from tests.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.redis]

FORGET = 2.0  # cluster.forget_ephemeral_after on the core (30 s by default)
CORE = ["a@127.0.0.1", "b@127.0.0.1", "c@127.0.0.1"]
GOSSIP = {
    "gossip": {
        "exchange": f"ephemeral-{uuid.uuid4().hex[:8]}",
        "heartbeat_interval": "200ms",
        "interval": "500ms",
    },
}


@pytest.fixture(scope="module")
def core(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if not faultproxy_available():
        pytest.skip("no fault proxy server for the core cluster")
    factory = ClusterFactory(tmp_path_factory.mktemp("ephemeral") / "rabbitry-cluster")
    GOSSIP["bus"] = require_redis()
    config = {"cluster": {"forget_ephemeral_after": FORGET}, **GOSSIP}
    try:
        c = factory(3, "pause_minority", config=config, wait=False)
        c.wait_until_formed(timeout=60)  # a loaded machine boots slowly; it is not a failure
        yield c
    finally:
        factory.close()


def patient(c: Cluster, node: str) -> ControlClient:
    """A control client that waits 30 s for an answer (the cluster's own waits 5 s): on a
    loaded machine a node may be slow to answer, which is not what these tests check."""
    host, _, port = json.loads(c.config_file(node).read_text())["control"].rpartition(":")
    return ControlClient(host, int(port), COOKIE, timeout=30)


def status(c: Cluster, node: str) -> dict:
    return patient(c, node).status()


def known(c: Cluster, node: str, x: str) -> bool:
    members = patient(c, node).ephemeral()
    return x in members["up"] or x in members["down"]


def never_paused(c: Cluster) -> None:
    for node in CORE:
        st = status(c, node)
        assert not st["paused"] and st["running"] == CORE, st
        assert not any("pausing the application" in line for line in c.proc(node).stderr())


def test_sigkilled_ephemeral_nodes_never_pause_the_core_and_are_forgotten(core: Cluster) -> None:
    xs = core.add_ephemeral(3)
    for x in xs:
        wait_until(lambda x=x: not status(core, x)["paused"], f"{x} to run", 30)
    wait_until(lambda: status(core, "a")["ephemeral"] == xs, "a to list the ephemeral nodes", 30)
    st = status(core, xs[0])
    assert st["all"] == CORE and st["running"] == CORE and st["ephemeral"] == [xs[0]]
    for node in CORE:  # never members, never in the cluster files
        st = status(core, node)
        assert st["all"] == CORE and st["disc"] == CORE
        files = (core.data_dir(node) / "cluster_nodes.config").read_text()
        assert not any(x in files for x in xs)
    killed = time.monotonic()  # before the first kill: each kill waits for its process to go
    for x in xs:
        core.kill(x)
    # Forgotten by every core node, and not before forget_ephemeral_after: a kill is a nodedown,
    # not a leave. The upper bound leaves room for a loaded machine; benchmarks/membership.py
    # measures the real figure (forget_ephemeral_after + about 0.5 s on a quiet machine).
    pending = {(n, x) for n in CORE for x in xs}
    while pending:
        before = pending
        pending = {(n, x) for n, x in pending if known(core, n, x)}
        waited = time.monotonic() - killed
        assert pending == before or waited >= FORGET, f"forgotten early ({waited:.1f} s)"
        assert not pending or waited < FORGET + 15.0, f"still known after {waited:.1f} s: {pending}"
        time.sleep(0.05)
    never_paused(core)


def test_status_join_leave_and_no_store_on_an_ephemeral_node(core: Cluster) -> None:
    # seeded with a core member that is not there: `rabbitry cluster join` attaches it
    stale = {"cluster": {"nodes": {"z@127.0.0.1": "127.0.0.1:9"}}}
    (x,) = core.add_ephemeral(1, stale, prefix="j")
    assert status(core, x)["paused"]
    patient(core, x).join("a@127.0.0.1", f"127.0.0.1:{core.dist_ports['a@127.0.0.1']}")
    wait_until(lambda: not status(core, x)["paused"], f"{x} to run after joining", 20)
    assert set(status(core, x)["all"]) >= set(CORE)
    wait_until(lambda: x in status(core, "b")["ephemeral"], "b to see it", 30)
    with pytest.raises(ControlError, match="ephemeral"):
        patient(core, x).mnesia_status()
    with pytest.raises(ControlError, match="ephemeral member"):
        patient(core, "a").mnesia("add_table_copy", table="t", node=x, type="disc_copies")
    out = _rabbitry("cluster", "status", "--json", *_control(core, "a"))
    assert x in json.loads(out)["ephemeral"]
    # a graceful stop is a leave: forgotten at once, not after forget_ephemeral_after
    core.proc(x).stop(10.0)
    wait_until(lambda: not any(known(core, n, x) for n in CORE), "the leave to be heard", 1.5)
    never_paused(core)


def _control(c: Cluster, node: str) -> list[str]:
    config = json.loads(c.config_file(node).read_text())
    return ["--control", config["control"], "--cookie-file", str(c.root / "cookie")]


def _rabbitry(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "rabbitry", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_gossip_revokes_and_elections_work_on_an_ephemeral_node(core: Cluster) -> None:
    """An ephemeral node is a gossip client (issue 26): it hears no heartbeat (its alive list
    stays empty), the core hears its heartbeats, revokes travel both ways, and its elections
    are decided by the core, a core member standing for it: as the only asker it wins."""
    patient(core, "a").revoke(["task-from-the-core"])
    (x,) = core.add_ephemeral(1, GOSSIP, prefix="g")
    client = patient(core, x)
    wait_until(lambda: client.gossip()["mingled"], f"{x} to sync with a core member", 20)
    gossip = client.gossip()
    assert gossip["client"] is True and gossip["alive"] == [], gossip
    assert "task-from-the-core" in client.revoked()  # from its proxy's reply
    wait_until(lambda: x in patient(core, "a").gossip()["alive"], "the core to hear it", 30)
    client.revoke(["task-from-an-executor"])
    wait_until(
        lambda: "task-from-an-executor" in patient(core, "b").revoked(), "the revoke at b", 30
    )
    assert client.elect("ephemeral-election", timeout=10) == x
    once = client.request("POST", "/gossip/elect_once", {"key": "k1", "timeout": 10})
    assert once == {"key": "k1", "winner": x, "run": True}
    again = client.request("POST", "/gossip/elect_once", {"key": "k1", "timeout": 10})
    assert again == {"key": "k1", "winner": x, "run": False}
    core.kill(x)


def test_one_seed_is_enough_the_rest_of_the_core_is_learned(core: Cluster) -> None:
    seed = {"cluster": {"nodes": {"a@127.0.0.1": f"127.0.0.1:{core.dist_ports['a@127.0.0.1']}"}}}
    (x,) = core.add_ephemeral(1, seed, prefix="s")
    wait_until(lambda: not status(core, x)["paused"], f"{x} to reach a majority", 30)
    for node in CORE:
        wait_until(lambda n=node: x in status(core, n)["ephemeral"], f"{node} to see {x}", 30)
    core.kill(x)
