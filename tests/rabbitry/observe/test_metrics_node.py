"""GET /metrics of one real node started in this process: every family of DESIGN.md's table
with its type and labels, a restart counted, and a slow part that leaves out only its own
series. (tests/rabbitry/observe/test_metrics_cluster.py scrapes node processes that are cut
off and paused.)"""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rabbitry.node import Node
from rabbitry.node_config import node_config_from_mapping
from tests.waiting import wait_until

# name -> (type, labels), exactly as DESIGN.md's table "Metrics and the management page"
REQUIRED = {
    "rabbitry_identity_info": ("gauge", {"rabbitry_node", "rabbitry_cluster"}),
    "rabbitry_build_info": ("gauge", {"version"}),
    "rabbitry_cluster_members": ("gauge", {"role"}),
    "rabbitry_cluster_running_members": ("gauge", set()),
    "rabbitry_node_paused": ("gauge", set()),
    "rabbitry_partitions": ("gauge", set()),
    "rabbitry_dist_peer_up": ("gauge", {"peer"}),
    "rabbitry_dist_node_down_total": ("counter", {"peer", "reason"}),
    "rabbitry_alarms_memory_used_watermark": ("gauge", set()),
    "rabbitry_alarms_free_disk_space_watermark": ("gauge", set()),
    "rabbitry_supervisor_restarts_total": ("counter", {"supervisor", "child"}),
    "rabbitry_supervisor_children": ("gauge", {"supervisor", "state"}),
    "rabbitry_gossip_alive_workers": ("gauge", set()),
    "rabbitry_failover_master_info": ("gauge", {"master"}),
    "rabbitry_failover_switches_total": ("counter", set()),
}


def scrape(address: str, accept: str = "") -> tuple[dict[str, Any], str]:
    """{family name as written: family} from GET /metrics, and the raw text."""
    host, _, port = address.rpartition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("GET", "/metrics", headers={"Accept": accept} if accept else {})
        response = connection.getresponse()
        text = response.read().decode()
        assert response.status == 200, text
    finally:
        connection.close()
    families = {}
    for family in text_string_to_metric_families(text):
        # the parser names a counter family without _total; the samples keep it
        name = family.name + "_total" if family.type == "counter" else family.name
        families[name] = family
    return families, text


def complete_scrape(address: str) -> dict[str, Any]:
    """A scrape in which every part answered in time (on a loaded machine one may miss a
    scrape's budget; the next one is taken then)."""
    return complete_scrape_text(address)[0]


def complete_scrape_text(address: str) -> tuple[dict[str, Any], str]:
    def complete() -> tuple[dict[str, Any], str] | None:
        families, text = scrape(address)
        up = families["rabbitry_scrape_part_up"].samples
        return (families, text) if all(s.value == 1.0 for s in up) else None

    return wait_until(complete, f"a scrape of {address} with every part", poll=0.05)


def samples(family: Any) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(s.labels.items())): s.value for s in family.samples}


def test_every_metric_of_the_design_with_its_type_and_labels(node: Node) -> None:
    assert node.metrics_address is not None
    # a restart, so that the restart counter has a series, and gossip is up
    wait_until(
        lambda: scrape(node.metrics_address)[0]["rabbitry_supervisor_restarts_total"].samples,
        "flaky to be restarted",
        poll=0.05,
    )
    families, text = complete_scrape_text(node.metrics_address)
    for name, (kind, labels) in REQUIRED.items():
        assert name in families, f"{name} missing from:\n{text}"
        family = families[name]
        assert family.type == kind, f"{name}: type {family.type}, expected {kind}"
        assert family.documentation.strip(), f"{name} has no HELP text"
        for sample in family.samples:
            assert set(sample.labels) == labels, f"{name}: labels {sample.labels}"
    identity = samples(families["rabbitry_identity_info"])
    key = (("rabbitry_cluster", "m@127.0.0.1"), ("rabbitry_node", "m@127.0.0.1"))
    assert identity == {key: 1.0}
    members = samples(families["rabbitry_cluster_members"])
    assert members == {(("role", "core"),): 1.0, (("role", "ephemeral"),): 0.0}
    assert samples(families["rabbitry_cluster_running_members"]) == {(): 1.0}
    assert samples(families["rabbitry_node_paused"]) == {(): 0.0}
    assert samples(families["rabbitry_partitions"]) == {(): 0.0}
    children = samples(families["rabbitry_supervisor_children"])
    assert children[(("state", "running"), ("supervisor", "m@127.0.0.1"))] >= 6
    assert (("state", "running"), ("supervisor", "app")) in children
    assert samples(families["rabbitry_gossip_alive_workers"]) == {(): 0.0}  # no other node
    assert samples(families["rabbitry_mnesia_running_db_nodes"]) == {(): 1.0}


def test_restarts_are_counted_per_supervisor_and_child(node: Node) -> None:
    assert node.metrics_address is not None

    def restarts() -> float:
        family = complete_scrape(node.metrics_address)["rabbitry_supervisor_restarts_total"]
        return samples(family).get((("child", "flaky"), ("supervisor", "app")), 0.0)

    first = wait_until(restarts, "a first restart of flaky", poll=0.05)
    wait_until(lambda: restarts() > first, "the counter to go up with the next restart", poll=0.05)


