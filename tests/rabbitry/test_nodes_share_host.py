"""Several `rabbitry node start` processes on one host, all running the SAME tree file with an
OS command child: each node keeps its child's pid and log files under its own data_dir, so all
of them run (issue 14.1). And a node whose application cannot start says why in
`rabbitry cluster status`."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import psutil
import pytest

from rabbitry.control import STATUS_KEYS
from rabbitry.testing.cluster import COOKIE, Cluster, ClusterFactory, faultproxy_available

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not faultproxy_available(), reason="rabbitry faultproxy not available"),
]

SLEEPER_TREE = """\
supervisor:
  children:
    - id: sleeper
      command: [sleep, "100000"]
"""


@pytest.fixture(scope="module")
def factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterFactory]:
    made = ClusterFactory(tmp_path_factory.mktemp("share-host"))
    try:
        yield made
    finally:
        made.close()


def _sleeper(cluster: Cluster, node: str) -> dict:
    """The pid record of node's sleeper: its pid file lives under the node's data_dir."""
    pid_file = cluster.data_dir(node) / "run" / "root.sleeper.pid"
    record = json.loads(pid_file.read_text())
    assert psutil.Process(record["pid"]).cmdline() == ["sleep", "100000"]
    return record


def test_three_nodes_with_one_tree_file_all_run_their_os_child(factory: ClusterFactory) -> None:
    cluster = factory(3, tree=SLEEPER_TREE)  # waits until all three see all three running
    records = {
        node: cluster.wait_for(lambda n=node: _sleeper(cluster, n)) for node in cluster.nodes
    }
    assert len({r["pid"] for r in records.values()}) == 3
    for node in cluster.nodes:
        app = cluster.client(node).app()
        assert app["state"] == "running" and app["last_error"] is None
        assert (cluster.data_dir(node) / "run" / "root.sleeper.log").exists()


def test_an_app_that_cannot_start_says_why_in_cluster_status(factory: ClusterFactory) -> None:
    # Two nodes, one tree file: the default-named child runs on both, but the tree also names
    # one pid file explicitly, and only one node can hold it. The other stays up, not running.
    tree = SLEEPER_TREE + (
        "    - id: pinned\n"
        '      command: [sleep, "100001"]\n'
        "      pid_file: ./pinned.pid\n"  # relative to the tree file: the same file for both
    )
    cluster = factory(2, tree=tree, wait=False)

    def one_failed() -> str:
        apps = {node: cluster.client(node).app() for node in cluster.nodes}
        states = sorted(app["state"] for app in apps.values())
        failed = [n for n, app in apps.items() if app["last_error"]]
        return failed[0] if states == ["running", "stopped"] and failed else ""

    loser = cluster.wait_for(one_failed, what="one node running, the other failed")
    error = cluster.client(loser).app()["last_error"]["error"]
    assert "pinned.pid is locked by another running OsProcess" in error

    base = [sys.executable, "-m", "rabbitry", "cluster", "status"]
    address = cluster.client(loser)
    cookie = cluster.root / "cookie"
    assert cookie.read_bytes() == COOKIE
    args = [*base, "--control", f"{address.host}:{address.port}", "--cookie-file", str(cookie)]
    text = subprocess.run(args, capture_output=True, text=True, timeout=60, check=True).stdout
    assert "application    stopped" in text
    assert "last error" in text and "pinned.pid is locked" in text
    as_json = subprocess.run(
        [*args, "--json"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert list(json.loads(as_json)) == list(STATUS_KEYS)  # the contract's keys, no more
