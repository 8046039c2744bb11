"""The `cluster` fixture of rabbitry.testing.plugin, end to end: real node processes, a fault
proxy on every directed link, pause_minority, net_ticktime 1 s."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from rabbitry.testing.cluster import (
    Cluster,
    ClusterFactory,
    ToxiproxyAPI,
    faultproxy_available,
    node_name,
)

pytest_plugins = ["rabbitry.testing.plugin"]
pytestmark = pytest.mark.slow

A, B, C = (node_name(i) for i in range(3))


def _alive(pid: int) -> bool:
    """The launcher reaps what it stops, so a gone pid is gone for good."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _port_free(address: str) -> bool:
    host, _, port = address.rpartition(":")
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is no listener
        try:
            sock.bind((host, int(port)))
        except OSError:
            return False
    return True


def test_formed_cluster_has_a_proxy_on_every_directed_link(cluster: ClusterFactory) -> None:
    c = cluster(3)
    assert c.nodes == [A, B, C]
    assert sorted(c.proxies) == sorted((x, y) for x in c.nodes for y in c.nodes if x != y)
    listens = set(c.proxies.values())
    assert len(listens) == 6
    assert c.proxy_name("a", "b").endswith("a->b")  # prefixed on a shared $TOXIPROXY_URL
    for status in c.statuses().values():
        assert status["running"] == [A, B, C] and status["paused"] is False


def test_full_partition_pauses_the_minority_and_heal_resumes_it(cluster: ClusterFactory) -> None:
    c = cluster(3, partition_handling="pause_minority")
    c.partition(["a"], ["b", "c"])
    c.wait_for(lambda: c.paused("a"), 15, "a to pause")
    c.wait_for(lambda: c.running("b") == [B, C] and c.running("c") == [B, C], 15, "b, c to drop a")
    assert not c.paused("b") and not c.paused("c")
    c.heal()
    c.wait_until_formed(timeout=20)


def test_a_oneway_cut_stops_one_direction_and_heals(cluster: ClusterFactory) -> None:
    c = cluster(3, partition_handling="pause_minority")
    c.cut("a", "b", oneway=True)
    ab, ba = c.proxy_name("a", "b"), c.proxy_name("b", "a")
    toxics = {p: {(t["name"], t["stream"]) for t in c.api.toxics(p)} for p in (ab, ba)}
    assert toxics == {ab: {("cut_upstream", "upstream")}, ba: {("cut_downstream", "downstream")}}
    assert not c.api.toxics(c.proxy_name("a", "c")) and not c.api.toxics(c.proxy_name("c", "b"))
    # b hears nothing from a: the a-b link goes down; c still sees both of them
    c.wait_for(lambda: A not in c.running("b") or B not in c.running("a"), 15, "a-b link down")
    assert not c.paused("c")  # c sees both sides: it is in the majority either way
    c.heal()
    assert all(not c.api.toxics(c.proxy_name(x, y)) for (x, y) in c.proxies)
    c.wait_until_formed(timeout=20)


def test_kill_and_restart_keep_the_data_dir(cluster: ClusterFactory) -> None:
    c = cluster(3)
    old_pid = c.proc("c").pid
    c.kill("c")
    c.wait_for(lambda: c.running("a") == [A, B] and c.running("b") == [A, B], 15, "c seen down")
    assert not c.paused("a") and not c.paused("b")
    assert c.statuses()[C].startswith("dead")
    c.restart("c")
    assert c.proc("c").pid != old_pid
    assert (c.data_dir("c") / "cluster_nodes.config").exists()
    c.wait_until_formed(timeout=20)


def test_stop_and_cont(cluster: ClusterFactory) -> None:
    c = cluster(3)
    c.stop("a")
    assert c.statuses()[A] == "SIGSTOPped"
    c.wait_for(lambda: c.running("b") == [B, C], 15, "a seen down while frozen")
    c.cont("a")
    c.wait_until_formed(timeout=20)


def test_wait_for_failure_shows_every_status(cluster: ClusterFactory) -> None:
    c = cluster(2)
    c.cut("a", "b", oneway=True)
    with pytest.raises(AssertionError) as failure:
        c.wait_for(lambda: False, 0.3, "the impossible")
    message = str(failure.value)
    assert "the impossible" in message
    assert f"{A}: " in message and f"{B}: " in message
    assert '"running"' in message and '"paused"' in message
    assert f"{c.proxy_name('a', 'b')}: cut_upstream(timeout)" in message


def test_teardown_leaves_no_process_port_or_proxy(tmp_path: Path) -> None:
    """What the fixture does after a test, done by hand after a failing block."""
    factory = ClusterFactory(tmp_path)
    pids: list[int] = []
    ports: list[str] = []
    api: ToxiproxyAPI | None = None
    c: Cluster | None = None
    with pytest.raises(RuntimeError, match="the test failed"):
        try:
            if not faultproxy_available():
                pytest.skip("rabbitry faultproxy not available")
            c = factory(2)
            api = factory.api
            pids = [c.proc(n).pid for n in c.nodes]
            ports = list(c.proxies.values())
            for node in c.nodes:
                config = json.loads(c.config_file(node).read_text())
                ports += [config["listen"], config["control"]]
            c.stop("a")  # a frozen node must be torn down too
            raise RuntimeError("the test failed")
        finally:
            server = factory._server
            factory.close()
    assert c is not None and api is not None
    assert not any(_alive(pid) for pid in pids)
    assert all(_port_free(address) for address in ports)
    if server is not None:
        assert not server.alive
    else:  # an external server: our proxies are gone from it
        names = set(api.request("GET", "/proxies"))
        assert not names & {c.proxy_name(x, y) for (x, y) in c.proxies}


def test_test_ports_are_handed_out_once_across_processes_and_below_the_ephemeral_range(
    tmp_path: Path,
) -> None:
    """Two pytest workers starting clusters at once must never get the same port, and no
    outgoing connection may take one before its node listens (the kernel's ephemeral range
    starts at 32768): four processes take 50 ports each at the same moment."""
    import subprocess
    import sys

    from rabbitry.testing.cluster import PORT_RANGE

    code = (
        "import json; from rabbitry.testing.cluster import free_ports; "
        "print(json.dumps(free_ports(50)))"
    )
    env = {**os.environ, "RABBITRY_TEST_PORTS": str(tmp_path / "ports")}
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env=env)
        for _ in range(4)
    ]
    taken = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    flat = [port for ports in taken for port in ports]
    assert len(flat) == len(set(flat)) == 200
    assert all(PORT_RANGE[0] <= port < PORT_RANGE[1] for port in flat)
