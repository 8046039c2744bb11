"""What the metrics and management page tests of this package share, to keep the suite short
(package-scoped: both end with the package's last test):

- `observed_cluster`: 3 real node processes behind fault proxies, with `metrics:`. Every test
  that cuts it heals it and waits until it has formed again before it ends.
- `node`: one node in this process (m@127.0.0.1) whose application has a child that crashes
  every half second, a supervisor that gives up each time, and both resource alarms set
  (thresholds no machine meets), so that every series has something to show.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import pytest

from rabbitry.node import Node, wait_ready
from rabbitry.node_config import node_config_from_mapping
from rabbitry.testing.cluster import Cluster, ClusterFactory, faultproxy_available

TREE = """\
supervisor:
  intensity: 100
  period: 10s
  children:
    - id: idle
      start: "rabbitry.examples_workers:Idle"
    - id: flaky
      start: "rabbitry.examples_workers:Flaky"
      kwargs: {name: flaky, crash_after: 0.5, every: 0.1}
      shutdown: brutal_kill
    - id: fragile
      supervisor:
        intensity: 0
        period: 1s
        children:
          - id: breaks
            start: "rabbitry.examples_workers:Flaky"
            kwargs: {name: breaks, crash_after: 0.7, every: 0.1}
            shutdown: brutal_kill
"""


@pytest.fixture(scope="package")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    root = tmp_path_factory.mktemp("metrics-node")
    cookie = root / "cookie"
    cookie.write_text("metrics-node-test-cookie")
    os.chmod(cookie, 0o600)
    (root / "tree.yaml").write_text(TREE)
    config = node_config_from_mapping(
        {
            "node": "m@127.0.0.1",
            "listen": "127.0.0.1:0",
            "cookie_file": "./cookie",
            "control": "127.0.0.1:0",
            "metrics": "127.0.0.1:0",
            "bus": f"memory://metrics-test-{os.getpid()}",
            "mnesia": {},
            "tree": "./tree.yaml",
            # no machine has this little memory in use or this much free disk: both alarms set
            "alarms": {"memory_high_watermark": 0.000001, "disk_free_limit": "1000000TB"},
        },
        file=str(root / "m.yaml"),
        base_dir=root,
    )
    started = Node.start(config)
    try:
        wait_ready(started)
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="package")
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
