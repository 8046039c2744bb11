"""examples/prometheus/alerts.yml, checked by promtool against real scrapes.

The series promtool feeds the rules are what real nodes served: the in-process node `m`
(both alarms set, a supervisor giving up, a child restarting), and the cluster's nodes with
c cut off and paused. Each scraped sample becomes a promtool input series (a counter as its
two scraped values, then the second one held), labelled with instance and job as a
Prometheus scrape would. promtool must be installed (Debian's `prometheus` package).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from rabbitry.node import Node
from rabbitry.testing.cluster import Cluster
from tests.rabbitry.observe.conftest import metrics_address
from tests.rabbitry.observe.test_metrics_node import complete_scrape, scrape
from tests.services import services_required
from tests.waiting import wait_until

pytestmark = pytest.mark.slow

ALERTS = Path(__file__).resolve().parents[3] / "examples" / "prometheus" / "alerts.yml"


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        message = "promtool is not installed (apt-get install prometheus)"
        if services_required():
            pytest.fail(f"RABBITRY_REQUIRE_SERVICES=1: {message}", pytrace=False)
        pytest.skip(message)
    return path


def series(instance: str, first: dict[str, Any], second: dict[str, Any]) -> list[dict[str, str]]:
    """promtool input_series from two scrapes of one node (1 m apart in promtool's time)."""
    out = []
    for name, family in second.items():
        if not name.startswith("rabbitry_"):
            continue
        before = {tuple(sorted(s.labels.items())): s.value for s in first.get(name, family).samples}
        for sample in family.samples:
            key = tuple(sorted(sample.labels.items()))
            labels = {**sample.labels, "instance": instance, "job": "rabbitry"}
            text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            start = before.get(key, sample.value)
            out.append(
                {"series": f"{sample.name}{{{text}}}", "values": f"{start:g} {sample.value:g}x30"}
            )
    return out


def render(template: str, labels: dict[str, str], value: float) -> str:
    """The two template forms alerts.yml uses, as Prometheus renders them."""
    text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), template)
    return text.replace("{{ $value }}", f"{value:g}")


def test_promtool_accepts_the_rules() -> None:
    done = subprocess.run(
        [promtool(), "check", "rules", str(ALERTS)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_rules_fire_on_what_real_nodes_report(
    node: Node, observed_cluster: Cluster, tmp_path: Path
) -> None:
    tool = promtool()
    assert node.metrics_address is not None

    def gave_up() -> float:
        family = scrape(node.metrics_address)[0]["rabbitry_supervisor_gave_up_total"]
        return sum(s.value for s in family.samples if s.labels["supervisor"] == "fragile")

    wait_until(gave_up, "fragile to give up once", poll=0.1)
    m_first = complete_scrape(node.metrics_address)
    count = gave_up()
    wait_until(lambda: gave_up() > count, "fragile to give up again", poll=0.1)
    m_second = complete_scrape(node.metrics_address)

    c = observed_cluster
    c.partition(["a", "b"], ["c"])
    try:
        c.wait_for(lambda: c.status("c")["paused"], 20, "c paused")
        c.wait_for(lambda: len(c.status("a")["running"]) == 2, 20, "a to see c gone")
        cut = {n: complete_scrape(metrics_address(c, n)) for n in ("a", "c")}
    finally:
        c.heal()
    input_series = series("m", m_first, m_second)
    for name, families in cut.items():
        input_series += series(name, families, families)

    rules = {
        rule["alert"]: rule for rule in yaml.safe_load(ALERTS.read_text())["groups"][0]["rules"]
    }

    def alert(
        name: str, instance: str, severity: str, value: float = 1.0, **labels: str
    ) -> dict[str, Any]:
        labels = {"instance": instance, "job": "rabbitry", **labels}
        return {
            "exp_labels": {"alertname": name, "severity": severity, **labels},
            "exp_annotations": {
                key: render(text, labels, value)
                for key, text in rules[name].get("annotations", {}).items()
            },
        }

    def running(n: str) -> float:
        return cut[n]["rabbitry_cluster_running_members"].samples[0].value

    def expect(name: str, *alerts: dict[str, Any]) -> dict[str, Any]:
        return {"eval_time": "5m", "alertname": name, "exp_alerts": list(alerts)}

    partitioned = [
        alert(
            "RabbitryNetworkPartition",
            n,
            "critical",
            families["rabbitry_partitions"].samples[0].value,
        )
        for n, families in cut.items()
        if families["rabbitry_partitions"].samples[0].value > 0
    ]
    tests = {
        "rule_files": [str(ALERTS)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": input_series,
                "alert_rule_test": [
                    expect("RabbitryNodePaused", alert("RabbitryNodePaused", "c", "warning")),
                    expect(
                        "RabbitryCoreMembersNotRunning",
                        alert("RabbitryCoreMembersNotRunning", "a", "warning", running("a")),
                        alert("RabbitryCoreMembersNotRunning", "c", "warning", running("c")),
                    ),
                    expect("RabbitryMemoryAlarm", alert("RabbitryMemoryAlarm", "m", "critical")),
                    expect("RabbitryDiskAlarm", alert("RabbitryDiskAlarm", "m", "critical")),
                    expect(
                        "RabbitrySupervisorGaveUp",
                        alert("RabbitrySupervisorGaveUp", "m", "critical", supervisor="fragile"),
                    ),
                    expect("RabbitryNetworkPartition", *partitioned),
                ],
            }
        ],
    }
    path = tmp_path / "alerts_test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    try:
        done = subprocess.run(
            [tool, "test", "rules", str(path)], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        c.wait_until_formed(30)
