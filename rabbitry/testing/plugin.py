"""A pytest plugin: the `cluster` fixture, real node processes behind fault proxies.

Load it with `pytest -p rabbitry.testing.plugin`, or `pytest_plugins = ["rabbitry.testing.plugin"]`
in a top-level conftest.py. See docs/testing.md.

    def test_minority_pauses(cluster):
        c = cluster(3, partition_handling="pause_minority")
        c.partition(["a"], ["b", "c"])
        c.wait_for(lambda: c.status("a")["paused"], 15, "a paused")

The fixture skips the test when no Toxiproxy-compatible server can be had (no `$TOXIPROXY_URL`
and no `rabbitry faultproxy` command). Everything it started is torn down after the test,
pass or fail: node processes, proxies, and the proxy server.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rabbitry.testing.cluster import Cluster, ClusterFactory, faultproxy_available
from rabbitry.testing.netns import leftovers, our_prefix, unavailable

__all__ = ["Cluster", "ClusterFactory", "cluster"]

SKIP_REASON = "rabbitry faultproxy not available"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes more than a few seconds")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterFactory]:
    """A factory: `cluster(n, partition_handling="pause_minority", net_ticktime=1.0, tree=None,
    network="proxy")` starts n nodes (a@127.0.0.1, ...), waits until they form a cluster,
    returns a Cluster. `network="netns"` puts each node in a network namespace and cuts with
    iptables (root only). A test that leaves a namespace or bridge of ours behind fails."""
    if not faultproxy_available():
        pytest.skip(f"{SKIP_REASON} (no `python -m rabbitry faultproxy`, no $TOXIPROXY_URL)")
    factory = ClusterFactory(tmp_path / "rabbitry-cluster")
    try:
        yield factory
    finally:
        factory.close()
        if unavailable() is None:
            left = leftovers(our_prefix())
            if left:  # a namespace, bridge or veth of ours outlived the test: fail it
                pytest.fail(f"netns teardown left {', '.join(left)}", pytrace=False)
