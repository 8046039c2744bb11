"""One 3-node cluster (real node processes behind fault proxies, with `metrics:`) shared by
the metrics and management page tests of this package, to keep the suite short. Every test
that cuts it heals it and waits until it has formed again before it ends."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from rabbitry.testing.cluster import Cluster, ClusterFactory, faultproxy_available


@pytest.fixture(scope="session")
def observed_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if not faultproxy_available():
        pytest.skip("rabbitry faultproxy not available")
    factory = ClusterFactory(tmp_path_factory.mktemp("observed"))
    try:
        yield factory(3, "pause_minority", 1.0, config={"metrics": "127.0.0.1:0"})
    finally:
        factory.close()


def metrics_address(cluster: Cluster, node: str) -> str:
    """The node's metrics host:port, from its READY line."""
    for line in cluster.proc(node).stdout():
        found = re.search(r"\bmetrics=(\S+)", line)
        if line.startswith("READY") and found:
            return found.group(1)
    raise AssertionError(f"no metrics= in {cluster.resolve(node)}'s READY line")
