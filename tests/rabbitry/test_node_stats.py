"""NodeStats under the node's root supervisor (rest_for_one), without node processes.

The heal benchmark's lost control API (docs/testing.md, "Heal rounds that never recover"): a
pause stopped the application between the two calls of the autoheal weight, NodeStats crashed
on ActorDeadError, rest_for_one stopped the control API after it, and NodeStats's restart
asked the root supervisor for the weight from on_start, while that supervisor was busy
starting it: every restart timed out, so the control API never came back."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pykka import ActorDeadError

from rabbitry.node import NodeStats
from rabbitry.node_config import Alarms
from supervisors import ChildSpec, Process, Supervisor, SupFlags
from tests.waiting import wait_until


class _Monitor(Process):
    """Stands in for the NodeMonitor: records the weights it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.weights: list[int] = []

    def set_weight(self, weight: int) -> None:
        self.weights.append(weight)

    def set_alarm(self, resource: str, active: bool) -> None:
        pass

    def weights_seen(self) -> list[int]:
        return list(self.weights)


class _After(Process):
    """Stands in for the control API, the child after NodeStats."""


@pytest.fixture
def tree(tmp_path: Path) -> Any:
    """The root (monitor, node_stats, control) with a weight that asks the root, as the
    node's does; `fail` makes the next weight raise that exception."""
    parts: dict[str, Any] = {"fail": None}

    def weight() -> int:
        fail, parts["fail"] = parts["fail"], None
        if fail is not None:
            raise fail
        root = parts.get("root")
        if root is None:  # first start: Supervisor.start has not returned the root yet
            return 0
        return len(root.proxy().which_children().get(timeout=1))

    def start_monitor() -> Any:
        parts["monitor"] = _Monitor.start_link()
        return parts["monitor"]

    config = SimpleNamespace(data_dir=tmp_path, alarms=Alarms())
    root = Supervisor.start(
        SupFlags("rest_for_one", intensity=3, period=10.0),
        [
            ChildSpec("monitor", start_monitor),
            ChildSpec("node_stats", lambda: NodeStats.start_link(parts["monitor"], config, weight)),
            ChildSpec("control", _After.start_link),
        ],
    )
    parts["root"] = root
    yield parts
    root.stop()


def _refs(root: Any) -> dict[str, Any]:
    return {c.id: c.ref for c in root.proxy().which_children().get(timeout=5)}


def test_a_weight_lost_to_a_pause_keeps_node_stats_and_the_control_api(tree: Any) -> None:
    before = _refs(tree["root"])
    tree["fail"] = ActorDeadError("the app supervisor ended before handling it")
    before["node_stats"].ask("tick")  # the tick in which the pause won the race
    assert _refs(tree["root"]) == before
    before["node_stats"].ask("tick")  # and the next tick weighs again
    assert tree["monitor"].proxy().weights_seen().get(timeout=5)[-1] == 3


def test_node_stats_restarts_under_its_busy_supervisor(tree: Any) -> None:
    before = _refs(tree["root"])
    tree["fail"] = RuntimeError("some other crash")
    before["node_stats"].tell("tick")  # NodeStats crashes: rest_for_one restarts it and control

    def restarted() -> bool:
        now = _refs(tree["root"])
        return all(
            now[k] not in (None, "restarting", before[k]) and now[k].is_alive()
            for k in ("node_stats", "control")
        )

    wait_until(restarted, "node_stats and the control API restarted")
    assert _refs(tree["root"])["monitor"] == before["monitor"]
