"""Nodes with a `bus:` gossip: real node processes on the local Redis and RabbitMQ."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from rabbitry.control import ControlClient
from rabbitry.testing.cluster import COOKIE, node_name
from tests.services import require_amqp, require_redis

pytest_plugins = ["rabbitry.testing.plugin"]
pytestmark = pytest.mark.slow

A, B, C = (node_name(i) for i in range(3))


def _gossip_config(url: str) -> dict:
    return {
        "bus": url,
        "gossip": {
            "exchange": f"node-gossip-{uuid.uuid4().hex[:8]}",
            "heartbeat_interval": "200ms",
            "interval": "500ms",
        },
    }


def _client(c, node: str) -> ControlClient:
    host, _, port = json.loads(c.config_file(node).read_text())["control"].rpartition(":")
    return ControlClient(host, int(port), COOKIE, timeout=5)


@pytest.mark.parametrize(
    "kind",
    [pytest.param("redis", marks=pytest.mark.redis), pytest.param("amqp", marks=pytest.mark.amqp)],
)
def test_nodes_gossip_and_a_partitioned_minority_keeps_gossiping_paused(cluster, kind) -> None:
    url = require_redis() if kind == "redis" else require_amqp()
    c = cluster(3, partition_handling="pause_minority", config=_gossip_config(url))
    clients = {n: _client(c, n) for n in c.nodes}
    for n in c.nodes:
        others = [m for m in c.nodes if m != n]
        c.wait_for(lambda n=n, o=others: clients[n].gossip()["alive"] == o, 20, f"{n} gossip")
    gossip = clients[A].gossip()
    assert gossip["connected"] is True and gossip["clock"] > 0
    # a dist partition does not cut the bus: a pauses, and its gossip knows it is paused
    c.partition(["a"], ["b", "c"])
    c.wait_for(lambda: c.paused("a"), 15, "a to pause")
    c.wait_for(lambda: clients[A].gossip()["elections"].get("paused") is True, 10, "gossip paused")
    c.heal()
    c.wait_until_formed(timeout=30)
    c.wait_for(lambda: clients[A].gossip()["elections"].get("paused") is False, 10, "unpaused")


def test_cluster_status_prints_the_gossip(cluster) -> None:
    url = require_redis()
    c = cluster(2, partition_handling="pause_minority", config=_gossip_config(url))
    client = _client(c, "a")
    c.wait_for(lambda: client.gossip()["alive"] == [B], 20, "a to see b")
    control = json.loads(c.config_file("a").read_text())["control"]
    args = ["cluster", "status", "--control", control, "--cookie-file", str(c.root / "cookie")]
    out = _rabbitry(*args)
    assert "alive workers  b@127.0.0.1" in out and "clock" in out
    assert sorted(json.loads(_rabbitry(*args, "--json"))) == sorted(
        ["node", "all", "disc", "running", "partitions", "paused", "alarms", "ephemeral"]
    )


def _rabbitry(*args: str) -> str:
    command = [sys.executable, "-m", "rabbitry", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=30, check=True).stdout


def test_a_node_without_a_bus_says_so(cluster) -> None:
    c = cluster(1)
    from rabbitry.control import ControlError

    with pytest.raises(ControlError) as failure:
        _client(c, "a").gossip()
    assert failure.value.status == 409 and "bus" in str(failure.value)