def test_a_part_that_does_not_answer_leaves_out_only_its_own_series(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node monitor stuck in a handler (as behind a hung dist send): the scrape still
    answers, without the monitor's series, and says which part was missing."""
    assert node.metrics_address is not None
    monitor = node.parts.monitor._actor_weakref()
    real = monitor.get_status
    release = time.monotonic() + 3.0

    def stuck() -> dict[str, Any]:
        time.sleep(max(0.0, release - time.monotonic()))
        return real()

    monkeypatch.setattr(monitor, "get_status", stuck)

    def without_the_monitor() -> dict[str, Any] | None:
        families, _text = scrape(node.metrics_address)
        part_up = samples(families["rabbitry_scrape_part_up"])
        # on a loaded machine another part may miss a scrape too: wait for one where it did not
        if part_up.get((("part", "supervision"),)) != 1.0:
            return None
        return families

    families = wait_until(
        without_the_monitor, "a scrape with the supervision tree", timeout=2.5, poll=0.05
    )
    assert "rabbitry_node_paused" not in families
    assert "rabbitry_cluster_members" not in families
    assert "rabbitry_identity_info" in families
    assert "rabbitry_supervisor_children" in families
    assert "rabbitry_dist_peer_up" in families
    assert samples(families["rabbitry_scrape_part_up"])[(("part", "node_monitor"),)] == 0.0
    monkeypatch.setattr(monitor, "get_status", real)
    wait_until(lambda: time.monotonic() > release + 0.1, "the stuck call to end", poll=0.05)
    wait_until(
        lambda: "rabbitry_node_paused" in scrape(node.metrics_address)[0],
        "the monitor's series back",
        poll=0.05,
    )


def test_openmetrics_when_asked(node: Node) -> None:
    assert node.metrics_address is not None
    _families, text = scrape(node.metrics_address, accept="application/openmetrics-text")
    assert text.rstrip().endswith("# EOF")
    assert "rabbitry_identity_info" in text


def test_a_malformed_metrics_address_names_the_key(tmp_path: Path) -> None:
    from rabbitry.node_config import NodeConfigError

    with pytest.raises(NodeConfigError) as caught:
        node_config_from_mapping(
            {"node": "a@127.0.0.1", "listen": "127.0.0.1:0", "cookie": "c" * 20, "metrics": "nope"},
            file="a.yaml",
            base_dir=tmp_path,
        )
    assert caught.value.key_path == "metrics"
    assert "host:port" in str(caught.value)


def test_a_taken_metrics_address_exits_2_naming_the_key(tmp_path: Path) -> None:
    cookie = tmp_path / "cookie"
    cookie.write_text("taken-test-cookie")
    os.chmod(cookie, 0o600)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = tmp_path / "a.yaml"
        config.write_text(
            "node: a@127.0.0.1\nlisten: 127.0.0.1:0\ncookie_file: ./cookie\n"
            f"metrics: 127.0.0.1:{port}\n"
        )
        done = subprocess.run(
            [sys.executable, "-m", "rabbitry", "node", "start", "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 2, done.stderr
    assert f"a.yaml: metrics: cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "READY" not in done.stdout


def test_the_dashboard_and_the_alerts_use_only_served_names(node: Node) -> None:
    """Every rabbitry_* name (metric or label) in examples/grafana/rabbitry.json and
    examples/prometheus/alerts.yml is served."""
    import json
    import re

    assert node.metrics_address is not None
    served = set()
    for family in text_string_to_metric_families(complete_scrape_text(node.metrics_address)[1]):
        served |= {family.name, *(s.name for s in family.samples)}
        served |= {label for s in family.samples for label in s.labels}  # rabbitry_node, ...
        if family.type == "counter":  # a counter with no sample yet still has its name
            served.add(family.name + "_total")
    examples = Path(__file__).resolve().parents[3] / "examples"
    dashboard = json.loads((examples / "grafana" / "rabbitry.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs.append((examples / "prometheus" / "alerts.yml").read_text())
    used = {name for expr in exprs for name in re.findall(r"\brabbitry_[a-z_]+", expr)}
    assert used, "no rabbitry_ names found"
    assert used <= served, f"not served: {sorted(used - served)}"


def test_refusals_are_counted_by_reason_and_put_on_the_timeline(node: Node) -> None:
    """A second process claiming this node's name (here: a raw handshake with another
    creation) is refused: rabbitry_dist_refused_total{reason="name_in_use"} and a `refused`
    entry on the management page's timeline."""
    from monitors.dist.handshake import Connector, Failed

    host, _, port = node.dist_address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        core = Connector(node.config.cookie, node.name, 77, node.name, nonce=b"\x07" * 32)
        step = core.start()
        while step.verdict is None:
            step = core.feed(sock.recv(4096))
            sock.sendall(step.out)
    assert step.verdict == Failed("name_in_use", node.dist_address)
    family = complete_scrape(node.metrics_address)["rabbitry_dist_refused_total"]
    assert samples(family)[(("reason", "name_in_use"),)] >= 1
    assert [e for e in node.observations.timeline(50) if e["kind"] == "refused"]
