"""The chaos suite: real node processes behind fault proxies, net_ticktime 1 s.

Every wait is on a condition (`Cluster.wait_for`), never a sleep. Timeouts are generous bounds
(a partition shows after about net_ticktime, 1 s), so a slow machine makes a test slower, not
red.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from rabbitry.testing.cluster import NETWORKS, Cluster
from rabbitry.testing.history import History, check, collect
from rabbitry.testing.netns import unavailable as netns_unavailable
from rabbitry.testing.workload import STOP_FILE, WORKLOAD_TREE

# The partitions_SUITE cases run in both network modes: faults made by the fault proxy (user
# space) and by iptables rules in network namespaces (the kernel, as Jepsen does). Where netns
# cannot run (not root, no `ip` or iptables) those cases skip, saying why; RABBITRY_CHAOS_NETNS=0
# turns the second mode off. The five-node cases run in the proxy mode only.
BOTH_MODES = ("test_partitions_suite",) if os.environ.get("RABBITRY_CHAOS_NETNS") != "0" else ()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "network" in metafunc.fixturenames:
        both = metafunc.module.__name__.rpartition(".")[2] in BOTH_MODES
        metafunc.parametrize("network", NETWORKS if both else ("proxy",))


@pytest.fixture
def cluster(cluster: Callable[..., Cluster], network: str) -> Callable[..., Cluster]:
    """The plugin's `cluster` factory, in this test's network mode (skipped, saying why, where
    network="netns" cannot run)."""
    if network == "netns":
        why = netns_unavailable()
        if why:
            pytest.skip(why)

    def make(*args: object, **kwargs: object) -> Cluster:
        kwargs.setdefault("network", network)
        return cluster(*args, **kwargs)

    return make


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/chaos/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.chaos)


class Workload:
    """The acknowledged-writes workload on every node of a cluster, and its checker."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def history(self) -> History:
        c = self.cluster
        return collect({n: c.data_dir(n) for n in c.nodes})

    def acked(self) -> int:
        return len(self.history().acked)

    def wait_acked(self, at_least: int, timeout: float = 20.0) -> None:
        """Wait until the workload has acknowledged `at_least` more operations than now."""
        target = self.acked() + at_least
        self.cluster.wait_for(lambda: self.acked() >= target, timeout, f"{target} acks")

    def stop(self) -> None:
        """Stop the writers inventing operations."""
        for node in self.cluster.nodes:
            (self.cluster.data_dir(node) / STOP_FILE).touch()

    def converged(self) -> bool:
        history = self.history()
        stores = list(history.stores.values())
        return all(s == stores[0] for s in stores) and set(history.acked) <= stores[0]

    def stop_and_check(self, *, quorum: bool, timeout: float = 30.0) -> History:
        """Stop writing, wait for the stores to converge, then check the whole history."""
        self.stop()
        c = self.cluster
        try:
            c.wait_for(self.converged, timeout, "the stores to converge")
        finally:
            history = self.history()
        return check(history, len(c.nodes), quorum=quorum, faults=c.faults)


@pytest.fixture
def workload_cluster(cluster: Callable[..., Cluster]) -> Callable[..., tuple[Cluster, Workload]]:
    """`workload_cluster(n, partition_handling)`: a cluster running the workload tree."""

    def make(n: int = 3, partition_handling: object = "pause_minority") -> tuple[Cluster, Workload]:
        c = cluster(n, partition_handling=partition_handling, tree=WORKLOAD_TREE)
        return c, Workload(c)

    return make


def partitions(c: Cluster, node: str) -> list[str]:
    return c.status(node)["partitions"]


def healed(c: Cluster, timeout: float = 30.0) -> None:
    """Every node sees every node running, none paused, no partition recorded."""

    def clear() -> bool:
        return all(
            (st := c.status(n))["running"] == c.nodes and not st["paused"] and not st["partitions"]
            for n in c.nodes
        )

    c.wait_for(clear, timeout, "every node running, none paused, no partitions")


def sees(c: Cluster, a: str, b: str) -> bool:
    """Whether node a has b in its running list."""
    return c.resolve(b) in c.running(a)
