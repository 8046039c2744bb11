"""Scraping real node processes while one is cut off, paused and hung."""

from __future__ import annotations

import time

import pytest

from rabbitry.testing.cluster import Cluster
from tests.rabbitry.observe.conftest import metrics_address
from tests.rabbitry.observe.test_metrics_node import complete_scrape, samples, scrape

pytestmark = pytest.mark.slow


def value(cluster: Cluster, node: str, name: str, **labels: str) -> float | None:
    family = complete_scrape(metrics_address(cluster, node)).get(name)
    if family is None:
        return None
    return samples(family).get(tuple(sorted(labels.items())))


def downs(cluster: Cluster, node: str, peer: str) -> float:
    """NodeDown events `node` counted for `peer`, every reason together."""
    family = complete_scrape(metrics_address(cluster, node))["rabbitry_dist_node_down_total"]
    return sum(s.value for s in family.samples if s.labels["peer"] == peer)


def test_a_cut_off_node_is_seen_paused_and_down_then_back(observed_cluster: Cluster) -> None:
    c = observed_cluster
    assert value(c, "a", "rabbitry_cluster_running_members") == 3.0
    assert value(c, "a", "rabbitry_dist_peer_up", peer="c@127.0.0.1") == 1.0
    downs_before = downs(c, "a", "c@127.0.0.1")
    c.partition(["a", "b"], ["c"])
    try:
        c.wait_for(lambda: value(c, "c", "rabbitry_node_paused") == 1.0, 20, "c paused")
        c.wait_for(
            lambda: value(c, "a", "rabbitry_dist_peer_up", peer="c@127.0.0.1") == 0.0,
            20,
            "a to see c down",
        )
        assert value(c, "a", "rabbitry_cluster_running_members") == 2.0
        assert value(c, "a", "rabbitry_node_paused") == 0.0
        assert downs(c, "a", "c@127.0.0.1") >= downs_before + 1
    finally:
        c.heal()
    c.wait_until_formed(30)
    c.wait_for(lambda: value(c, "c", "rabbitry_node_paused") == 0.0, 20, "c resumed")
    assert value(c, "c", "rabbitry_cluster_running_members") == 3.0


def test_a_scrape_does_not_wait_for_a_hung_peer(observed_cluster: Cluster) -> None:
    """c frozen (SIGSTOP) with its sockets open: a's scrape answers at once, not after
    net_ticktime, and has all of a's series."""
    c = observed_cluster
    c.stop("c")
    try:
        seen = []
        for _ in range(5):  # on a loaded machine a part can miss one scrape's budget
            started = time.monotonic()
            families, _text = scrape(metrics_address(c, "a"))
            took = time.monotonic() - started
            # a generous bound, only to catch a scrape that waits on c (a dist call would wait
            # for its timeout; gathering gives up after its budget and drops the part)
            assert took < 2.0, f"the scrape took {took:.3f} s"
            assert "rabbitry_identity_info" in families
            seen.append("rabbitry_cluster_running_members" in families)
            if seen[-1]:
                break
        assert any(seen), "no scrape had the node monitor's series"
    finally:
        c.cont("c")
    c.wait_until_formed(30)
